// The delivery side's first step (docs/events.md): committed events become what is due to each
// subscribed endpoint (a `deliveries` row each), the writer's `orders.created` rows become one
// `order.created` per order, and a draw's `draws.lost` rows one `draw.lost` per entrant. One process dispatches at a time (a transaction-scoped advisory lock:
// the others skip, Postgres releases it if the holder dies), so an order's events get their
// deliveries in sequence order: an `order.paid` is never due before the `order.created` of its
// order, which a row of the batch would still hold.
import type { Pool } from '../runtime/db.js';
import { withTransaction } from '../runtime/db.js';
import { deliverable, DRAWS_LOST, ORDERS_CREATED } from './record.js';

const DISPATCH_LOCK = 7_042_017;

/**
 * Dispatches up to `limit` of the oldest undispatched events; returns how many (0: none left, or
 * another process holds the lock; with `wait`, it waits for that process's pass to commit). The events taken are the lowest ids, fixed by the first
 * statement: one committed later with a lower id is about another order (an order's events commit
 * in sequence order), and the next pass takes it.
 */
export async function dispatchEvents(pool: Pool, limit = 500, wait = false): Promise<number> {
  return withTransaction(pool, async (client) => {
    if (wait) await client.query('select pg_advisory_xact_lock($1)', [DISPATCH_LOCK]);
    else {
      const lock = await client.query<{ ok: boolean }>('select pg_try_advisory_xact_lock($1) as ok', [DISPATCH_LOCK]);
      if (!lock.rows[0]!.ok) return 0;
    }
    const next = await client.query<{ id: string }>(
      'select id from events where dispatched_at is null order by id limit $1 for update',
      [limit],
    );
    if (next.rows.length === 0) return 0;
    await client.query(
      `with taken as (
         update events set dispatched_at = now() where id = any($1::bigint[]) returning id, type, sale_id, order_id, order_ids, payload, created_at
       ),
       fanned as (
         insert into events (id, type, sale_id, order_id, payload, created_at, dispatched_at) overriding system value
         select t.id + o.n, 'order.created', t.sale_id, o.order_id, '{}'::jsonb, t.created_at, now()
         from taken t cross join unnest(t.order_ids) with ordinality as o(order_id, n)
         where t.type = '${ORDERS_CREATED}'
         returning id, type, order_id
       ),
       lost as (
         insert into events (id, type, sale_id, payload, created_at, dispatched_at) overriding system value
         select t.id + x.n, 'draw.lost', t.sale_id, x.data, t.created_at, now()
         from taken t cross join jsonb_array_elements(t.payload->'entrants') with ordinality as x(data, n)
         where t.type = '${DRAWS_LOST}'
         returning id, type, order_id
       ),
       due as (
         select id, type, order_id from taken where ${deliverable('type')}
         union all select id, type, order_id from fanned
         union all select id, type, order_id from lost
       )
       insert into deliveries (event_id, endpoint_id, order_id)
       select d.id, ep.id, d.order_id from due d
         join endpoints ep on ep.enabled and (cardinality(ep.event_types) = 0 or d.type = any(ep.event_types))
       order by d.id
       on conflict do nothing`,
      [next.rows.map((r) => r.id)],
    );
    return next.rows.length;
  });
}

/**
 * Dispatches until nothing is left (tests, `flashsale events replay`), waiting for a delivery
 * process's pass in flight rather than returning while its events are not yet committed.
 */
export async function dispatchAll(pool: Pool): Promise<void> {
  while ((await dispatchEvents(pool, 500, true)) > 0);
}
