// Every runtime statement on `orders`, each a small typed function running one parameterised
// statement. State changes are conditional updates that say what they expect; the row count, or
// the rows returned, is the decision. (The reconciliation's sums and the invariant checker's reads
// stay with their callers: see reconcile.ts and invariants.ts.)
import type { Pool, PoolClient } from '../runtime/db.js';
import type { Winner } from '../runtime/ids.js';
import { createdEventsFrom, orderEventsFrom, soldOutEventFrom } from '../events/record.js';
import { RESTORING, sqlState, sqlStates, TRANSITIONS, type OrderState } from './states.js';

const { write: WRITE, cancelQueued: CANCEL_QUEUED, pay: PAY, expire: EXPIRE, cancel: CANCEL } = TRANSITIONS;

export interface WrittenOrder {
  id: string;
  status: OrderState;
  expiresAt: number;
}

export interface OrderRow {
  id: string;
  sale_id: string;
  user_id: string;
  qty: number;
  sku: string;
  status: OrderState;
  expires_at: Date;
  due: boolean;
}

export interface ClosedOrder {
  id: string;
  saleId: string;
  userId: string;
  qty: number;
  /** The variant whose units it gives back. */
  sku: string;
  lateMs: number;
  /** It expired unpaid (not cancelled): counted against its buyer (MAX_UNPAID_PER_SALE). */
  unpaid: boolean;
}

/** expires_ms: int8 comes back as a string; epoch milliseconds spare a Date parse per row. */
interface WrittenRow {
  id: string;
  status: OrderState;
  expires_ms: string;
}
interface ClosedRow {
  id: string;
  sale_id: string;
  user_id: string;
  qty: number;
  sku: string;
  late_ms: number;
  status: string;
}

export const EXPIRES_MS = '(extract(epoch from expires_at) * 1000)::int8 as expires_ms';

// A winner without a sku (a one-variant sale's) is of the sale's one variant.
const ONE_SKU = `(select sku from sale_variants where sale_id = $1 order by position limit 1)`;
export const INSERT_WINNERS = `insert into orders (id, sale_id, user_id, qty, sku, status, seq, purchased_at, created_at, expires_at)
     select i.id, $1, i.user_id, i.qty, coalesce(i.sku, ${ONE_SKU}, 'default'), ${sqlState(WRITE.to)}, i.seq,
            to_timestamp(i.purchased_ms / 1000.0), date_trunc('milliseconds', now()),
            date_trunc('milliseconds', now()) + make_interval(secs => s.payment_window_seconds)
     from unnest($2::text[], $3::text[], $4::int[], $5::bigint[], $6::float8[], $7::text[]) as i(id, user_id, qty, seq, purchased_ms, sku)
       cross join (select payment_window_seconds from sales where id = $1 for key share) s`;
/**
 * The insert as a CTE, with the orders.created row of the orders it wrote (none for a skipped id),
 * and the sale.sold_out its claim reported ($8).
 */
const written = (insert: string) =>
  `with w as (${insert} returning *), e as (${createdEventsFrom('w')}), o as (${soldOutEventFrom('e', '$1', '$8::boolean')})
   select id, status, ${EXPIRES_MS} from w`;

/** An order id already in the table: the statement wrote nothing. */
function isDuplicateOrder(err: unknown): boolean {
  const e = err as { code?: string; constraint?: string } | null;
  return e?.code === '23505' && e.constraint === 'orders_pkey';
}

/**
 * Inserts a batch of winners, idempotent on the order id, and returns every order of the batch
 * with its state: fresh rows and rows an earlier (crashed) attempt wrote. One round trip when the
 * batch is new: a plain insert, since `on conflict` checks the primary key before each row and
 * confirms each row again afterwards (side by side: about a fifth more Postgres CPU and WAL
 * records per batch). A batch holding an id already written (re-driven after a crash, or a queued
 * order its buyer cancelled) fails whole and is written again with `on conflict do nothing`; only
 * ids that skipped are then looked up, in a further statement that sees rows a concurrent writer
 * committed meanwhile. The sale's row is read FOR KEY SHARE once per statement (sql/0006: the
 * guarantee the per-row foreign key gave). (Joining the whole batch back against orders in the
 * same statement made the planner scan the table: a cost that grew with every order ever written.)
 * Deadlines are cut to whole milliseconds so the Redis key (PXAT) and the row agree exactly.
 * Each fresh row's order.created event is written by the same statement (a CTE), and the batch's
 * sale.sold_out when `soldOut` (claim.lua's report) and it wrote an order.
 */
