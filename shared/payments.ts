// Payments arrive as webhook events signed by the payment provider. The signature is the only
// authentication: `Flashsale-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`,
// several v1 entries allowed while a secret is rotated. Only verified bytes are ever parsed.
// A verified payment.succeeded event is decided once, in one transaction with the order's change:
// applied (the order was pending inside its window and the event brings exactly its price times
// qty in the sale's currency: paid by the same conditional update as ever) or refund_due, with the
// reason (a wrong amount or currency; closed: expired or cancelled by its buyer; past its deadline;
// or paid by another event): the order and its unit stay as they are, and the money is on record
// to be paid back. An event id is one delivery's bytes: the same id with other bytes is refused.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { withTransaction, type Pool, type PoolClient } from './db.js';
import { HttpError } from './errors.js';
import { duplicateKey } from './http/json-body.js';
import { ORDER_ID_PATTERN, saleIdOfOrder } from './ids.js';
import { saleKeys } from './keys.js';
import type { Logger } from './logger.js';
import { metrics } from './metrics.js';
import { publishOrderEvents } from './order-events.js';
import { lockOrder, markPaid, type OrderRow } from './order-queries.js';
import { findPayment, insertPayment, type PaymentOutcome, type RecordedPayment, type RefundReason } from './payment-queries.js';
import type { RedisClient } from './redis/connect.js';
import { dropExpiry } from './redis/order-scripts.js';

export const SIGNATURE_HEADER = 'flashsale-signature';
/** How far a signature's timestamp may be from now, either way: a captured event replays for this long at most. */
export const SIGNATURE_TOLERANCE_SECONDS = 300;
export const PAYMENT_SUCCEEDED = 'payment.succeeded';

export interface PaymentDeps {
  pool: Pool;
  redis: RedisClient;
  /** PAYMENT_WEBHOOK_SECRET. */
  secret: string;
  logger: Logger;
}

export interface PaymentAnswer {
  id: string;
  outcome: PaymentOutcome | 'ignored';
  /** Why the money could not pay the order (refund_due only). */
  reason?: RefundReason;
  /** The event was recorded before: nothing changed this time. */
  duplicate?: true;
}

interface PaymentEvent { id: string; type: string; orderId?: string; amount?: number; currency?: string }
type Succeeded = PaymentEvent & { orderId: string; amount: number; currency: string };

const hmac = (secret: string, t: string, raw: Buffer) => createHmac('sha256', secret).update(`${t}.`).update(raw).digest();

/** The header value for `raw` signed at `t` (unix seconds): what the provider sends, and what DIRECT_PAY builds. */
export function signPayload(secret: string, raw: Buffer | string, t = Math.floor(Date.now() / 1000)): string {
  return `t=${t},v1=${hmac(secret, String(t), Buffer.from(raw)).toString('hex')}`;
}

/** Refuses anything but a signature of these exact bytes under the secret, made within the tolerance. */
export function verifySignature(secret: string, header: string | string[] | undefined, raw: Buffer, nowMs = Date.now()): void {
  if (typeof header !== 'string') throw new HttpError('invalid_signature', 'Send the Flashsale-Signature header once: t=<unix seconds>,v1=<hex HMAC-SHA256>.');
  let t: string | undefined;
  const candidates: Buffer[] = [];
  for (const part of header.split(',')) {
    const [key, value = ''] = part.trim().split('=', 2) as [string, string?];
    if (key === 't' && t === undefined && /^\d{1,12}$/.test(value)) t = value;
    else if (key === 'v1' && /^[0-9a-f]{64}$/i.test(value)) candidates.push(Buffer.from(value, 'hex'));
  }
  if (t === undefined || candidates.length === 0) throw new HttpError('invalid_signature', 'The Flashsale-Signature header needs t=<unix seconds> and at least one v1=<64 hex digits>.');
  const expected = hmac(secret, t, raw);
  // Every candidate is compared, in constant time, whichever matches.
  let match = false;
  for (const c of candidates) match = timingSafeEqual(c, expected) || match;
  if (!match) throw new HttpError('invalid_signature', 'No v1 signature matches the body under the webhook secret.');
  if (Math.abs(nowMs / 1000 - Number(t)) > SIGNATURE_TOLERANCE_SECONDS) throw new HttpError('stale_signature');
}

const refuse = (message: string) => new HttpError('invalid_event', message);

