// The buyer's view of an order and its payment. Payment and expiry both decide with one
// conditional update (shared/order-queries.ts), so exactly one of them wins.
import type { RedisClient } from './redis.js';
import type { Pool } from './db.js';
import { HttpError } from './errors.js';
import { saleKeys } from './keys.js';
import { parseWinner, saleIdOfOrder, type Winner } from './ids.js';
import { findOrder, markPaid } from './order-queries.js';
import { dropExpiry } from './redis.js';

export type OrderStatus = 'queued' | 'pending_payment' | 'paid' | 'expired';

export interface OrderView {
  orderId: string;
  saleId: string;
  qty: number;
  status: OrderStatus;
  expiresAt?: string;
}

/** The queued entry of an order not yet in Postgres, if it belongs to this user. */
async function queuedOrder(redis: RedisClient, saleId: string, orderId: string, userId: string): Promise<Winner | null> {
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
export async function getOrder(pool: Pool, redis: RedisClient, orderId: string, userId: string): Promise<OrderView> {
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

export async function payOrder(pool: Pool, redis: RedisClient, orderId: string, userId: string): Promise<{ orderId: string; status: 'paid' }> {
  const saleId = checkOrderId(orderId);
  // Twice at most: the writer may insert the row between a payment that found none and the look
  // that follows; a pending row inside its window then takes the payment, never an order_expired.
  for (let attempt = 0; ; attempt++) {
    if (await markPaid(pool, orderId, userId)) {
      // Best effort: a key left behind fires an event that finds the order paid and does nothing.
      await dropExpiry(redis, saleId, orderId).catch(() => {});
      return { orderId, status: 'paid' };
    }
    const row = await findOrder(pool, orderId);
    if (row && row.user_id === userId) {
      if (row.status === 'paid') return { orderId, status: 'paid' };
      if (attempt === 0 && row.status === 'pending' && row.expires_at.getTime() > Date.now()) continue;
      throw new HttpError('order_expired');
    }
    if (await queuedOrder(redis, saleId, orderId, userId)) throw new HttpError('order_not_ready');
    throw new HttpError('order_not_found');
  }
}