export async function writeOrders(
  pool: Pool,
  saleId: string,
  winners: Winner[],
  soldOut = false,
): Promise<WrittenOrder[]> {
  const ids = winners.map((w) => w.orderId);
  const values = [
    saleId,
    ids,
    winners.map((w) => w.userId),
    winners.map((w) => w.qty),
    winners.map((w) => w.seq),
    winners.map((w) => w.purchasedAt),
    winners.map((w) => w.sku ?? null),
    soldOut,
  ];
  let rows: WrittenRow[];
  try {
    rows = (await pool.query<WrittenRow>(written(INSERT_WINNERS), values)).rows;
  } catch (err) {
    if (!isDuplicateOrder(err)) throw err;
    rows = (await pool.query<WrittenRow>(written(`${INSERT_WINNERS} on conflict (id) do nothing`), values)).rows;
  }
  if (rows.length < ids.length) {
    const fresh = new Set(rows.map((r) => r.id));
    const skipped = ids.filter((id) => !fresh.has(id));
    const existing = await pool.query<WrittenRow>(
      `select id, status, ${EXPIRES_MS} from orders where id = any($1::text[])`,
      [skipped],
    );
    rows.push(...existing.rows);
  }
  return rows.map((r) => ({ id: r.id, status: r.status, expiresAt: Number(r.expires_ms) }));
}

const ORDER_COLUMNS = 'id, sale_id, user_id, qty, sku, status, expires_at, expires_at <= now() as due';

export async function findOrder(pool: Pool, orderId: string): Promise<OrderRow | undefined> {
  const res = await pool.query<OrderRow>(`select ${ORDER_COLUMNS} from orders where id = $1`, [orderId]);
  return res.rows[0];
}

/** The order once any payment or close holding its row has committed or rolled back. */
export async function settledOrder(pool: Pool, orderId: string): Promise<OrderRow | undefined> {
  const res = await pool.query<OrderRow>(`select ${ORDER_COLUMNS} from orders where id = $1 for share`, [orderId]);
  return res.rows[0];
}

/** The order, locked until the transaction ends: a payment decided on it cannot race another one. */
export async function lockOrder(client: PoolClient, orderId: string): Promise<OrderRow | undefined> {
  const res = await client.query<OrderRow>(`select ${ORDER_COLUMNS} from orders where id = $1 for update`, [orderId]);
  return res.rows[0];
}

/**
 * Pays the buyer's order if it is still pending and before its deadline; true when this call paid it.
 * The deadline is checked at this statement, after the row is locked (not at the transaction's
 * start): a payment that wins held the row before the deadline, so anything that reads the row
 * for share after the deadline (a late cancel) waits for it and sees it paid.
 */
export async function markPaid(pool: Pool | PoolClient, orderId: string, userId: string): Promise<boolean> {
  const paid = await pool.query(
    `update orders set status = ${sqlState(PAY.to)}, paid_at = now()
     where id = $1 and user_id = $2 and status = ${sqlState(PAY.from)} and expires_at > statement_timestamp()`,
    [orderId, userId],
  );
  return paid.rowCount === 1;
}

const CLOSED_COLUMNS =
  'id, sale_id, user_id, qty, sku, extract(epoch from (closed_at - expires_at)) * 1000 as late_ms, status';
const CLOSED = `returning ${CLOSED_COLUMNS}`;

/** An expiring update as a CTE, with its order.expired events: one statement, so both or neither. */
const expiring = (update: string) =>
  `with c as (${update} returning *), e as (${orderEventsFrom('order.expired', 'c')}) select ${CLOSED_COLUMNS} from c`;

function closedOrders(rows: ClosedRow[]): ClosedOrder[] {
  return rows.map((r) => ({
    id: r.id,
    saleId: r.sale_id,
    userId: r.user_id,
    qty: r.qty,
    sku: r.sku,
    lateMs: Number(r.late_ms),
    unpaid: r.status === EXPIRE.to,
  }));
}

/** Closes those of `ids` that are pending and past their deadline (never one before it). */
export async function closeDue(pool: Pool, ids: string[]): Promise<ClosedOrder[]> {
  const res = await pool.query<ClosedRow>(
    expiring(`update orders set status = ${sqlState(EXPIRE.to)}, closed_at = now()
     where id = any($1::text[]) and status = ${sqlState(EXPIRE.from)} and expires_at <= now()`),
    [ids],
  );
  return closedOrders(res.rows);
}

/**
 * The buyer cancels a pending order inside its window (the mirror of markPaid): the row count
 * decides a race with payment or expiry. The window is judged when the row is reached, by
 * clock_timestamp(): the transaction's now() (cancel-allowance.ts takes the buyer's lock and count
 * first) and even the statement's own start come before a wait for a payment holding the row, and
 * would let a cancel pass a deadline that payment has already seen go by (and answered
 * order_expired). An update that waited re-checks its condition on the row it got, clock and all.
 */