/** The verified body as an event: JSON, no key twice, the fields we read of the types we expect. */
export function parseEvent(raw: Buffer): PaymentEvent {
  const text = raw.toString('utf8');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw refuse('The body is not valid JSON.');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw refuse('The event must be a JSON object.');
  const dup = duplicateKey(text);
  if (dup !== undefined) throw refuse(`The key ${JSON.stringify(dup.slice(0, 64))} appears more than once in one object.`);
  const e = value as Record<string, unknown>;
  if (typeof e.id !== 'string' || !/^[\x21-\x7e]{1,255}$/.test(e.id)) throw refuse('id must be the provider\'s event id: 1 to 255 printable characters.');
  if (typeof e.type !== 'string') throw refuse('type must be a string.');
  if (e.type !== PAYMENT_SUCCEEDED) return { id: e.id, type: e.type };
  if (typeof e.orderId !== 'string' || !ORDER_ID_PATTERN.test(e.orderId)) throw refuse('orderId must be an order id.');
  if (!(Number.isSafeInteger(e.amount) && (e.amount as number) >= 0)) throw refuse('amount is required: a whole number of the currency\'s minor units, 0 or more.');
  // Any code is recorded as sent (a wrong one is a refund, not a retry); the decision compares it exactly.
  if (typeof e.currency !== 'string' || !/^[\x21-\x7e]{1,16}$/.test(e.currency)) throw refuse('currency is required: the ISO 4217 code of the amount, e.g. EUR.');
  return { id: e.id, type: e.type, orderId: e.orderId, amount: e.amount as number, currency: e.currency };
}

/** Verifies, parses and applies one delivery: what the webhook route and DIRECT_PAY both run. */
export async function receivePayment(deps: PaymentDeps, raw: Buffer, signature: string | string[] | undefined): Promise<PaymentAnswer> {
  let event: PaymentEvent;
  try {
    verifySignature(deps.secret, signature, raw);
    event = parseEvent(raw);
  } catch (err) {
    metrics.payments.inc({ outcome: 'refused' });
    throw err;
  }
  if (event.type !== PAYMENT_SUCCEEDED) {
    metrics.payments.inc({ outcome: 'ignored' });
    return { id: event.id, outcome: 'ignored' };
  }
  try {
    const answer = await applyPayment(deps, event as Succeeded, raw);
    metrics.payments.inc({ outcome: answer.duplicate ? 'duplicate' : answer.outcome });
    return answer;
  } catch (err) {
    if (err instanceof HttpError && err.code === 'event_conflict') {
      metrics.payments.inc({ outcome: 'conflict' });
      // The provider (or whoever holds the secret) signed two bodies under one id: never a retry.
      deps.logger.error({ alert: 'PAYMENT_EVENT_CONFLICT', event: { id: event.id, orderId: event.orderId } }, 'a payment event id came again with a different body: nothing recorded');
    }
    throw err;
  }
}

const answerOf = (p: RecordedPayment): PaymentAnswer => ({ id: p.id, outcome: p.outcome, ...(p.reason ? { reason: p.reason } : {}), duplicate: true });

/** A recorded event: a duplicate when these are its bytes, a conflict otherwise. */
function redelivery(p: RecordedPayment, raw: Buffer): PaymentAnswer {
  if (!p.raw.equals(raw)) throw new HttpError('event_conflict', `Event "${p.id}" was recorded with a different body; an event id names one body. Nothing was recorded.`);
  return answerOf(p);
}

/** Why this event cannot pay this order, judged on the locked row; undefined: it may (markPaid still checks the deadline). */
async function refusalOf(client: PoolClient, order: OrderRow, event: Succeeded): Promise<RefundReason | undefined> {
  if (order.status === 'cancelled') return 'order_cancelled';
  if (order.status === 'expired') return 'order_expired';
  if (order.status === 'paid') return 'already_paid';
  const res = await client.query<{ price: number | null; currency: string | null }>('select price, currency from sales where id = $1', [order.sale_id]);
  const sale = res.rows[0];
  // A sale made before prices takes any amount, as it always did.
  if (!sale || sale.price === null) return undefined;
  if (event.currency !== sale.currency) return 'currency_mismatch';
  return event.amount === sale.price * order.qty ? undefined : 'amount_mismatch';
}

/** Thrown inside the transaction when the event id is already taken: undoes the order's change. */
class Redelivered extends Error {}

async function applyPayment({ pool, redis }: PaymentDeps, event: Succeeded, raw: Buffer): Promise<PaymentAnswer> {
  const recorded = async () => {
    const p = await findPayment(pool, event.id);
    return p && redelivery(p, raw);
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
        const outcome: PaymentOutcome = reason ? 'refund_due' : 'applied';
        const row = { id: event.id, orderId: order.id, outcome, reason, amount: event.amount, currency: event.currency, raw };
        if (!(await insertPayment(client, row))) throw new Redelivered();
        return reason ? { outcome, reason } : { outcome };
      });
    } catch (err) {
      if (err instanceof Redelivered) return (await recorded())!;
      throw err;
    }
    if (decided?.outcome === 'applied') {
      // Best effort: a key left behind fires an event that finds the order paid and does nothing.
      await dropExpiry(redis, saleId, event.orderId).catch(() => {});
      await publishOrderEvents(redis, [{ orderId: event.orderId, status: 'paid' }]);
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
