// Payments arrive as webhook events signed by the payment provider. The signature is the only
// authentication: `Flashsale-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`,
// several v1 entries allowed while a secret is rotated. Only verified bytes are ever parsed.
// A verified payment.succeeded event is decided once, in one transaction with the order's change:
// applied (the order was pending inside its window: paid by the same conditional update as ever)
// or refund_due (closed: expired or cancelled by its buyer; past its deadline; or paid by another
// event: the order and its unit stay as they are, and the money is on record to be paid back).
import { createHmac, timingSafeEqual } from 'node:crypto';
import { withTransaction, type Pool } from './db.js';
import { HttpError } from './errors.js';
import { duplicateKey } from './http/json-body.js';
import { ORDER_ID_PATTERN, saleIdOfOrder } from './ids.js';
import { saleKeys } from './keys.js';
import { metrics } from './metrics.js';
import { publishOrderEvents } from './order-events.js';
import { lockOrder, markPaid } from './order-queries.js';
import { findPayment, insertPayment, type PaymentOutcome } from './payment-queries.js';
import { dropExpiry, type RedisClient } from './redis.js';

export const SIGNATURE_HEADER = 'flashsale-signature';
/** How far a signature's timestamp may be from now, either way: a captured event replays for this long at most. */
export const SIGNATURE_TOLERANCE_SECONDS = 300;
export const PAYMENT_SUCCEEDED = 'payment.succeeded';

export interface PaymentDeps {
  pool: Pool;
  redis: RedisClient;
  /** PAYMENT_WEBHOOK_SECRET. */
  secret: string;
}

export interface PaymentAnswer {
  id: string;
  outcome: PaymentOutcome | 'ignored';
  /** The event was recorded before: nothing changed this time. */
  duplicate?: true;
}

interface PaymentEvent { id: string; type: string; orderId?: string; amount?: number }

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
  if (e.amount !== undefined && !(Number.isSafeInteger(e.amount) && (e.amount as number) >= 0)) throw refuse('amount must be a whole number of minor units, 0 or more.');
  return { id: e.id, type: e.type, orderId: e.orderId, amount: e.amount as number | undefined };
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
  const answer = await applyPayment(deps, event as Required<Pick<PaymentEvent, 'orderId'>> & PaymentEvent, raw.toString('utf8'));
  metrics.payments.inc({ outcome: answer.duplicate ? 'duplicate' : answer.outcome });
  return answer;
}

/** Thrown inside the transaction when the event id is already taken: undoes the order's change. */
class Redelivered extends Error {}

async function applyPayment({ pool, redis }: PaymentDeps, event: PaymentEvent & { orderId: string }, payload: string): Promise<PaymentAnswer> {
  const recorded = async () => {
    const p = await findPayment(pool, event.id);
    return p && { id: p.id, outcome: p.outcome, duplicate: true as const };
  };
  const before = await recorded();
  if (before) return before;
  const saleId = saleIdOfOrder(event.orderId)!;
  // Twice at most: the writer forgets a queued winner only after its row is committed, so a
  // second look at Postgres after a miss in both places settles whether the order exists.
  for (let look = 0; look < 2; look++) {
    let outcome: PaymentOutcome | undefined;
    try {
      outcome = await withTransaction(pool, async (client) => {
        const order = await lockOrder(client, event.orderId);
        if (!order) return undefined;
        const paid = order.status === 'pending' && (await markPaid(client, order.id, order.user_id));
        const decided: PaymentOutcome = paid ? 'applied' : 'refund_due';
        if (!(await insertPayment(client, { id: event.id, orderId: order.id, outcome: decided, amount: event.amount, payload }))) throw new Redelivered();
        return decided;
      });
    } catch (err) {
      if (err instanceof Redelivered) return (await recorded())!;
      throw err;
    }
    if (outcome === 'applied') {
      // Best effort: a key left behind fires an event that finds the order paid and does nothing.
      await dropExpiry(redis, saleId, event.orderId).catch(() => {});
      await publishOrderEvents(redis, [{ orderId: event.orderId, status: 'paid' }]);
    }
    if (outcome) return { id: event.id, outcome };
    // No row yet. A winner still queued in Redis is written within milliseconds: 503, and the
    // provider retries. An id nobody sold is the provider's or the configuration's mistake:
    // 404, nothing recorded (it is retried too, harmlessly, until someone looks).
    if (await redis.hexists(saleKeys(saleId).queued, event.orderId)) {
      throw new HttpError('unavailable', 'The order is still being written; retry shortly.');
    }
  }
  throw new HttpError('order_not_found', 'No order has this id.');
}
