// The payment providers' webhooks, one route each. No buyer token: the provider verifies the exact
// bytes received (a signature, for the signed webhook), so this plugin (encapsulated: nothing here
// reaches other routes) takes the body as a Buffer instead of the app's JSON parser and hands the
// bytes and the headers to the route's provider; nothing is parsed before it has verified them.
import type { FastifyPluginCallback } from 'fastify';
import { REFUND_REASONS } from '../../payments/queries.js';
import { receivePayment, type PaymentDeps } from '../../payments/decide.js';
import { EVENT_ID_MAX, type PaymentProvider } from '../../payments/provider.js';
import { documentedOnly, errorResponses, SECURITY } from '../schemas.js';

/** Provider events are small; a signed body is checked whole, so it is kept in memory whole. */
const WEBHOOK_BODY_LIMIT = 64 * 1024;

// Documented, never validated: the body is bytes until its signature holds (the provider checks it then).
const signedEventDoc = {
  type: 'object', required: ['id', 'type'],
  properties: {
    id: { type: 'string', description: `the provider's event id: 1 to ${EVENT_ID_MAX} printable characters (a longer one is 400 invalid_event)` },
    type: { type: 'string', description: 'payment.succeeded; any other type is ignored' },
    orderId: { type: 'string', description: 'required for payment.succeeded' },
    amount: { type: 'integer', minimum: 0, description: 'required for payment.succeeded: in the currency\'s minor unit; pays the order only if it is price x qty' },
    currency: { type: 'string', description: 'required for payment.succeeded: the ISO 4217 code, compared with the sale\'s exactly (upper case)' },
  },
};
const schema = {
  summary: 'The payment provider\'s signed event: pays the order, or records a refund due', tags: ['payments'], security: SECURITY.webhook,
  response: {
    200: {
      description: 'the event is decided (or was, for a redelivery)', type: 'object', required: ['id', 'outcome'],
      properties: {
        id: { type: 'string' }, outcome: { type: 'string', enum: ['applied', 'refund_due', 'ignored'] },
        reason: { type: 'string', enum: REFUND_REASONS, description: 'why the money could not pay the order (refund_due only)' },
        duplicate: { type: 'boolean', description: 'true for a redelivery of the same bytes: nothing changed' },
      },
    },
    ...errorResponses('invalid_signature', 'stale_signature', 'invalid_event', 'order_not_found', 'event_conflict', 'unavailable', 'payload_too_large', 'unsupported_media_type'),
  },
};

/** The providers this API takes events from; each has a webhook of its own below. */
export interface PaymentProviders {
  signed: PaymentProvider;
}

export const payments: FastifyPluginCallback<PaymentDeps & PaymentProviders> = (app, deps, done) => {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, parsed) => parsed(null, body));
  // One route per provider: the URL picks the provider, which gets the bytes and headers untouched.
  app.post<{ Body: Buffer | undefined }>('/api/payments/webhook', { bodyLimit: WEBHOOK_BODY_LIMIT, schema, config: documentedOnly({ body: signedEventDoc }) }, async (req) =>
    receivePayment(deps, deps.signed, req.body ?? Buffer.alloc(0), req.headers));
  done();
};
