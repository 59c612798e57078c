// A second payment provider, shaped as Stripe's webhooks are: `Stripe-Signature: t=...,v1=...`
// (HMAC-SHA256 of "<t>.<raw body>", as the signed webhook), the order in the payment intent's
// metadata, the amount in minor units and the currency in lower case (`eur`). What a new provider
// costs: this file, and one registerProvider line.
import { createHmac } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { HttpError } from '../../shared/runtime/errors.js';
import { ORDER_ID_PATTERN } from '../../shared/runtime/ids.js';
import {
  EVENT_ID_PATTERN,
  type PaymentEvent,
  type PaymentProvider,
  type ProviderDefinition,
} from '../../shared/payments/provider.js';
import { verifySignature } from '../../shared/payments/providers/signed-webhook.js';

export const STRIPE_SECRET = 'whsec_test_0123456789abcdef';
export const INTENT_SUCCEEDED = 'payment_intent.succeeded';

/** The Stripe-Signature header for `raw` signed at `t` (unix seconds). */
export const stripeSignature = (raw: string, t = Math.floor(Date.now() / 1000), secret = STRIPE_SECRET) =>
  `t=${t},v1=${createHmac('sha256', secret).update(`${t}.${raw}`).digest('hex')}`;

/** A payment_intent.succeeded for an order, as Stripe would send it. */
export const intentSucceeded = (id: string, orderId: string, amount: number, currency: string) =>
  JSON.stringify({
    id,
    type: INTENT_SUCCEEDED,
    data: { object: { id: `pi_${id}`, amount, currency, metadata: { orderId } } },
  });

const refuse = (message: string) => new HttpError('invalid_event', message);

class StripeLike implements PaymentProvider {
  readonly name = 'stripe';
  readonly currencyCase = 'lower';

  verify(raw: Buffer, headers: IncomingHttpHeaders): PaymentEvent {
    verifySignature(STRIPE_SECRET, headers['stripe-signature'], raw, Date.now(), 'Stripe-Signature');
    let e: {
      id?: unknown;
      type?: unknown;
      data?: { object?: { amount?: unknown; currency?: unknown; metadata?: { orderId?: unknown } } };
    };
    try {
      e = JSON.parse(raw.toString('utf8')) as typeof e;
    } catch {
      throw refuse('The body is not valid JSON.');
    }
    if (typeof e.id !== 'string' || !EVENT_ID_PATTERN.test(e.id) || typeof e.type !== 'string')
      throw refuse('id and type are required.');
    if (e.type !== INTENT_SUCCEEDED) return { kind: 'ignored', id: e.id, type: e.type };
    const intent = e.data?.object;
    const orderId = intent?.metadata?.orderId;
    if (typeof orderId !== 'string' || !ORDER_ID_PATTERN.test(orderId))
      throw refuse('data.object.metadata.orderId must be an order id.');
    if (!Number.isSafeInteger(intent?.amount) || (intent?.amount as number) < 0)
      throw refuse('data.object.amount must be a whole number of minor units.');
    if (typeof intent?.currency !== 'string' || !/^[a-z]{3}$/.test(intent.currency))
      throw refuse('data.object.currency must be a lower-case ISO 4217 code.');
    return { kind: 'succeeded', id: e.id, orderId, amount: intent.amount as number, currency: intent.currency };
  }
}

export const stripeProvider: ProviderDefinition = {
  name: 'stripe',
  settings: [],
  create: () => new StripeLike(),
  security: {
    key: 'stripeSignature',
    scheme: {
      type: 'apiKey',
      in: 'header',
      name: 'Stripe-Signature',
      description: '`t=<unix s>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`',
    },
  },
  refusals: ['invalid_signature', 'stale_signature'],
  events: {
    body: {
      type: 'object',
      required: ['id', 'type', 'data'],
      properties: { id: { type: 'string' }, type: { type: 'string' }, data: { type: 'object' } },
    },
    types: { [INTENT_SUCCEEDED]: 'pays the order named in data.object.metadata.orderId' },
  },
};
