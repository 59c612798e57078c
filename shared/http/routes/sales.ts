// Sales: create, list and end (admin), view, and purchase, with the schemas of their input and answers.
import type { FastifyPluginCallback, FastifyReply, FastifyRequest } from 'fastify';
import type { RedisClient } from '../../redis/connect.js';
import type { LoadOptions } from '../../redis/sale-scripts.js';
import type { Auth } from '../../auth.js';
import type { Pool } from '../../db.js';
import { CHALLENGE_SECONDS, type Challenges, PURCHASE_TOKEN_SECONDS } from '../../challenge.js';
import { HttpError } from '../../errors.js';
import { SALE_ID_PATTERN, SALE_ID_RULE } from '../../ids.js';
import { purchaseOutcome } from '../../metrics.js';
import type { Purchaser } from '../../purchase.js';
import { endSale, LIST_LIMIT, listSalePage } from '../../sale-admin.js';
import { createSale, MAX_PER_ORDER, parseSaleInput, SALE_FIELDS, saleView, type SaleState } from '../../sales.js';
import type { SaleCache } from '../sale-cache.js';
import { answerFor, refusal } from '../plugins/errors.js';
import { challengeLimit, purchaseAddressLimit, type RateLimitSettings } from '../plugins/rate-limit.js';
import { documentedOnly, errorResponses, saleDefinitionSchema, salePageSchema, saleViewSchema, SECURITY } from '../schemas.js';

export const PURCHASE_URL = '/api/sales/:saleId/purchases';
export const PURCHASE_TOKEN_HEADER = 'flashsale-purchase-token';

