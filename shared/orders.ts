// The buyer's view of an order, and its direct payment (DIRECT_PAY). Payment and expiry both
// decide with one conditional update (shared/order-queries.ts), so exactly one of them wins.
import type { RedisClient } from './redis.js';
import type { Pool } from './db.js';
import { HttpError } from './errors.js';
import { saleKeys } from './keys.js';
import { parseWinner, saleIdOfOrder, type Winner } from './ids.js';
import { findOrder } from './order-queries.js';
import { PAYMENT_SUCCEEDED, receivePayment, signPayload, type PaymentDeps } from './payments.js';

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

/**
 * DIRECT_PAY (development and demos): the owner pays from the page, and the API makes the event a
 * provider would send, signs it with the webhook secret and receives it like any other, so a demo
 * runs the real payment path and records a payment. One event id per order: a second click is a
 * redelivery and changes nothing.
 */
export async function payOrder(deps: PaymentDeps, orderId: string, userId: string): Promise<{ orderId: string; status: 'paid' }> {
  const { pool, redis } = deps;
  const saleId = checkOrderId(orderId);
  let row = await findOrder(pool, orderId);
  if (row?.user_id !== userId) {
    if (await queuedOrder(redis, saleId, orderId, userId)) throw new HttpError('order_not_ready');
    // The writer forgets a queued winner only after its row is committed: look once more.
    row = await findOrder(pool, orderId);
    if (row?.user_id !== userId) throw new HttpError('order_not_found');
  }
  if (row.status === 'paid') return { orderId, status: 'paid' };
  const raw = JSON.stringify({ id: `direct.${orderId}`, type: PAYMENT_SUCCEEDED, orderId });
  const answer = await receivePayment(deps, Buffer.from(raw), signPayload(deps.secret, raw));
  if (answer.outcome === 'applied') return { orderId, status: 'paid' };
  throw new HttpError('order_expired');
}
