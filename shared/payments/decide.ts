// A payment event, once its provider has verified it (shared/payments/provider.ts: the provider
// seam; shared/payments/providers/: the providers), is decided once, in one transaction with the order's change:
// applied (the order was pending inside its window and the event brings exactly its price times
// qty in the sale's currency: paid by the same conditional update as ever) or refund_due, with the
// reason (a wrong amount or currency; closed: expired or cancelled by its buyer; past its deadline;
// or paid by another event): the order and its unit stay as they are, and the money is on record
// to be paid back. An event is recorded under `<provider>:<event id>`, and that id names one
// delivery's bytes: the same id with other bytes is refused.
import type { IncomingHttpHeaders } from 'node:http';
import { withTransaction, type Pool, type PoolClient } from '../runtime/db.js';
import { HttpError } from '../runtime/errors.js';
import { saleIdOfOrder } from '../runtime/ids.js';
import { saleKeys } from '../redis/keys.js';
import type { Logger } from '../runtime/logger.js';
import { metrics } from '../runtime/metrics.js';
import { publishOrderEvents } from '../orders/events.js';
import { recordEvents } from '../events/record.js';
import { lockOrder, markPaid, type OrderRow } from '../orders/queries.js';
import { allows, TRANSITIONS, type OrderState } from '../orders/states.js';
import { findPayment, insertPayment, type PaymentOutcome, type RecordedPayment, type RefundReason } from './queries.js';
import { recordedId, verifiedEvent, type PaymentEvent, type PaymentProvider, type SucceededEvent } from './provider.js';
import type { RedisClient } from '../redis/connect.js';
import { dropExpiry } from '../orders/scripts.js';

export interface PaymentDeps {
  pool: Pool;
  redis: RedisClient;
  logger: Logger;
}

export interface PaymentAnswer {
  /** The provider's event id, as it sent it. */
  id: string;
  outcome: PaymentOutcome | 'ignored';
  /** Why the money could not pay the order (refund_due only). */
  reason?: RefundReason;
  /** The event was recorded before: nothing changed this time. */
  duplicate?: true;
}

/**
 * Thrown instead of recording a refund due when the money was never taken (DIRECT_PAY's own
 * events, `chargedOnly`): the order could not be paid, so nothing was charged or recorded.
 */
export class NotCharged extends Error {
  constructor(readonly reason: RefundReason) {
    super(`not charged: ${reason}`);
  }
}

/**
 * Verifies (by its provider), decides and records one delivery: what each webhook route and
 * DIRECT_PAY run. A provider's event has moved money, so one that cannot pay its order is recorded
 * refund_due; with `chargedOnly` (an event made before any charge) it is refused by NotCharged instead.
 */
export async function receivePayment(
  deps: PaymentDeps,
  provider: PaymentProvider,
  raw: Buffer,
  headers: IncomingHttpHeaders,
  opts: { chargedOnly?: boolean } = {},
): Promise<PaymentAnswer> {
  let event: PaymentEvent;
  try {
    event = verifiedEvent(provider, raw, headers);
  } catch (err) {
    metrics.payments.inc({ provider: provider.name, outcome: 'refused' });
    throw err;
  }
  const id = recordedId(provider, event.id);
  try {
    const answer =
      event.kind === 'succeeded'
        ? await applyPayment(deps, event, id, raw, opts.chargedOnly === true)
        : await ignore(deps.pool, event, id);
    metrics.payments.inc({ provider: provider.name, outcome: answer.duplicate ? 'duplicate' : answer.outcome });
    return answer;
  } catch (err) {
    if (err instanceof HttpError && err.code === 'event_conflict') {
      metrics.payments.inc({ provider: provider.name, outcome: 'conflict' });
      // The provider (or whoever holds its secret) signed two bodies under one id: never a retry.
      const orderId = event.kind === 'succeeded' ? event.orderId : undefined;
      deps.logger.error(
        { alert: 'PAYMENT_EVENT_CONFLICT', event: { id: event.id, provider: provider.name, orderId } },
        'a payment event id came again with a different body: nothing recorded',
      );
    }
    throw err;
  }
}

/**
 * An event of a type we do not act on is acknowledged and kept nowhere, unless its id is a
 * recorded payment's: one id, two bodies (another type), the same conflict as any other.
 */
async function ignore(pool: Pool, event: PaymentEvent, id: string): Promise<PaymentAnswer> {
  if (await findPayment(pool, id)) throw conflict(event);
  return { id: event.id, outcome: 'ignored' };
}

const conflict = (event: PaymentEvent) =>
  new HttpError(
    'event_conflict',
    `Event "${event.id}" was recorded with a different body; an event id names one body. Nothing was recorded.`,
  );

