// Orders in Postgres: batch writes from the writer, the buyer's status view, and payment.
// Payment and expiry both decide with one conditional update, so exactly one of them wins.
import type { Redis } from 'ioredis';
import type { Pool } from './db.js';
import { HttpError } from './errors.js';
import { saleKeys } from './keys.js';
import { parseWinner, saleIdOfOrder, type Winner } from './ids.js';

export type OrderStatus = 'queued' | 'pending_payment' | 'paid' | 'expired';

export interface OrderView {
  orderId: string;
  saleId: string;
  qty: number;
  status: OrderStatus;
  expiresAt?: string;
}

export interface WrittenOrder {
  id: string;
  status: 'pending' | 'paid' | 'expired';
  expiresAt: number;
}

/**
 * Inserts a batch of winners, idempotent on the order id, and returns every order of the batch
 * with its state: fresh rows and rows an earlier (crashed) attempt wrote. One round trip when the
 * batch is new; only ids the insert skipped are looked up, in a second statement that sees rows a
 * concurrent writer committed meanwhile. (Joining the whole batch back against orders in the same
 * statement made the planner scan the table: a cost that grew with every order ever written.)
 * Deadlines are cut to whole milliseconds so the Redis key (PXAT) and the row agree exactly.
 */
export async function writeOrders(pool: Pool, saleId: string, winners: Winner[]): Promise<WrittenOrder[]> {
  const ids = winners.map((w) => w.orderId);
  const res = await pool.query<{ id: string; status: WrittenOrder['status']; expires_at: Date }>(
    `insert into orders (id, sale_id, user_id, qty, status, seq, purchased_at, created_at, expires_at)
     select i.id, $1, i.user_id, i.qty, 'pending', i.seq, to_timestamp(i.purchased_ms / 1000.0),
            date_trunc('milliseconds', now()),
            date_trunc('milliseconds', now()) + make_interval(secs => s.payment_window_seconds)
     from unnest($2::text[], $3::text[], $4::int[], $5::bigint[], $6::float8[]) as i(id, user_id, qty, seq, purchased_ms)
       cross join (select payment_window_seconds from sales where id = $1) s
     on conflict (id) do nothing
     returning id, status, expires_at`,
    [
      saleId,
      ids,
      winners.map((w) => w.userId),
      winners.map((w) => w.qty),
      winners.map((w) => w.seq),
      winners.map((w) => w.purchasedAt),
    ],
  );
  const rows = res.rows;
  if (rows.length < ids.length) {
    const fresh = new Set(rows.map((r) => r.id));
    const skipped = ids.filter((id) => !fresh.has(id));
    const existing = await pool.query<{ id: string; status: WrittenOrder['status']; expires_at: Date }>(
      'select id, status, expires_at from orders where id = any($1::text[])', [skipped],
    );
    rows.push(...existing.rows);
  }
  return rows.map((r) => ({ id: r.id, status: r.status, expiresAt: r.expires_at.getTime() }));
}

interface OrderRow {
  id: string; sale_id: string; user_id: string; qty: number; status: WrittenOrder['status'];
  expires_at: Date; due: boolean;
}

async function findOrder(pool: Pool, orderId: string): Promise<OrderRow | undefined> {
  const res = await pool.query<OrderRow>(
    'select id, sale_id, user_id, qty, status, expires_at, expires_at <= now() as due from orders where id = $1', [orderId],
  );
  return res.rows[0];
}

/** The queued entry of an order not yet in Postgres, if it belongs to this user. */
async function queuedOrder(redis: Redis, saleId: string, orderId: string, userId: string): Promise<Winner | null> {
  const entry = await redis.hget(saleKeys(saleId).queued, orderId);
  if (!entry) return null;
  const w = parseWinner(entry);
  return w.userId === userId ? w : null;
}

function checkOrderId(orderId: string): string {
  const saleId = saleIdOfOrder(orderId);
  if (!saleId) throw new HttpError('invalid_id', 'The order id is malformed.');
  return saleId;
}

/** What the buyer's page polls. Other users' orders are reported as not found. */
export async function getOrder(pool: Pool, redis: Redis, orderId: string, userId: string): Promise<OrderView> {
  const saleId = checkOrderId(orderId);
  // Redis first: the writer forgets a queued entry only after the row is committed, so a miss
  // here followed by a miss in Postgres really means no such order.
  const queued = await queuedOrder(redis, saleId, orderId, userId);
  if (queued) return { orderId, saleId, qty: queued.qty, status: 'queued' };
  const row = await findOrder(pool, orderId);
  if (!row || row.user_id !== userId) throw new HttpError('order_not_found');
  const view: OrderView = { orderId, saleId, qty: row.qty, status: row.status === 'pending' ? 'pending_payment' : row.status };
  if (row.status === 'pending') view.expiresAt = row.expires_at.toISOString();
  return view;
}

export async function payOrder(pool: Pool, redis: Redis, orderId: string, userId: string): Promise<{ orderId: string; status: 'paid' }> {
  const saleId = checkOrderId(orderId);
  const paid = await pool.query(
    `update orders set status = 'paid', paid_at = now()
     where id = $1 and user_id = $2 and status = 'pending' and expires_at > now()`,
    [orderId, userId],
  );
  if (paid.rowCount === 1) {
    const k = saleKeys(saleId);
    const expiryKey = k.expiry(orderId);
    // Best effort: a key left behind fires an event that finds the order paid and does nothing.
    await redis.multi().del(expiryKey).zrem(k.deadlines, expiryKey).exec().catch(() => {});
    return { orderId, status: 'paid' };
  }
  const row = await findOrder(pool, orderId);
  if (row && row.user_id === userId) {
    if (row.status === 'paid') return { orderId, status: 'paid' };
    throw new HttpError('order_expired');
  }
  if (await queuedOrder(redis, saleId, orderId, userId)) throw new HttpError('order_not_ready');
  throw new HttpError('order_not_found');
}
