// Every runtime statement on `payments`, each a small typed function running one parameterised
// statement. A payment row is written in the transaction that decided the order's fate (see
// payments.ts), so the two never disagree.
import type { Pool, PoolClient } from '../runtime/db.js';
import { sqlState, TRANSITIONS } from '../orders/states.js';

/** The state an applied payment leaves its order in. */
const PAID = sqlState(TRANSITIONS.pay.to);

export type PaymentOutcome = 'applied' | 'refund_due';

/** Why a payment could not pay its order (a refund_due row always has one; sql/0007_money.sql). */
export type RefundReason =
  | 'amount_mismatch'
  | 'currency_mismatch'
  | 'order_expired'
  | 'order_cancelled'
  | 'already_paid';
export const REFUND_REASONS: RefundReason[] = [
  'amount_mismatch',
  'currency_mismatch',
  'order_expired',
  'order_cancelled',
  'already_paid',
];

export interface NewPayment {
  /** The recorded id, `<provider>:<event id>` (payments/provider.ts recordedId). */
  id: string;
  orderId: string;
  outcome: PaymentOutcome;
  reason?: RefundReason;
  amount: number | undefined;
  currency?: string;
  /** The signed bytes exactly as delivered. */
  raw: Buffer;
}

export interface RecordedPayment {
  id: string;
  orderId: string;
  outcome: PaymentOutcome;
  reason: RefundReason | null;
  raw: Buffer;
}

/** Records a decided event; false when its id is already recorded (a redelivery that raced this one). */
export async function insertPayment(client: PoolClient, p: NewPayment): Promise<boolean> {
  const res = await client.query(
    `insert into payments (id, order_id, outcome, reason, amount, currency, raw) values ($1, $2, $3, $4, $5, $6, $7) on conflict (id) do nothing`,
    [p.id, p.orderId, p.outcome, p.reason ?? null, p.amount ?? null, p.currency ?? null, p.raw],
  );
  return res.rowCount === 1;
}

export async function findPayment(pool: Pool | PoolClient, id: string): Promise<RecordedPayment | undefined> {
  const res = await pool.query<{
    id: string;
    order_id: string;
    outcome: PaymentOutcome;
    reason: RefundReason | null;
    raw: Buffer;
  }>('select id, order_id, outcome, reason, raw from payments where id = $1', [id]);
  const row = res.rows[0];
  return row && { id: row.id, orderId: row.order_id, outcome: row.outcome, reason: row.reason, raw: row.raw };
}

/**
 * Orders of a sale whose payments and status disagree: an applied payment on an order that is not
 * paid; a paid order (paid since payments are recorded) without exactly one applied payment; a
 * refund_due payment on a paid order that no applied payment paid. One statement, one snapshot.
 */
export async function paymentMismatches(pool: Pool, saleId: string): Promise<string[]> {
  const res = await pool.query<{ id: string; problem: string }>(
    `with since as (select applied_at from migrations where id = '0003_payments'),
     per_order as (
       select o.id, o.status, o.paid_at,
              count(p.id) filter (where p.outcome = 'applied') as applied,
              count(p.id) filter (where p.outcome = 'refund_due') as refund_due
       from orders o left join payments p on p.order_id = o.id
       where o.sale_id = $1 and (o.status = ${PAID} or p.id is not null)
       group by o.id)
     select id, case
         when applied > 0 and status <> ${PAID} then 'applied payment, order ' || status
         when applied > 1 then applied || ' applied payments'
         when refund_due > 0 and applied = 0 and status = ${PAID} then 'refund due, yet paid'
         else 'paid without a payment' end as problem
     from per_order
     where (applied > 0 and status <> ${PAID}) or applied > 1
        or (status = ${PAID} and applied = 0 and (refund_due > 0 or paid_at >= (select applied_at from since)))`,
    [saleId],
  );
  return res.rows.map((r) => `${r.id} (${r.problem})`);
}
