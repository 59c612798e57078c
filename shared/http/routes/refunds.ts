// Closing a refund (admin): the operator records that the money of a refund_due payment went back.
// The same step as `flashsale refunds mark` (shared/payments/refunds.ts); marking again answers the first record.
import type { FastifyPluginCallback } from 'fastify';
import type { Auth } from '../../buyers/auth.js';
import type { Pool } from '../../runtime/db.js';
import { REFUND_REASONS } from '../../payments/queries.js';
import { PAYMENT_ID_MAX } from '../../payments/provider.js';
import { markRefunded, REFERENCE_MAX } from '../../payments/refunds.js';
import { refusal } from '../plugins/errors.js';
import { errorResponses, SECURITY } from '../schemas.js';

const params = {
  type: 'object',
  required: ['paymentId'],
  properties: {
    paymentId: {
      type: 'string',
      pattern: `^[\\x21-\\x7e]{1,${PAYMENT_ID_MAX}}$`,
      ...refusal(
        'invalid_id',
        `The payment id is as \`flashsale refunds\` lists it, <provider>:<event id>: 1 to ${PAYMENT_ID_MAX} printable characters.`,
      ),
    },
  },
};
const body = {
  type: 'object',
  required: ['reference'],
  additionalProperties: false,
  properties: {
    reference: {
      type: 'string',
      minLength: 1,
      maxLength: REFERENCE_MAX,
      description: "the provider's refund id, or how the money went back",
    },
  },
  ...refusal(
    'bad_request',
    'The body must be {"reference": "<the provider\'s refund id or a note>"}.',
    'Unknown field(s): {fields}.',
  ),
};
const text = { type: 'string' };
const time = (description: string) => ({ type: 'string', format: 'date-time', nullable: true, description });
const refund = {
  description: 'the refund, closed (by this call or an earlier one: its first record, unchanged)',
  type: 'object',
  required: [
    'paymentId',
    'orderId',
    'saleId',
    'userId',
    'reason',
    'amount',
    'currency',
    'receivedAt',
    'refundedAt',
    'reference',
  ],
  properties: {
    paymentId: text,
    orderId: text,
    saleId: text,
    userId: text,
    reason: { type: 'string', enum: REFUND_REASONS },
    amount: { type: 'integer', nullable: true, description: 'as the provider sent it, in minor units' },
    currency: { type: 'string', nullable: true },
    receivedAt: { type: 'string', format: 'date-time' },
    refundedAt: time('when it was marked paid back'),
    reference: { type: 'string', nullable: true },
  },
};

export const refunds: FastifyPluginCallback<{ pool: Pool; auth: Auth }> = (app, { pool, auth }, done) => {
  app.post<{ Params: { paymentId: string }; Body: { reference: string } }>(
    '/api/payments/:paymentId/refund',
    {
      preValidation: auth.admin,
      bodyLimit: 4096,
      schema: {
        summary: "Record that a refund_due payment's money was paid back",
        tags: ['admin'],
        security: SECURITY.admin,
        params,
        body,
        description: 'Marking a refund already marked answers its first record unchanged.',
        response: {
          200: refund,
          ...errorResponses(
            'bad_request',
            'invalid_json',
            'invalid_id',
            'unauthorized',
            'forbidden',
            'payment_not_found',
            'not_refund_due',
            'payload_too_large',
            'unsupported_media_type',
            'unavailable',
          ),
        },
      },
    },
    async (req) => markRefunded(pool, req.params.paymentId, req.body.reference, req.operator),
  );
  done();
};