export const saleIdParams = {
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

const STATES: SaleState[] = ['upcoming', 'open', 'sold_out', 'ended'];

// Query strings are strings (the schemas never coerce): limit is checked as text.
const listQuery = {
  type: 'object', additionalProperties: false,
  properties: {
    state: { type: 'string', enum: STATES, ...refusal('bad_request', `state must be one of ${STATES.join(', ')}.`) },
    limit: {
      type: 'string', pattern: '^(?:[1-9][0-9]?|100)$', description: `sales per page, 1 to ${LIST_LIMIT.max} (default ${LIST_LIMIT.default})`,
      ...refusal('bad_request', `limit must be a whole number from 1 to ${LIST_LIMIT.max}.`),
    },
    before: {
      type: 'string', pattern: SALE_ID_PATTERN.source, description: 'the previous page\'s `next`: sales created before this one',
      ...refusal('bad_request', 'before must be a sale id, the previous page\'s next.'),
    },
  },
  ...refusal('bad_request', 'The query takes state, limit and before.', 'Unknown query parameter(s): {fields}.'),
};

const purchaseAnswer = {
  description: 'reserved: the order is queued for writing', type: 'object', required: ['orderId', 'status'],
  properties: { orderId: { type: 'string' }, status: { type: 'string', enum: ['queued'] } },
};

const SOLD_OUT_BODY = JSON.stringify(new HttpError('sold_out').body());

type SaleId = { Params: { saleId: string } };
type ListQuery = { Querystring: { state?: SaleState; limit?: string; before?: string } };

type SalesDeps = {
  pool: Pool; redis: RedisClient; purchaser: Purchaser; auth: Auth; limits: RateLimitSettings; saleCache: SaleCache; challenges: Challenges;
  /** LEGACY_BUY_COUNTS, for the sales this API creates. */
  load: LoadOptions;
};

export const sales: FastifyPluginCallback<SalesDeps> = (app, { pool, redis, purchaser, auth, limits, saleCache, challenges, load }, done) => {
  const cachedSale = (id: string) => saleCache.get(id);

  app.post('/api/sales', {
    preValidation: auth.admin,
    schema: {
      summary: 'Create a sale and load it into Redis', tags: ['admin'], security: SECURITY.admin, body: saleBody,
      response: { 201: saleViewSchema, ...errorResponses('invalid_sale', 'invalid_json', 'unauthorized', 'forbidden', 'sale_exists', 'payload_too_large', 'unsupported_media_type', 'unavailable') },
    },
    config: documentedOnly({ body: saleDefinitionSchema }),
  }, async (req, reply) => {
    const sale = parseSaleInput(req.body);
    await createSale(pool, redis, sale, load);
    return reply.code(201).send(await saleView(redis, sale));
  });

  app.get<ListQuery>('/api/sales', {
    preValidation: auth.admin,
    schema: {
      summary: 'List sales, newest first, a page at a time', tags: ['admin'], security: SECURITY.admin, querystring: listQuery,
      description: 'A page of `open` or `sold_out` may hold fewer than `limit` sales: follow `next` until it is null.',
      response: { 200: salePageSchema, ...errorResponses('bad_request', 'unauthorized', 'forbidden', 'unavailable') },
    },
  }, async (req) => {
    const { state, limit, before } = req.query;
    return listSalePage(pool, redis, { state, limit: limit === undefined ? undefined : Number(limit), before });
  });

  app.get<SaleId>('/api/sales/:saleId', {
    schema: {
      summary: 'A sale, its stock left and its state', tags: ['sales'], params: saleIdParams,
      response: { 200: saleViewSchema, ...errorResponses('invalid_id', 'sale_not_found', 'unavailable') },
    },
  }, async (req) => saleView(redis, await cachedSale(req.params.saleId)));

  app.post<SaleId>('/api/sales/:saleId/end', {
    preValidation: auth.admin, bodyLimit: 1024,
    schema: {
      summary: 'End a sale now: no new purchases; pending orders stay payable until their deadline', tags: ['admin'],
      description: 'Ending a sale that has ended already changes nothing and answers the sale as it is.',
      security: SECURITY.admin, params: saleIdParams,
      response: { 200: saleViewSchema, ...errorResponses('invalid_id', 'unauthorized', 'forbidden', 'sale_not_found', 'unavailable') },
    },
  }, async (req) => {
    const { sale } = await endSale(pool, redis, req.params.saleId);
    saleCache.drop(sale.id);
    return saleView(redis, sale);
  });

  // Per buyer, once auth has said who it is: each issue costs a signature, each exchange a verification.
  app.get<SaleId>('/api/sales/:saleId/challenge', {
    preValidation: auth.buyer, preHandler: challengeLimit(app, redis, limits, 'challenge'),
    schema: {
      summary: 'A proof-of-work challenge for this buyer and sale (a sale with challenge: pow)', tags: ['sales'], security: SECURITY.buyer, params: saleIdParams,
      description: `Solve it with the altcha widget (or altcha-lib's solveChallenge, SHA-256, searching up from 0): about challengeComplexity hashes on average, at most twice that; valid for ${CHALLENGE_SECONDS} s.`,
      response: {
        200: { description: 'the challenge, as altcha-lib makes it', type: 'object', additionalProperties: true },
        ...errorResponses('invalid_id', 'unauthorized', 'sale_not_found', 'no_challenge', 'rate_limited', 'unavailable'),
      },
    },
  }, async (req) => challenges.challenge(await cachedSale(req.params.saleId), req.buyer));

  app.post<SaleId & { Body: { payload: string } }>('/api/sales/:saleId/purchase-token', {
    preValidation: auth.buyer, preHandler: challengeLimit(app, redis, limits, 'exchange'), bodyLimit: 16 * 1024,
    schema: {
      summary: 'Exchange a solved challenge for a purchase token, once the sale is open', tags: ['sales'], security: SECURITY.buyer, params: saleIdParams,
      description: `A solved challenge earns one token. Send it as \`${PURCHASE_TOKEN_HEADER}\` with a purchase: it makes one reservation, within ${PURCHASE_TOKEN_SECONDS} s.`,
      body: {
        type: 'object', required: ['payload'], additionalProperties: false,
        properties: { payload: { type: 'string', minLength: 1, maxLength: 8192, description: 'the widget\'s base64 payload' } },
        ...refusal('bad_request', 'The body must be {"payload": "<the solved challenge>"}.', 'Unknown field(s): {fields}.'),
      },
      response: {
        200: { description: 'the purchase token', type: 'object', required: ['token', 'expiresAt'], properties: { token: { type: 'string' }, expiresAt: { type: 'string', format: 'date-time' } } },
        ...errorResponses('bad_request', 'invalid_json', 'invalid_id', 'unauthorized', 'challenge_failed', 'not_started', 'ended', 'sale_not_found', 'no_challenge',
          'rate_limited', 'payload_too_large', 'unsupported_media_type', 'unavailable'),
      },
    },
  }, async (req) => {
    const sale = await cachedSale(req.params.saleId);
    const { available } = await saleView(redis, sale);
    return challenges.exchange(sale, req.buyer, req.body.payload, available);
  });

  // The sale id before the buyer, the buyer before the body: a malformed path is a 400 whoever asks.
  // Callback hooks, not async: every purchase runs them, and an async hook costs a promise each.
  const saleIdFirst = (req: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void) => {
    const valid = req.getValidationFunction('params');
    if (valid && !valid(req.params)) return done(Object.assign(new Error('invalid params'), { validation: valid.errors }));
    done();
  };
  // No body at all buys one; a body of null is refused like any other body that is no object.
  const noBodyBuysOne = (req: FastifyRequest, _reply: FastifyReply, done: () => void) => {
    if (req.body === undefined) req.body = {};
    done();
  };
  // Most of a crowd arrives after the sale sold out. A sale this process knows sold out is answered
  // as soon as the buyer is known, before the body is read and checked: that answer holds whatever
  // the body says, and reading and checking it was most of what such a request cost (BENCHMARKS.md).
  // A request the memory does not answer goes on; the handler does not ask the memory again.
  const soldOutFirst = (req: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => {
    if (!purchaser.answerSoldOut((req.params as { saleId: string }).saleId)) return done();
    auth.buyer(req, reply, (err) => {
      if (err) return done(err);
      purchaseOutcome('sold_out').inc();
      void reply.code(409).type('application/json; charset=utf-8').send(SOLD_OUT_BODY);
    });
  };
  // Per address on arrival, refused before the handler, so nothing changes; per buyer, purchase.lua
  // counts and refuses in the purchase's own round trip.
  const addressLimit = purchaseAddressLimit(app, redis, limits, (saleId) => purchaser.soldOut(saleId));
  app.post<SaleId & { Body: { qty?: number | null } }>(PURCHASE_URL, {
    onRequest: addressLimit ? [soldOutFirst, addressLimit] : soldOutFirst, bodyLimit: 1024, preValidation: [saleIdFirst, auth.buyer, noBodyBuysOne],
    schema: {
      summary: 'Buy: reserve stock for the buyer', tags: ['sales'], security: SECURITY.buyer, params: saleIdParams, body: purchaseBody,
      description: `A sale with \`challenge: pow\` needs the header \`${PURCHASE_TOKEN_HEADER}\` (POST /api/sales/{saleId}/purchase-token); a token makes one reservation. A sale with \`admission: queue\` takes the pass its waiting room gave the buyer in the same header; a \`draw\` sale sells only through its draw. Once this API process knows a sale is sold out, a buyer's purchase is answered \`409 sold_out\` before its body is read.`,
      response: {
        202: purchaseAnswer,
        ...errorResponses('invalid_qty', 'qty_above_max', 'bad_request', 'invalid_json', 'invalid_id', 'unauthorized', 'not_started', 'ended',
          'purchase_token_required', 'invalid_purchase_token', 'purchase_token_used', 'admission_pass_required', 'admission_pass_invalid', 'draw_sale',
          'sale_not_found', 'sold_out', 'not_enough_stock', 'limit_reached', 'rate_limited', 'payload_too_large', 'unsupported_media_type', 'unavailable'),
      },
    },
  }, async (req, reply) => {
    const { saleId } = req.params;
    const qty = req.body.qty ?? 1;
    try {
      // A token is checked when given (one HMAC); purchase.lua refuses a `pow` sale without one, and a spent one.
      const header = req.headers[PURCHASE_TOKEN_HEADER];
      const token = header === undefined ? undefined : await challenges.check(saleId, req.buyer, String(header));
      const { orderId } = await purchaser.purchase(saleId, req.buyer, qty, Date.now(), token);
      purchaseOutcome('queued').inc();
      // The answer's JSON by hand: an order id is [A-Za-z0-9_.-] only (ids.ts), nothing to escape.
      return await reply.code(202).type('application/json; charset=utf-8').send(`{"orderId":"${orderId}","status":"queued"}`);
    } catch (err) {
      // The code the buyer is answered: a refusal's own, `unavailable`, or `internal` for a bug.
      purchaseOutcome(answerFor(err).code).inc();
      throw err;
    }
  });
  done();
};
