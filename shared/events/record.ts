// The outbox's writing side (docs/events.md): an event row goes in with the change it reports, in
// the caller's transaction or in the change's own statement (a CTE), never after a commit; so an
// event exists exactly when its change committed. Nothing here waits on delivery.
import type { Pool, PoolClient } from '../runtime/db.js';

/**
 * The writer's one row per batch (sql/0017): fanned out into an `order.created` per order before
 * delivery (dispatch.ts), never delivered itself.
 */
export const ORDERS_CREATED = 'orders.created';
/**
 * A draw's one row per 9,999 entrants who lost at once (recordOver): fanned out into a `draw.lost`
 * per entrant before delivery, never delivered itself.
 */
export const DRAWS_LOST = 'draws.lost';
/** The rows fanned out before delivery, never delivered themselves. */
export const BATCH_TYPES: readonly string[] = [ORDERS_CREATED, DRAWS_LOST];
/** A predicate on an events type column: the row is delivered as it is, no batch row. */
export const deliverable = (type: string) => `${type} not in (${BATCH_TYPES.map((t) => `'${t}'`).join(', ')})`;
/** Orders (entrants) one batch row holds: the ids after its own, up to the next (the sequence steps by 10,000). */
export const ORDERS_PER_ROW = 9999;

export const EVENT_TYPES = [
  'order.created',
  'order.paid',
  'order.expired',
  'order.cancelled',
  'payment.refund_due',
  'refund.marked',
  'draw.won',
  'draw.lost',
  'sale.sold_out',
  'sale.ended',
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

/** An event about an order: its data is read from the order's row and sale, plus `data`. */
export interface OrderEvent {
  type: EventType;
  orderId: string;
  data?: Record<string, unknown>;
}
/** An event about a sale as a whole. */
export interface SaleEvent {
  type: EventType;
  saleId: string;
  data: Record<string, unknown>;
}
export type NewEvent = OrderEvent | SaleEvent;

/**
 * The statement that writes one event of `type` for each order row a CTE `source` returned
 * (columns of orders), in their order of purchase, for a CTE of the changing statement itself: the
 * change and its events are then one statement, atomic without a transaction. The row holds no
 * data: an order's fields never change once written, so body.ts reads them at delivery (building
 * the JSON here halved the writer's drain).
 */
export const orderEventsFrom = (type: EventType, source: string) =>
  `insert into events (type, sale_id, order_id, payload)
   select '${type}', o.sale_id, o.id, '{}'::jsonb from ${source} o order by o.seq`;

/**
 * The statement that records the orders a CTE `source` wrote (columns of orders) as `orders.created`
 * rows, ORDERS_PER_ROW orders a row in order of purchase: one row for a writer's batch (1,000 by default),
 * where a row per order cost the drain a quarter or more.
 */
export const createdEventsFrom = (source: string) =>
  `insert into events (type, sale_id, order_ids, payload)
   select '${ORDERS_CREATED}', min(c.sale_id), array_agg(c.id order by c.seq), '{}'::jsonb
   from (select o.id, o.sale_id, o.seq, (row_number() over (order by o.seq) - 1) / ${ORDERS_PER_ROW} as part
         from ${source} o) c
   group by c.part order by c.part
   returning id`;

/**
 * The writer's sale.sold_out, for a CTE of its batch insert: one row when `soldOut` (a SQL boolean:
 * claim.lua saw no unit left and no winner queued behind this batch) and the batch wrote an order,
 * so a batch re-driven after its commit records none. It reads the count of `created` (the
 * orders.created CTE), so its number comes after theirs, and after every order.created of the batch.
 */
export const soldOutEventFrom = (created: string, saleId: string, soldOut: string) =>
  `insert into events (type, sale_id, payload)
   select 'sale.sold_out', x.id, jsonb_build_object('sale_id', x.id, 'name', x.name)
   from sales x, (select count(*) as n from ${created}) c where ${soldOut} and c.n > 0 and x.id = ${saleId}`;

/** A draw.won per entry row a CTE `source` moved to won (columns of draw_entries): one per winner, as the award itself. */
export const drawWonFrom = (source: string) =>
  `insert into events (type, sale_id, payload)
   select 'draw.won', w.sale_id, jsonb_build_object('sale_id', w.sale_id, 'buyer', w.buyer, 'rank', w.draw_rank,
     'order_id', w.order_id, 'variant', w.sku)
   from ${source} w order by w.draw_rank`;

/**
 * The entry rows a CTE `source` moved to lost (columns of draw_entries) as `draws.lost` rows,
 * ORDERS_PER_ROW entrants a row in rank order, each entrant's draw.lost data in it: a draw's tens of
 * thousands of losers are a few rows in the statement that closes the draw, fanned out at dispatch.
 */
export const lostEventsFrom = (source: string) =>
  `insert into events (type, sale_id, payload)
   select '${DRAWS_LOST}', min(c.sale_id), jsonb_build_object('entrants', jsonb_agg(jsonb_build_object(
     'sale_id', c.sale_id, 'buyer', c.buyer, 'rank', c.draw_rank, 'variant', c.variant, 'second_choice', c.second_choice)
     order by c.draw_rank))
   from (select l.*, (row_number() over (order by l.draw_rank) - 1) / ${ORDERS_PER_ROW} as part from ${source} l) c
   group by c.part order by c.part`;

/**
 * Records `events` in the caller's transaction (one statement, in the given order): they commit or
 * roll back with the change. An order event keeps only its `data` beyond the order's own fields.
 */
export async function recordEvents(client: PoolClient | Pool, events: NewEvent[]): Promise<void> {
  if (events.length === 0) return;
  await client.query(
    `insert into events (type, sale_id, order_id, payload)
     select e.type, coalesce(o.sale_id, e.sale_id), e.order_id, e.data
     from unnest($1::text[], $2::text[], $3::text[], $4::jsonb[]) with ordinality as e(type, sale_id, order_id, data, n)
       left join orders o on o.id = e.order_id
     order by e.n`,
    [
      events.map((e) => e.type),
      events.map((e) => ('saleId' in e ? e.saleId : null)),
      events.map((e) => ('orderId' in e ? e.orderId : null)),
      events.map((e) => JSON.stringify(e.data ?? {})),
    ],
  );
}

/**
 * `change` (a conditional write returning the order it moved, or nothing) followed by its event in
 * the same transaction: what a caller holding one passes instead of the bare change.
 */
export const withOrderEvent =
  <T extends { id: string } | undefined | symbol>(type: EventType, change: (client: PoolClient) => Promise<T>) =>
  async (client: PoolClient): Promise<T> => {
    const moved = await change(client);
    if (moved && typeof moved === 'object') await recordEvents(client, [{ type, orderId: moved.id }]);
    return moved;
  };

/** The sale.ended event of a sale whose end was just brought forward (at its set end, no statement runs: none). */
export const saleEnded = (sale: { id: string; name: string; endsAt?: Date | null }): SaleEvent => ({
  type: 'sale.ended',
  saleId: sale.id,
  data: { sale_id: sale.id, name: sale.name, ended_at: sale.endsAt?.toISOString() ?? null },
});
