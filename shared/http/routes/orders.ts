// Orders: the buyer views one or lists theirs, cancels one, and (DIRECT_PAY only) pays it. Only the
// owner sees an order; anyone else gets 404. Without DIRECT_PAY there is no pay route: payments come from the provider's webhook.
import type { FastifyPluginCallback } from 'fastify';
import type { RedisClient } from '../../redis/connect.js';
import type { Auth } from '../../buyers/auth.js';
import type { Pool } from '../../runtime/db.js';
import type { ReplicaAcks } from '../../redis/replication.js';
import { ORDER_ID_PATTERN, SALE_ID_PATTERN } from '../../runtime/ids.js';
import { cancelOrder } from '../../orders/cancel.js';
import { getOrder, myOrders, MY_ORDERS_MAX, ORDER_STATUSES } from '../../orders/view.js';
import { payOrder, type DirectPayDeps } from '../../payments/direct-pay.js';
import { refusal } from '../plugins/errors.js';
import { errorResponses, SECURITY } from '../schemas.js';

// Checked after the buyer (a preValidation hook): a stranger learns nothing about the id.
export const orderIdParams = {
  type: 'object',
  required: ['orderId'],
  properties: {
    orderId: {
      type: 'string',
      pattern: ORDER_ID_PATTERN.source,
      ...refusal('invalid_id', 'The order id is malformed.'),
    },
  },
};

const orderView = {
  description: 'the order',
  type: 'object',
  required: ['orderId', 'saleId', 'qty', 'status'],
  properties: {
    orderId: { type: 'string' },
    saleId: { type: 'string' },
    qty: { type: 'integer' },
    status: { type: 'string', enum: ORDER_STATUSES },
    expiresAt: { type: 'string', format: 'date-time', description: 'the payment deadline, while pending_payment' },
  },
};
const paidAnswer = {
  description: 'paid (now or before)',
  type: 'object',
  required: ['orderId', 'status'],
  properties: { orderId: { type: 'string' }, status: { type: 'string', enum: ['paid'] } },
};
const viewSchema = {
  summary: "The buyer's order: queued, pending_payment (with expiresAt), paid, expired, cancelled",
  tags: ['orders'],
  security: SECURITY.buyer,
  params: orderIdParams,
  response: { 200: orderView, ...errorResponses('invalid_id', 'unauthorized', 'order_not_found', 'unavailable') },
};
const paySchema = {
  summary: "Pay the buyer's order (DIRECT_PAY=on only): a signed payment.succeeded event through the webhook path",
  tags: ['orders'],
  description:
    'An order it cannot pay (paid by another payment, cancelled, expired) is 409 with nothing charged or recorded; paying again is 200.',
  security: SECURITY.buyer,
  params: orderIdParams,
  response: {
    200: paidAnswer,
    ...errorResponses(
      'invalid_id',
      'unauthorized',
      'order_not_found',
      'order_paid',
      'order_expired',
      'order_cancelled',
      'order_not_ready',
      'unavailable',
    ),
  },
};

const cancelSchema = {
  summary:
    "Cancel the buyer's order while queued or pending_payment: its stock and the buyer's quota come back at once",
  tags: ['orders'],
  security: SECURITY.buyer,
  params: orderIdParams,
  description:
    'Cancelling a cancelled order answers the same. A payment that arrives later is recorded refund_due. A buyer may cancel at most MAX_CANCELS_PER_SALE orders of one sale (default 3); past it, 409 cancel_limit and the order stays as it was.',
  response: {
    200: {
      type: 'object',
      required: ['orderId', 'status'],
      properties: { orderId: { type: 'string' }, status: { type: 'string', enum: ['cancelled'] } },
    },
    ...errorResponses(
      'invalid_id',
      'unauthorized',
      'order_not_found',
      'order_paid',
      'order_expired',
      'cancel_limit',
      'unavailable',
    ),
  },
};

// Query strings are strings (the schemas never coerce): limit is checked as text.
const myOrdersQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    limit: {
      type: 'string',
      pattern: '^(?:[1-9][0-9]?|100)$',
      description: `orders per page, 1 to ${MY_ORDERS_MAX} (default 20)`,
      ...refusal('bad_request', `limit must be a whole number from 1 to ${MY_ORDERS_MAX}.`),
    },
    sale: {
      type: 'string',
      pattern: SALE_ID_PATTERN.source,
      description: "only this sale's orders",
      ...refusal('invalid_id', 'sale must be a sale id.'),
    },
    before: {
      type: 'string',
      pattern: ORDER_ID_PATTERN.source,
      description: "the previous page's `next`: orders bought before this one",
      ...refusal('bad_request', "before must be an order id, the previous page's next."),
    },
  },
  ...refusal('bad_request', 'The query takes limit, sale and before.', 'Unknown query parameter(s): {fields}.'),
};
const myOrdersSchema = {
  summary: "The buyer's orders, newest first, a page at a time (an order still queued is listed once written)",
  tags: ['orders'],
  security: SECURITY.buyer,
  querystring: myOrdersQuery,
  response: {
    200: {
      type: 'object',
      required: ['orders', 'next'],
      properties: {
        orders: {
          type: 'array',
          items: {
            ...orderView,
            required: [...orderView.required, 'purchasedAt'],
            properties: { ...orderView.properties, purchasedAt: { type: 'string', format: 'date-time' } },
          },
        },
        next: { type: 'string', nullable: true, description: 'pass as `before` for the next page; null on the last' },
      },
    },
    ...errorResponses('bad_request', 'invalid_id', 'unauthorized', 'order_not_found', 'unavailable'),
  },
};

type OrderId = { Params: { orderId: string } };
type MyOrdersQuery = { Querystring: { limit?: string; sale?: string; before?: string } };

export const orders: FastifyPluginCallback<{
  pool: Pool;
  redis: RedisClient;
  replicaAcks?: ReplicaAcks;
  auth: Auth;
  maxCancelsPerSale: number;
  directPay?: DirectPayDeps;
}> = (app, { pool, redis, replicaAcks, auth, maxCancelsPerSale, directPay }, done) => {
  const route = { preValidation: auth.buyer };
  app.get<OrderId>('/api/orders/:orderId', { ...route, schema: viewSchema }, async (req) =>
    getOrder(pool, redis, req.params.orderId, req.buyer.id),
  );
  app.post<OrderId>('/api/orders/:orderId/cancel', { ...route, schema: cancelSchema, bodyLimit: 1024 }, async (req) =>
    cancelOrder(pool, redis, req.params.orderId, req.buyer.id, maxCancelsPerSale, replicaAcks),
  );
  app.get<MyOrdersQuery>('/api/me/orders', { ...route, schema: myOrdersSchema }, async (req) => {
    const { limit, sale, before } = req.query;
    return myOrders(pool, req.buyer.id, { limit: limit === undefined ? 20 : Number(limit), saleId: sale, before });
  });
  if (directPay)
    app.post<OrderId>('/api/orders/:orderId/pay', { ...route, schema: paySchema, bodyLimit: 1024 }, async (req) =>
      payOrder(directPay, req.params.orderId, req.buyer.id),
    );
  done();
};