export async function cancelPending(
  pool: Pool | PoolClient,
  orderId: string,
  userId: string,
): Promise<ClosedOrder | undefined> {
  const res = await pool.query<ClosedRow>(
    `update orders set status = ${sqlState(CANCEL.to)}, closed_at = clock_timestamp()
     where id = $1 and user_id = $2 and status = ${sqlState(CANCEL.from)} and expires_at > clock_timestamp() ${CLOSED}`,
    [orderId, userId],
  );
  return closedOrders(res.rows)[0];
}

/**
 * Writes a still-queued order straight as cancelled, with the deadline the writer would have given
 * it. The primary key decides a race with the writer: undefined when its row is already there.
 */
export async function insertCancelled(
  pool: Pool | PoolClient,
  saleId: string,
  w: Winner,
): Promise<ClosedOrder | undefined> {
  const res = await pool.query<ClosedRow>(
    `insert into orders (id, sale_id, user_id, qty, sku, status, seq, purchased_at, created_at, expires_at, closed_at)
     select $2, $1, $3, $4, coalesce($7, ${ONE_SKU}, 'default'), ${sqlState(CANCEL_QUEUED.to)}, $5, to_timestamp($6::float8 / 1000.0), date_trunc('milliseconds', now()),
            date_trunc('milliseconds', now()) + make_interval(secs => s.payment_window_seconds), now()
     from sales s where s.id = $1 for key share
     on conflict (id) do nothing ${CLOSED}`,
    [saleId, w.orderId, w.userId, w.qty, w.seq, w.purchasedAt, w.sku ?? null],
  );
  return closedOrders(res.rows)[0];
}

export interface BuyerOrderRow {
  id: string;
  sale_id: string;
  qty: number;
  status: OrderState;
  expires_at: Date;
  purchased_at: Date;
}

/** A buyer's orders, newest purchase first, optionally of one sale and older than the order `before` (which must be theirs). */
export async function buyerOrders(
  pool: Pool,
  userId: string,
  o: { limit: number; saleId?: string; before?: string },
): Promise<BuyerOrderRow[]> {
  const res = await pool.query<BuyerOrderRow>(
    `select o.id, o.sale_id, o.qty, o.status, o.expires_at, o.purchased_at from orders o
     where o.user_id = $1 and ($2::text is null or o.sale_id = $2)
       and ($3::text is null or (o.purchased_at, o.id) < (select c.purchased_at, c.id from orders c where c.id = $3 and c.user_id = $1))
     order by o.purchased_at desc, o.id desc limit $4`,
    [userId, o.saleId ?? null, o.before ?? null, o.limit],
  );
  return res.rows;
}

/** Closes up to `limit` overdue orders, oldest deadline first; concurrent sweepers skip each other's rows. */
export async function closeOverdue(pool: Pool, limit: number): Promise<ClosedOrder[]> {
  const res = await pool.query<ClosedRow>(
    expiring(`update orders set status = ${sqlState(EXPIRE.to)}, closed_at = now()
     where id in (select id from orders where status = ${sqlState(EXPIRE.from)} and expires_at <= now()
                  order by expires_at limit $1 for update skip locked)
       and status = ${sqlState(EXPIRE.from)}`),
    [limit],
  );
  return closedOrders(res.rows);
}

/** Orders already closed in Postgres (expired or cancelled) whose stock is not yet known to be back in Redis. */
export async function unrestored(pool: Pool, limit: number): Promise<ClosedOrder[]> {
  const res = await pool.query<ClosedRow>(
    `select id, sale_id, user_id, qty, sku, 0 as late_ms, status from orders
     where status in ${sqlStates(RESTORING)} and restored_at is null order by closed_at limit $1`,
    [limit],
  );
  return closedOrders(res.rows);
}

/** Records that these orders' stock is back in Redis (the first record stands). */
export async function markRestored(pool: Pool, ids: string[]): Promise<void> {
  await pool.query('update orders set restored_at = now() where id = any($1::text[]) and restored_at is null', [ids]);
}

/**
 * Orders of `ids` still pending with a deadline ahead (an event that fired a hair early), and how
 * long until it by Postgres's clock, which closes them: the caller's own clock may be off.
 */
export async function stillPending(pool: Pool, ids: string[]): Promise<{ id: string; inMs: number }[]> {
  const res = await pool.query<{ id: string; in_ms: number }>(
    `select id, ceil(extract(epoch from expires_at - now()) * 1000)::float8 as in_ms
     from orders where id = any($1::text[]) and status = ${sqlState(EXPIRE.from)} and expires_at > now()`,
    [ids],
  );
  return res.rows.map((r) => ({ id: r.id, inMs: r.in_ms }));
}
