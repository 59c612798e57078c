// The first payment provider: webhook events signed with a shared secret. The signature is the only
// authentication: `Flashsale-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`,
// several v1 entries allowed while a secret is rotated. Only verified bytes are ever parsed. The
// body is one JSON object: `{id, type, orderId, amount, currency}`, no key twice.
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { HttpError } from '../../runtime/errors.js';
import { ORDER_ID_PATTERN } from '../../runtime/ids.js';
import { duplicateKey } from '../../runtime/json-keys.js';
import {
  EVENT_ID_MAX,
  EVENT_ID_PATTERN,
  type PaymentEvent,
  type PaymentProvider,
  type ProviderDefinition,
} from '../provider.js';

export const SIGNATURE_HEADER = 'flashsale-signature';
/** How far a signature's timestamp may be from now, either way: a captured event replays for this long at most. */
export const SIGNATURE_TOLERANCE_SECONDS = 300;
export const PAYMENT_SUCCEEDED = 'payment.succeeded';

const hmac = (secret: string, t: string, raw: Buffer) =>
  createHmac('sha256', secret).update(`${t}.`).update(raw).digest();

/** The header value for `raw` signed at `t` (unix seconds): what the provider sends, and what DIRECT_PAY builds. */
export function signPayload(secret: string, raw: Buffer | string, t = Math.floor(Date.now() / 1000)): string {
  return `t=${t},v1=${hmac(secret, String(t), Buffer.from(raw)).toString('hex')}`;
}

/**
 * Refuses anything but a signature of these exact bytes under the secret, made within the
 * tolerance. `name` is the header's, for the messages: Stripe signs the same way in Stripe-Signature.
 */
export function verifySignature(
  secret: string,
  header: string | string[] | undefined,
  raw: Buffer,
  nowMs = Date.now(),
  name = 'Flashsale-Signature',
): void {
  if (typeof header !== 'string')
    throw new HttpError('invalid_signature', `Send the ${name} header once: t=<unix seconds>,v1=<hex HMAC-SHA256>.`);
  let t: string | undefined;
  const candidates: Buffer[] = [];
  for (const part of header.split(',')) {
    const [key, value = ''] = part.trim().split('=', 2) as [string, string?];
    if (key === 't' && t === undefined && /^\d{1,12}$/.test(value)) t = value;
    else if (key === 'v1' && /^[0-9a-f]{64}$/i.test(value)) candidates.push(Buffer.from(value, 'hex'));
  }
  if (t === undefined || candidates.length === 0)
    throw new HttpError(
      'invalid_signature',
      `The ${name} header needs t=<unix seconds> and at least one v1=<64 hex digits>.`,
    );
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
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw refuse('The event must be a JSON object.');
  const dup = duplicateKey(text);
  if (dup !== undefined)
    throw refuse(`The key ${JSON.stringify(dup.slice(0, 64))} appears more than once in one object.`);
  const e = value as Record<string, unknown>;
  if (typeof e.id !== 'string' || !EVENT_ID_PATTERN.test(e.id))
    throw refuse(`id must be the provider's event id: 1 to ${EVENT_ID_MAX} printable characters.`);
  if (typeof e.type !== 'string') throw refuse('type must be a string.');
  if (e.type !== PAYMENT_SUCCEEDED) return { kind: 'ignored', id: e.id, type: e.type };
  if (typeof e.orderId !== 'string' || !ORDER_ID_PATTERN.test(e.orderId)) throw refuse('orderId must be an order id.');
  if (!(Number.isSafeInteger(e.amount) && (e.amount as number) >= 0))
    throw refuse("amount is required: a whole number of the currency's minor units, 0 or more.");
  // Any code is recorded as sent (a wrong one is a refund, not a retry); the decision compares it exactly.
  if (typeof e.currency !== 'string' || !/^[\x21-\x7e]{1,16}$/.test(e.currency))
    throw refuse('currency is required: the ISO 4217 code of the amount, e.g. EUR.');
  return { kind: 'succeeded', id: e.id, orderId: e.orderId, amount: e.amount as number, currency: e.currency };
}

/** PAYMENT_WEBHOOK_SECRET's provider, recorded as `signed:<event id>`. */
export class SignedWebhook implements PaymentProvider {
  readonly name = 'signed';
  readonly currencyCase = 'upper';

  constructor(private readonly secret: string) {}

  verify(raw: Buffer, headers: IncomingHttpHeaders): PaymentEvent {
    verifySignature(this.secret, headers[SIGNATURE_HEADER], raw);
    return parseEvent(raw);
  }

  /** The headers the provider would send `raw` with (DIRECT_PAY delivers its own events this way). */
  headersFor(raw: Buffer | string): IncomingHttpHeaders {
    return { [SIGNATURE_HEADER]: signPayload(this.secret, raw) };
  }
}

/** The signed webhook in the registry: PAYMENT_WEBHOOK_SECRET's provider, at /api/payments/signed/webhook (and /api/payments/webhook). */
export const signedWebhook: ProviderDefinition<SignedWebhook> = {
  name: 'signed',
  settings: ['paymentWebhookSecret'],
  create: (config) => new SignedWebhook(config.paymentWebhookSecret!),
  security: {
    key: 'webhook',
    scheme: {
      type: 'apiKey',
      in: 'header',
      name: 'Flashsale-Signature',
      description:
        '`t=<unix s>,v1=<hex HMAC-SHA256 of "<t>.<raw body>" under PAYMENT_WEBHOOK_SECRET>`; several v1= during a rotation',
    },
  },
  refusals: ['invalid_signature', 'stale_signature'],
  events: {
    body: {
      type: 'object',
      required: ['id', 'type'],
      properties: {
        id: {
          type: 'string',
          description: `the provider's event id: 1 to ${EVENT_ID_MAX} printable characters (a longer one is 400 invalid_event)`,
        },
        type: { type: 'string', description: `${PAYMENT_SUCCEEDED}; any other type is ignored` },
        orderId: { type: 'string', description: `required for ${PAYMENT_SUCCEEDED}` },
        amount: {
          type: 'integer',
          minimum: 0,
          description: `required for ${PAYMENT_SUCCEEDED}: in the currency's minor unit; pays the order only if it is price x qty`,
        },
        currency: {
          type: 'string',
          description: `required for ${PAYMENT_SUCCEEDED}: the ISO 4217 code, compared with the sale's exactly (upper case)`,
        },
      },
    },
    types: { [PAYMENT_SUCCEEDED]: 'the money for `orderId` was taken: pays the order, or records a refund due' },
  },
};
