// Looking at events and sending them again (`flashsale events list|show|replay`, docs/events.md).
// The batch rows (orders.created, draws.lost) are never shown: their fanned-out events are.
// Events have no index by time (each one cost the writer's drain), so a --since scans: an
// operator's command, not a path.
import type { Pool } from '../runtime/db.js';
import { HttpError } from '../runtime/errors.js';
import { eventBodies, type EventBody } from './body.js';
import { BATCH_TYPES, deliverable } from './record.js';

export interface EventSummary {
  sequence: number;
  type: string;
  saleId: string;
  orderId: string | null;
  createdAt: string;
  delivered: number;
  pending: number;
  failed: number;
}

export interface EventFilter {
  saleId?: string;
  since?: Date;
  endpointId?: string;
}

const WHERE = `${deliverable('e.type')} and e.dispatched_at is not null
  and ($1::text is null or e.sale_id = $1) and ($2::timestamptz is null or e.created_at >= $2)`;

/** The newest `limit` dispatched events matching, newest first, with their deliveries by status. */
export async function listEvents(pool: Pool, f: EventFilter, limit = 50): Promise<EventSummary[]> {
  const res = await pool.query<EventSummary>(
    `select e.id::float8 as sequence, e.type, e.sale_id as "saleId", e.order_id as "orderId",
            to_char(e.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as "createdAt",
            count(d.*) filter (where d.status = 'delivered')::int as delivered,
            count(d.*) filter (where d.status = 'pending')::int as pending,
            count(d.*) filter (where d.status = 'failed')::int as failed
     from events e left join deliveries d on d.event_id = e.id
     where ${WHERE}
     group by e.id order by e.id desc limit $3`,
    [f.saleId ?? null, f.since ?? null, limit],
  );
  return res.rows;
}

export interface Attempt {
  endpointId: string;
  attempt: number;
  at: string;
  status: number | null;
  latencyMs: number;
  error: string | null;
}

/** One event as receivers get it, with every attempt to deliver it. */
export async function showEvent(pool: Pool, sequence: number): Promise<{ body: EventBody; attempts: Attempt[] }> {
  const [body] = await eventBodies(pool, [sequence]);
  if (!body || BATCH_TYPES.includes(body.type)) throw new HttpError('event_not_found', `No event ${sequence}.`);
  const attempts = await pool.query<Attempt>(
    `select endpoint_id as "endpointId", attempt, to_char(at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as at,
            status, latency_ms as "latencyMs", error
     from delivery_attempts where event_id = $1 order by at, id`,
    [sequence],
  );
  return { body, attempts: attempts.rows };
}

/**
 * Makes the matching events due again to the endpoint (or every enabled endpoint subscribed to
 * them), delivered or failed ones included, with a delivery row for an endpoint added after them;
 * returns how many deliveries are due anew. Receivers drop what they have seen by `webhook-id`.
 */
export async function replayEvents(pool: Pool, f: EventFilter): Promise<number> {
  if (f.endpointId !== undefined) {
    const known = await pool.query('select 1 from endpoints where id = $1', [f.endpointId]);
    if (known.rowCount === 0) throw new HttpError('endpoint_not_found', `No endpoint with id "${f.endpointId}".`);
  }
  const res = await pool.query(
    `insert into deliveries (event_id, endpoint_id, order_id)
     select e.id, ep.id, e.order_id from events e
       join endpoints ep on ep.enabled and ($3::text is null or ep.id = $3)
         and (cardinality(ep.event_types) = 0 or e.type = any(ep.event_types))
     where ${WHERE}
     on conflict (event_id, endpoint_id) do update
       set status = 'pending', done_at = null, next_at = now(), attempts = 0
       where deliveries.status <> 'pending'`,
    [f.saleId ?? null, f.since ?? null, f.endpointId ?? null],
  );
  return res.rowCount ?? 0;
}
