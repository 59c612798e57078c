// The payment provider's webhook. No buyer token: the signature over the exact bytes received is
// the authentication, so this plugin (encapsulated: nothing here reaches other routes) takes the
// body as a Buffer instead of the app's JSON parser, and payments.ts parses it only once verified.
import type { FastifyPluginCallback } from 'fastify';
import { REFUND_REASONS } from '../payment-queries.js';
import { receivePayment, SIGNATURE_HEADER, type PaymentDeps } from '../payments.js';
import { documentedOnly, errorResponses, SECURITY } from './schemas.js';

/** Provider events are small; a signed body is checked whole, so it is kept in memory whole. */
const WEBHOOK_BODY_LIMIT = 64 * 1024;

// Documented, never validated: the body is bytes until its signature holds (parseEvent checks it then).
const eventDoc = {
  type: 'object', required: ['id', 'type'],
  properties: {
    id: { type: 'string', description: 'the provider\'s event id: 1 to 255 printable characters' },
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

export const payments: FastifyPluginCallback<PaymentDeps> = (app, deps, done) => {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, parsed) => parsed(null, body));
  app.post<{ Body: Buffer | undefined }>('/api/payments/webhook', { bodyLimit: WEBHOOK_BODY_LIMIT, schema, config: documentedOnly({ body: eventDoc }) }, async (req) =>
    receivePayment(deps, req.body ?? Buffer.alloc(0), req.headers[SIGNATURE_HEADER]));
  done();
};
