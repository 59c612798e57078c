// Closing unpaid orders and giving their stock back. Postgres decides (a conditional update that
// only moves a pending order past its deadline); Redis is restored afterwards through an
// idempotent script, and `restored_at` records it so a crash in between is finished by the replay.
import type { Redis } from 'ioredis';
import type { Pool } from './db.js';
import { restoreStock } from './redis.js';

export interface ClosedOrder {
  id: string;
  saleId: string;
  userId: string;
  qty: number;
  lateMs: number;
}

interface ClosedRow { id: string; sale_id: string; user_id: string; qty: number; late_ms: number }

const RETURNING = `returning id, sale_id, user_id, qty, extract(epoch from (closed_at - expires_at)) * 1000 as late_ms`;

function fromRows(rows: ClosedRow[]): ClosedOrder[] {
  return rows.map((r) => ({ id: r.id, saleId: r.sale_id, userId: r.user_id, qty: r.qty, lateMs: Number(r.late_ms) }));
}

/** Closes those of `ids` that are pending and past their deadline (never one before it). */
export async function closeDue(pool: Pool, ids: string[]): Promise<ClosedOrder[]> {
  const res = await pool.query<ClosedRow>(
    `update orders set status = 'expired', closed_at = now()
     where id = any($1::text[]) and status = 'pending' and expires_at <= now() ${RETURNING}`,
    [ids],
  );
  return fromRows(res.rows);
}

/** Closes up to `limit` overdue orders, oldest deadline first; concurrent sweepers skip each other's rows. */
export async function closeOverdue(pool: Pool, limit: number): Promise<ClosedOrder[]> {
  const res = await pool.query<ClosedRow>(
    `update orders set status = 'expired', closed_at = now()
     where id in (select id from orders where status = 'pending' and expires_at <= now()
                  order by expires_at limit $1 for update skip locked)
       and status = 'pending' ${RETURNING}`,
    [limit],
  );
  return fromRows(res.rows);
}

/** Orders already expired in Postgres whose stock is not yet known to be back in Redis. */
export async function unrestored(pool: Pool, limit: number): Promise<ClosedOrder[]> {
  const res = await pool.query<ClosedRow>(
    `select id, sale_id, user_id, qty, 0 as late_ms from orders
     where status = 'expired' and restored_at is null order by closed_at limit $1`,
    [limit],
  );
  return fromRows(res.rows);
}

/** Restores each order's stock and quota (once per order, whoever else tries) and records it. Returns the units this call gave back. */
export async function restore(pool: Pool, redis: Redis, orders: ClosedOrder[]): Promise<number> {
  if (orders.length === 0) return 0;
  const results = await Promise.all(orders.map((o) => restoreStock(redis, { saleId: o.saleId, orderId: o.id, userId: o.userId, qty: o.qty })));
  await pool.query('update orders set restored_at = now() where id = any($1::text[]) and restored_at is null', [orders.map((o) => o.id)]);
  return orders.reduce((units, o, i) => (results[i] ? units + o.qty : units), 0);
}

/** Orders of `ids` still pending with a deadline ahead (an event that fired a hair early). */
export async function stillPending(pool: Pool, ids: string[]): Promise<{ id: string; expiresAt: number }[]> {
  const res = await pool.query<{ id: string; expires_at: Date }>(
    `select id, expires_at from orders where id = any($1::text[]) and status = 'pending' and expires_at > now()`, [ids],
  );
  return res.rows.map((r) => ({ id: r.id, expiresAt: r.expires_at.getTime() }));
}
