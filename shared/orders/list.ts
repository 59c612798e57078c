// The operator's view of orders (`flashsale orders list|show`): read from Postgres, the record,
// filtered by sale, buyer and state, newest purchase first; one order with its payments. An order
// still queued in Redis (the writer takes milliseconds) shows once written.
import type { Pool } from '../runtime/db.js';
import { HttpError } from '../runtime/errors.js';
import type { OrderState } from './states.js';
import type { PaymentOutcome, RefundReason } from '../payments/queries.js';

export interface OperatorOrder {
  id: string;
  saleId: string;
  userId: string;
  qty: number;
  state: OrderState;
  purchasedAt: string;
  /** The payment deadline (past, for a closed order). */
  expiresAt: string;
  paidAt: string | null;
  closedAt: string | null;
  /** When a closed order's units went back on sale. */
  restoredAt: string | null;
}

export interface OrderPayment {
  id: string;
  outcome: PaymentOutcome;
  reason: RefundReason | null;
  amount: number | null;
  currency: string | null;
  receivedAt: string;
  refundedAt: string | null;
}

/** Most orders one `orders list` prints. */
export const ORDERS_LIST_MAX = 1000;

interface OrderListRow {
  id: string;
  sale_id: string;
  user_id: string;
  qty: number;
  status: OrderState;
  purchased_at: Date;
  expires_at: Date;
  paid_at: Date | null;
  closed_at: Date | null;
  restored_at: Date | null;
}

const COLUMNS = 'id, sale_id, user_id, qty, status, purchased_at, expires_at, paid_at, closed_at, restored_at';
const iso = (d: Date | null) => d?.toISOString() ?? null;

const orderOf = (r: OrderListRow): OperatorOrder => ({
  id: r.id,
  saleId: r.sale_id,
  userId: r.user_id,
  qty: r.qty,
  state: r.status,
  purchasedAt: r.purchased_at.toISOString(),
  expiresAt: r.expires_at.toISOString(),
  paidAt: iso(r.paid_at),
  closedAt: iso(r.closed_at),
  restoredAt: iso(r.restored_at),
});

export interface OrderFilter {
  saleId?: string;
  userId?: string;
  state?: OrderState;
  limit: number;
}

/** Orders newest purchase first, each filter applied when given. */
export async function listOrders(pool: Pool, f: OrderFilter): Promise<OperatorOrder[]> {
  if (!Number.isSafeInteger(f.limit) || f.limit < 1 || f.limit > ORDERS_LIST_MAX) {
    throw new HttpError('bad_request', `limit must be a whole number from 1 to ${ORDERS_LIST_MAX}.`);
  }
  const res = await pool.query<OrderListRow>(
    `select ${COLUMNS} from orders
     where ($1::text is null or sale_id = $1) and ($2::text is null or user_id = $2) and ($3::text is null or status = $3)
     order by purchased_at desc, id desc limit $4`,
    [f.saleId ?? null, f.userId ?? null, f.state ?? null, f.limit],
  );
  return res.rows.map(orderOf);
}

/** One order and every payment recorded for it, oldest first; 404 order_not_found when Postgres has no such order. */
export async function showOrder(pool: Pool, orderId: string): Promise<OperatorOrder & { payments: OrderPayment[] }> {
  const res = await pool.query<OrderListRow>(`select ${COLUMNS} from orders where id = $1`, [orderId]);
  const row = res.rows[0];
  if (!row)
    throw new HttpError(
      'order_not_found',
      `No order with id "${orderId}" in Postgres (one still queued shows once written).`,
    );
  const payments = await pool.query<{
    id: string;
    outcome: PaymentOutcome;
    reason: RefundReason | null;
    amount: number | null;
    currency: string | null;
    received_at: Date;
    refunded_at: Date | null;
  }>(
    'select id, outcome, reason, amount, currency, received_at, refunded_at from payments where order_id = $1 order by received_at, id',
    [orderId],
  );
  return {
    ...orderOf(row),
    payments: payments.rows.map((p) => ({
      id: p.id,
      outcome: p.outcome,
      reason: p.reason,
      amount: p.amount,
      currency: p.currency,
      receivedAt: p.received_at.toISOString(),
      refundedAt: iso(p.refunded_at),
    })),
  };
}
