// Money owed back: payments recorded refund_due (shared/payments/decide.ts), until an operator records
// that it went back (`flashsale refunds mark`, POST /api/payments/:paymentId/refund). Marking is
// one conditional update that says what it expects; marking again answers the first record as it
// is, so a retried call (a lost answer, a double click) never changes its time or reference.
import type { Pool } from '../runtime/db.js';
import { withTransaction } from '../runtime/db.js';
import { recordAudit } from '../operators/audit.js';
import { recordEvents, type OrderEvent } from '../events/record.js';
import { HttpError } from '../runtime/errors.js';
import type { RefundReason } from './queries.js';
import { UNSHOWABLE } from '../sales/definition.js';

export interface Refund {
  /** The payment's recorded id, `<provider>:<event id>` (payments/provider.ts recordedId). */
  paymentId: string;
  orderId: string;
  saleId: string;
  userId: string;
  reason: RefundReason;
  amount: number | null;
  currency: string | null;
  receivedAt: string;
  /** When the money went back; null while it is owed. */
  refundedAt: string | null;
  reference: string | null;
}

/** The shop's refund.marked event: the money owed for the order went back, with the operator's reference. */
const refundMarked = (r: Refund, status: string): OrderEvent => ({
  type: 'refund.marked',
  orderId: r.orderId,
  data: {
    status,
    reason: r.reason,
    payment: { id: r.paymentId, amount: r.amount, currency: r.currency },
    refund: { reference: r.reference, refunded_at: r.refundedAt },
  },
});

/** What an operator may give as a refund's reference (the provider's refund id, a ticket...). */
export const REFERENCE_MAX = 200;

interface RefundRow {
  id: string;
  order_id: string;
  sale_id: string;
  user_id: string;
  reason: RefundReason;
  amount: number | null;
  currency: string | null;
  received_at: Date;
  refunded_at: Date | null;
  refund_reference: string | null;
}

const COLUMNS = `p.id, p.order_id, o.sale_id, o.user_id, p.reason, p.amount, p.currency, p.received_at, p.refunded_at, p.refund_reference`;

const refundOf = (r: RefundRow): Refund => ({
  paymentId: r.id,
  orderId: r.order_id,
  saleId: r.sale_id,
  userId: r.user_id,
  reason: r.reason,
  amount: r.amount,
  currency: r.currency,
  receivedAt: r.received_at.toISOString(),
  refundedAt: r.refunded_at?.toISOString() ?? null,
  reference: r.refund_reference,
});

/** Refunds oldest first: the open ones (owed), or with `all` the closed ones too. */
export async function listRefunds(pool: Pool, opts: { all?: boolean } = {}): Promise<Refund[]> {
  const res = await pool.query<RefundRow>(
    `select ${COLUMNS} from payments p join orders o on o.id = p.order_id
     where p.outcome = 'refund_due' and ($1 or p.refunded_at is null) order by p.received_at, p.id`,
    [opts.all === true],
  );
  return res.rows.map(refundOf);
}

/** How many refunds are owed: one count on the partial index of open refunds (the replay sets the gauge from it). */
export async function countOpenRefunds(pool: Pool): Promise<number> {
  const res = await pool.query<{ n: number }>(
    `select count(*)::int as n from payments where outcome = 'refund_due' and refunded_at is null`,
  );
  return res.rows[0]!.n;
}

export function checkReference(reference: unknown): string {
  if (
    typeof reference !== 'string' ||
    reference.trim() === '' ||
    reference.length > REFERENCE_MAX ||
    UNSHOWABLE.test(reference)
  ) {
    throw new HttpError(
      'bad_request',
      `reference must be a non-empty string of at most ${REFERENCE_MAX} characters without control characters: the provider's refund id or your own note of how the money went back.`,
    );
  }
  return reference;
}

/**
 * Records that a refund_due payment's money went back. Marked already: the first record, unchanged.
 * No such payment: 404 payment_not_found. A payment that paid its order: 409 not_refund_due.
 * `by`: the operator, recorded in the audit with the mark (a mark again records nothing).
 */
export async function markRefunded(pool: Pool, paymentId: string, reference: string, by: string): Promise<Refund> {
  checkReference(reference);
  return withTransaction(pool, async (client) => {
    const marked = await client.query(
      `update payments set refunded_at = now(), refund_reference = $2 where id = $1 and outcome = 'refund_due' and refunded_at is null`,
      [paymentId, reference],
    );
    // FOR SHARE of the order: a payment deciding on it meanwhile commits before this event's number
    // is taken, or after it, as for any two events of one order (docs/events.md, Sequence).
    const res = await client.query<RefundRow & { outcome: string; order_status: string }>(
      `select ${COLUMNS}, p.outcome, o.status as order_status from payments p join orders o on o.id = p.order_id
       where p.id = $1 for share of o`,
      [paymentId],
    );
    const row = res.rows[0];
    if (!row) throw new HttpError('payment_not_found', `No payment has the id "${paymentId}".`);
    if (row.outcome !== 'refund_due')
      throw new HttpError('not_refund_due', `Payment "${paymentId}" paid its order: there is nothing to refund.`);
    const refund = refundOf(row);
    if (marked.rowCount === 1) {
      await recordAudit(client, {
        operator: by,
        action: 'refund.mark',
        saleId: row.sale_id,
        detail: { paymentId, orderId: row.order_id, reference },
      });
      await recordEvents(client, [refundMarked(refund, row.order_status)]);
    }
    return refund;
  });
}
