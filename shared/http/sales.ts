// Sales: create (admin), view, and purchase, with the schemas of their input.
import type { FastifyPluginCallback, FastifyRequest } from 'fastify';
import type { RedisClient } from '../redis.js';
import type { Auth } from '../auth.js';
import type { Pool } from '../db.js';
import { HttpError } from '../errors.js';
import { SALE_ID_PATTERN, SALE_ID_RULE } from '../ids.js';
import { metrics } from '../metrics.js';
import type { Purchaser } from '../purchase.js';
import { createSale, getSale, MAX_PER_ORDER, parseSaleInput, SALE_FIELDS, saleView, type Sale } from '../sales.js';
import { answerFor, refusal } from './errors.js';

export const PURCHASE_URL = '/api/sales/:saleId/purchases';

const saleIdParams = {
  type: 'object', required: ['saleId'],
  properties: { saleId: { type: 'string', pattern: SALE_ID_PATTERN.source, ...refusal('invalid_id', `The sale id must be ${SALE_ID_RULE}.`) } },
};

const purchaseBody = {
  type: 'object', additionalProperties: false,
  // A null qty is the default, as a missing one.
  properties: { qty: { type: 'integer', nullable: true, minimum: 1, maximum: MAX_PER_ORDER, ...refusal('invalid_qty', `qty must be an integer from 1 to ${MAX_PER_ORDER}.`) } },
  ...refusal('bad_request', 'The body must be a JSON object like {"qty": 1}.', 'Unknown field(s): {fields}.'),
};

// The shape only: parseSaleInput checks each field, for this route and for `flashsale sale create`.
const saleBody = {
  type: 'object', additionalProperties: false,
  properties: Object.fromEntries(SALE_FIELDS.map((field) => [field, {}])),
  ...refusal('invalid_sale', 'the body must be a JSON object', 'unknown field(s): {fields}'),
};

const SOLD_OUT_BODY = JSON.stringify(new HttpError('sold_out').body());

type SaleId = { Params: { saleId: string } };

export const sales: FastifyPluginCallback<{ pool: Pool; redis: RedisClient; purchaser: Purchaser; auth: Auth }> = (app, { pool, redis, purchaser, auth }, done) => {
  // Sale rules change only by creating a sale; a second of staleness is fine for the view.
  const saleCache = new Map<string, { sale: Sale; until: number }>();
  const cachedSale = async (id: string): Promise<Sale> => {
    const hit = saleCache.get(id);
    if (hit && hit.until > Date.now()) return hit.sale;
    const sale = await getSale(pool, id);
    if (!sale) throw new HttpError('sale_not_found');
    saleCache.set(id, { sale, until: Date.now() + 1000 });
    return sale;
  };

  app.post('/api/sales', { preValidation: auth.admin, schema: { body: saleBody } }, async (req, reply) => {
    const sale = parseSaleInput(req.body);
    await createSale(pool, redis, sale);
    return reply.code(201).send(await saleView(redis, sale));
  });

  app.get<SaleId>('/api/sales/:saleId', { schema: { params: saleIdParams } }, async (req) => saleView(redis, await cachedSale(req.params.saleId)));

  // The sale id before the buyer, the buyer before the body: a malformed path is a 400 whoever asks.
  const saleIdFirst = async (req: FastifyRequest) => {
    const valid = req.getValidationFunction('params');
    if (valid && !valid(req.params)) throw Object.assign(new Error('invalid params'), { validation: valid.errors });
  };
  // No body at all buys one; a body of null is refused like any other body that is no object.
  const noBodyBuysOne = async (req: FastifyRequest) => {
    if (req.body === undefined) req.body = {};
  };
  app.post<SaleId & { Body: { qty?: number | null } }>(PURCHASE_URL, {
    bodyLimit: 1024, preValidation: [saleIdFirst, auth.buyer, noBodyBuysOne], schema: { params: saleIdParams, body: purchaseBody },
  }, async (req, reply) => {
    const { saleId } = req.params;
    const qty = req.body.qty ?? 1;
    // Most of a crowd arrives after the sale sold out: answered from memory without building and
    // throwing an error, which profiling showed to cost more than the rest of such a request.
    if (purchaser.soldOut(saleId)) {
      metrics.purchases.inc({ outcome: 'sold_out' });
      return reply.code(409).type('application/json; charset=utf-8').send(SOLD_OUT_BODY);
    }
    try {
      const { orderId } = await purchaser.purchase(saleId, req.buyer, qty);
      metrics.purchases.inc({ outcome: 'queued' });
      return await reply.code(202).send({ orderId, status: 'queued' });
    } catch (err) {
      // The code the buyer is answered: a refusal's own, `unavailable`, or `internal` for a bug.
      metrics.purchases.inc({ outcome: answerFor(err).code });
      throw err;
    }
  });
  done();
};