/** A recorded event: a duplicate when these are its bytes, a conflict otherwise. */
function redelivery(event: SucceededEvent, p: RecordedPayment, raw: Buffer): PaymentAnswer {
  if (!p.raw.equals(raw)) throw conflict(event);
  return { id: event.id, outcome: p.outcome, ...(p.reason ? { reason: p.reason } : {}), duplicate: true };
}

/** Why money cannot pay an order in each state a payment does not move (a new state must say). */
const REFUSED_IN: Record<Exclude<OrderState, typeof TRANSITIONS.pay.from>, RefundReason> = {
  paid: 'already_paid',
  expired: 'order_expired',
  cancelled: 'order_cancelled',
};

/** Why this event cannot pay this order, judged on the locked row; undefined: it may (markPaid still checks the deadline). */
async function refusalOf(
  client: PoolClient,
  order: OrderRow,
  event: SucceededEvent,
): Promise<RefundReason | undefined> {
  if (!allows('pay', order.status)) return REFUSED_IN[order.status as keyof typeof REFUSED_IN];
  // The order's variant's own price, where it has one.
  const res = await client.query<{ price: number | null; currency: string | null }>(
    `select coalesce(v.price, s.price) as price, s.currency from sales s
     left join sale_variants v on v.sale_id = s.id and v.sku = $2 where s.id = $1`,
    [order.sale_id, order.sku],
  );
  const sale = res.rows[0];
  // A sale made before prices takes any amount, as it always did.
  if (!sale || sale.price === null) return undefined;
  if (event.currency !== sale.currency) return 'currency_mismatch';
  return event.amount === sale.price * order.qty ? undefined : 'amount_mismatch';
}

/** The shop's payment.refund_due event: the money came, and why it cannot pay the order. */
const refundDue = (order: OrderRow, paymentId: string, event: SucceededEvent, reason: RefundReason) => ({
  type: 'payment.refund_due' as const,
  orderId: order.id,
  data: { status: order.status, reason, payment: { id: paymentId, amount: event.amount, currency: event.currency } },
});

/** Thrown inside the transaction when the event id is already taken: undoes the order's change. */
class Redelivered extends Error {}

async function applyPayment(
  { pool, redis }: PaymentDeps,
  event: SucceededEvent,
  id: string,
  raw: Buffer,
  chargedOnly: boolean,
): Promise<PaymentAnswer> {
  const recorded = async () => {
    const p = await findPayment(pool, id);
    return p && redelivery(event, p, raw);
  };
  const before = await recorded();
  if (before) return before;
  const saleId = saleIdOfOrder(event.orderId)!;
  // Twice at most: the writer forgets a queued winner only after its row is committed, so a
  // second look at Postgres after a miss in both places settles whether the order exists.
  for (let look = 0; look < 2; look++) {
    let decided: { outcome: PaymentOutcome; reason?: RefundReason } | undefined;
    try {
      decided = await withTransaction(pool, async (client) => {
        const order = await lockOrder(client, event.orderId);
        if (!order) return undefined;
        let reason = await refusalOf(client, order, event);
        if (!reason && !(await markPaid(client, order.id, order.user_id))) reason = 'order_expired';
        // Decided on the locked row, so a payment or close racing this one is seen. The same event
        // committed while this one waited for the row (a second click) is a redelivery, not a refusal.
        if (reason && chargedOnly) throw (await findPayment(client, id)) ? new Redelivered() : new NotCharged(reason);
        const outcome: PaymentOutcome = reason ? 'refund_due' : 'applied';
        const row = { id, orderId: order.id, outcome, reason, amount: event.amount, currency: event.currency, raw };
        if (!(await insertPayment(client, row))) throw new Redelivered();
        await recordEvents(client, [
          reason ? refundDue(order, id, event, reason) : { type: 'order.paid', orderId: order.id },
        ]);
        return reason ? { outcome, reason } : { outcome };
      });
    } catch (err) {
      if (err instanceof Redelivered) return (await recorded())!;
      throw err;
    }
    if (decided?.outcome === 'applied') {
      // Best effort: a key left behind fires an event that finds the order paid and does nothing.
      await dropExpiry(redis, saleId, event.orderId).catch(() => {});
      await publishOrderEvents(redis, [{ orderId: event.orderId, status: TRANSITIONS.pay.to }]);
    }
    if (decided) return { id: event.id, ...decided };
    // No row yet. A winner still queued in Redis is written within milliseconds: 503, and the
    // provider retries. An id nobody sold is the provider's or the configuration's mistake:
    // 404, nothing recorded (it is retried too, harmlessly, until someone looks).
    if (await redis.hexists(saleKeys(saleId).queued, event.orderId)) {
      throw new HttpError('unavailable', 'The order is still being written; retry shortly.');
    }
  }
  throw new HttpError('order_not_found', 'No order has this id.');
}
