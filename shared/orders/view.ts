// The buyer's view of an order and of their orders. Payment, expiry and cancellation each decide
// with one conditional write (shared/orders/queries.ts), so exactly one of them wins.
import type { RedisClient } from '../redis/connect.js';
import type { Pool } from '../runtime/db.js';
import { HttpError } from '../runtime/errors.js';
import { saleKeys } from '../redis/keys.js';
import { parseWinner, saleIdOfOrder, type Winner } from '../runtime/ids.js';
import { buyerOrders, findOrder } from './queries.js';
import { ORDER_STATES, type OrderState } from './states.js';

/** What the buyer is told: Postgres's states, except that a winner not yet written is queued and a pending order pending_payment. */
export type OrderStatus = 'queued' | 'pending_payment' | Exclude<OrderState, 'pending'>;
export const ORDER_STATUSES: OrderStatus[] = [
  'queued',
  'pending_payment',
  ...ORDER_STATES.filter((s): s is Exclude<OrderState, 'pending'> => s !== 'pending'),
];

export interface OrderView {
  orderId: string;
  saleId: string;
  qty: number;
  status: OrderStatus;
  expiresAt?: string;
}

/** The queued entry of an order not yet in Postgres, if it belongs to this user. */
export async function queuedOrder(
  redis: RedisClient,
  saleId: string,
  orderId: string,
  userId: string,
): Promise<Winner | null> {
  const entry = await redis.hget(saleKeys(saleId).queued, orderId);
  if (!entry) return null;
  const w = parseWinner(entry);
  return w.userId === userId ? w : null;
}

export function checkOrderId(orderId: string): string {
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
  // A cancel of a queued order writes its row before the writer does: Postgres then has the answer.
  const cancelAsked = queued !== null && (await redis.hexists(saleKeys(saleId).cancels, orderId)) === 1;
  if (queued && !cancelAsked) return { orderId, saleId, qty: queued.qty, status: 'queued' };
  const row = await findOrder(pool, orderId);
  if (!row && queued) return { orderId, saleId, qty: queued.qty, status: 'queued' };
  if (!row || row.user_id !== userId) throw new HttpError('order_not_found');
  return viewOf(row);
}

const viewOf = (row: {
  id: string;
  sale_id: string;
  qty: number;
  status: OrderState;
  expires_at: Date;
}): OrderView => ({
  orderId: row.id,
  saleId: row.sale_id,
  qty: row.qty,
  ...(row.status === 'pending'
    ? { status: 'pending_payment', expiresAt: row.expires_at.toISOString() }
    : { status: row.status }),
});

/** Most orders one page of GET /api/me/orders lists. */
export const MY_ORDERS_MAX = 100;

export interface MyOrders {
  orders: (OrderView & { purchasedAt: string })[];
  /** The `before` of the next page; null on the last one. */
  next: string | null;
}

/**
 * The buyer's orders in Postgres, newest purchase first, a page at a time (`before`: the last order
 * id of the previous page, which must be theirs). An order still queued (the writer takes
 * milliseconds) is listed once written; GET /api/orders/:id shows it meanwhile.
 */
export async function myOrders(
  pool: Pool,
  userId: string,
  o: { limit: number; saleId?: string; before?: string },
): Promise<MyOrders> {
  if (o.before !== undefined) {
    const cursor = await findOrder(pool, o.before);
    if (cursor?.user_id !== userId)
      throw new HttpError('order_not_found', 'before must be the id of one of your orders.');
  }
  const rows = await buyerOrders(pool, userId, o);
  const orders = rows.map((r) => ({ ...viewOf(r), purchasedAt: r.purchased_at.toISOString() }));
  return { orders, next: rows.length === o.limit ? rows[rows.length - 1]!.id : null };
}
