// Orders: the buyer views one, and (DIRECT_PAY only) pays it. Only the owner sees an order; anyone
// else gets 404. Without DIRECT_PAY there is no pay route: payments come from the provider's webhook.
import type { FastifyPluginCallback } from 'fastify';
import type { RedisClient } from '../redis.js';
import type { Auth } from '../auth.js';
import type { Pool } from '../db.js';
import type { PaymentDeps } from '../payments.js';
import { ORDER_ID_PATTERN } from '../ids.js';
import { getOrder, payOrder } from '../orders.js';
import { refusal } from './errors.js';

// Checked after the buyer (a preValidation hook): a stranger learns nothing about the id.
const orderIdParams = {
  type: 'object', required: ['orderId'],
  properties: { orderId: { type: 'string', pattern: ORDER_ID_PATTERN.source, ...refusal('invalid_id', 'The order id is malformed.') } },
};

type OrderId = { Params: { orderId: string } };

export const orders: FastifyPluginCallback<{ pool: Pool; redis: RedisClient; auth: Auth; directPay?: PaymentDeps }> = (app, { pool, redis, auth, directPay }, done) => {
  const route = { preValidation: auth.buyer, schema: { params: orderIdParams } };
  app.get<OrderId>('/api/orders/:orderId', route, async (req) => getOrder(pool, redis, req.params.orderId, req.buyer));
  if (directPay) app.post<OrderId>('/api/orders/:orderId/pay', { ...route, bodyLimit: 1024 }, async (req) => payOrder(directPay, req.params.orderId, req.buyer));
  done();
};
