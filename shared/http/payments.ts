// The payment provider's webhook. No buyer token: the signature over the exact bytes received is
// the authentication, so this plugin (encapsulated: nothing here reaches other routes) takes the
// body as a Buffer instead of the app's JSON parser, and payments.ts parses it only once verified.
import type { FastifyPluginCallback } from 'fastify';
import { receivePayment, SIGNATURE_HEADER, type PaymentDeps } from '../payments.js';

/** Provider events are small; a signed body is checked whole, so it is kept in memory whole. */
const WEBHOOK_BODY_LIMIT = 64 * 1024;

export const payments: FastifyPluginCallback<PaymentDeps> = (app, deps, done) => {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, parsed) => parsed(null, body));
  app.post<{ Body: Buffer | undefined }>('/api/payments/webhook', { bodyLimit: WEBHOOK_BODY_LIMIT }, async (req) =>
    receivePayment(deps, req.body ?? Buffer.alloc(0), req.headers[SIGNATURE_HEADER]));
  done();
};
