// What a receiver gets for an event (docs/events.md): the envelope, and the data of an order event
// read from the order's row and sale. An order's id, buyer, qty and deadline and its price (its
// variant's own, else its sale's) and currency are never updated once written, so they read the
// same at delivery as at the change; its status is the one the event's type moved it to
// (payment.refund_due keeps the one it found).
import type { Pool, PoolClient } from '../runtime/db.js';
import type { EventType } from './record.js';

export interface EventBody {
  type: EventType;
  version: number;
  sequence: number;
  sale_id: string;
  timestamp: string;
  data: Record<string, unknown>;
}

/** The state each order event's type leaves its order in. */
const STATUS_AFTER: Partial<Record<EventType, string>> = {
  'order.created': 'pending',
  'order.paid': 'paid',
  'order.expired': 'expired',
  'order.cancelled': 'cancelled',
};
const statusAfter = `case e.type ${Object.entries(STATUS_AFTER)
  .map(([type, status]) => `when '${type}' then '${status}'`)
  .join(' ')} end`;

const isoTime = (expr: string) => `to_char(${expr} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

const ORDER_DATA = `jsonb_build_object('order_id', o.id, 'sale_id', o.sale_id, 'buyer', o.user_id, 'qty', o.qty,
  'status', ${statusAfter}, 'amount', coalesce(v.price, s.price) * o.qty, 'currency', s.currency, 'deadline', ${isoTime('o.expires_at')})`;

/** The bodies of events `ids`, in sequence order (an id with no event is left out). */
export async function eventBodies(db: Pool | PoolClient, ids: number[]): Promise<EventBody[]> {
  const res = await db.query<{ body: EventBody }>(
    `select jsonb_build_object('type', e.type, 'version', e.version, 'sequence', e.id, 'sale_id', e.sale_id,
              'timestamp', ${isoTime('e.created_at')},
              'data', case when e.order_id is null then e.payload else ${ORDER_DATA} || e.payload end) as body
     from events e left join orders o on o.id = e.order_id left join sales s on s.id = o.sale_id
       left join sale_variants v on v.sale_id = o.sale_id and v.sku = o.sku
     where e.id = any($1::bigint[]) order by e.id`,
    [ids],
  );
  return res.rows.map((r) => r.body);
}
