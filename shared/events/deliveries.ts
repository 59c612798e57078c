// What is due to each endpoint, claimed and settled (docs/events.md). A claim moves a delivery's
// next_at a lease ahead under `for update skip locked`, so several delivery processes never take
// the same one, and one killed mid-send leaves it to be retried when the lease runs out (the only
// way an endpoint gets an event twice). An order's next event waits while an earlier one to the
// same endpoint is pending: a receiver gets an order's events in sequence order.
import type { Pool } from '../runtime/db.js';

export interface Target {
  id: string;
  url: string;
  secret: string;
  /** The secret before a rotation, while its overlap lasts. */
  previousSecret: string | null;
}

export interface Claimed {
  eventId: number;
  attempt: number;
}

/** The enabled endpoints with something due now. */
export async function dueTargets(pool: Pool): Promise<Target[]> {
  const res = await pool.query<Target>(
    `select ep.id, ep.url, ep.secret, case when ep.previous_until > now() then ep.previous_secret end as "previousSecret"
     from endpoints ep
     where ep.enabled and exists (select 1 from deliveries d where d.endpoint_id = ep.id and d.status = 'pending' and d.next_at <= now())
     order by ep.id`,
  );
  return res.rows;
}

/**
 * Takes up to $2 deliveries due to endpoint $1, in the order they came due. An order's delivery is
 * due only when it is the order's oldest pending one. Both steps read an index in its own order and
 * stop early (`deliveries_due` walked to the limit; a `min()` from `deliveries_order`, one probe),
 * so a claim reads a handful of rows with 100,000 pending, whatever Postgres's statistics say.
 */
export const CLAIM = `select d.event_id from deliveries d
  where d.endpoint_id = $1 and d.status = 'pending' and d.next_at <= now()
    and (d.order_id is null or d.event_id = (
      select min(p.event_id) from deliveries p
      where p.endpoint_id = $1 and p.order_id = d.order_id and p.status = 'pending'))
  order by d.next_at, d.event_id limit $2 for update skip locked`;

/** Claims up to `limit` deliveries due to `endpointId` for `leaseMs`; returned oldest event first. */
export async function claimDeliveries(
  pool: Pool,
  endpointId: string,
  limit: number,
  leaseMs: number,
): Promise<Claimed[]> {
  const res = await pool.query<{ event_id: string; attempts: number }>(
    `with c as (${CLAIM})
     update deliveries d set next_at = now() + make_interval(secs => $3 / 1000.0), attempts = d.attempts + 1
     from c where d.endpoint_id = $1 and d.event_id = c.event_id
     returning d.event_id, d.attempts`,
    [endpointId, limit, leaseMs],
  );
  return res.rows
    .map((r) => ({ eventId: Number(r.event_id), attempt: r.attempts }))
    .sort((a, b) => a.eventId - b.eventId);
}

export interface Outcome {
  /** The HTTP status, null when none came back (timeout, refused, reset). */
  status: number | null;
  latencyMs: number;
  error: string | null;
}

const ATTEMPT = `insert into delivery_attempts (event_id, endpoint_id, attempt, status, latency_ms, error)
  values ($1, $2, $3, $4, $5, $6)`;

/** A 2xx: delivered, and the endpoint's run of failures ended. */
export async function delivered(pool: Pool, endpointId: string, c: Claimed, o: Outcome): Promise<void> {
  await pool.query(
    `with d as (
       update deliveries set status = 'delivered', done_at = now(), last_status = $4, last_latency_ms = $5, last_error = null
       where event_id = $1 and endpoint_id = $2 and status = 'pending'
     ),
     ep as (update endpoints set failing_since = null where id = $2 and failing_since is not null)
     ${ATTEMPT}`,
    [c.eventId, endpointId, c.attempt, o.status, o.latencyMs, o.error],
  );
}

/**
 * Anything else: tried again after `retryInMs`, unless the event is older than the horizon (then
 * failed for good: 'failed'); an endpoint failing since longer than the horizon is disabled.
 */
export async function failed(
  pool: Pool,
  endpointId: string,
  c: Claimed,
  o: Outcome,
  retryInMs: number,
  horizonSeconds: number,
): Promise<'retry' | 'failed'> {
  const res = await pool.query<{ status: string }>(
    `with h as (select now() - make_interval(secs => $8) as since),
     d as (
       update deliveries set last_status = $4, last_latency_ms = $5, last_error = $6,
         next_at = now() + make_interval(secs => $7 / 1000.0),
         status = case when e.created_at < h.since then 'failed' else 'pending' end,
         done_at = case when e.created_at < h.since then now() end
       from events e, h
       where deliveries.event_id = $1 and deliveries.endpoint_id = $2 and deliveries.status = 'pending' and e.id = deliveries.event_id
       returning deliveries.status
     ),
     ep as (
       update endpoints set failing_since = coalesce(failing_since, now()),
         enabled = enabled and not coalesce(failing_since < h.since, false),
         disabled_reason = case when enabled and failing_since < h.since
           then 'failing for the whole retry horizon (EVENTS_RETRY_HORIZON_SECONDS)' else disabled_reason end
       from h where id = $2
     ),
     a as (${ATTEMPT})
     select status from d`,
    [c.eventId, endpointId, c.attempt, o.status, o.latencyMs, o.error, retryInMs, horizonSeconds],
  );
  return res.rows[0]?.status === 'failed' ? 'failed' : 'retry';
}
