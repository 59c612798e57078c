// Sales: create, list and end (admin), and view, with the schemas of their input and answers.
// Buying is apart: purchase.ts, and challenge.ts for a `pow` sale's purchase token.
import type { FastifyPluginCallback } from 'fastify';
import type { RedisClient } from '../../redis/connect.js';
import type { LoadOptions } from '../../sales/scripts.js';
import type { Auth } from '../../buyers/auth.js';
import { databaseNow, type Pool } from '../../runtime/db.js';
import { SALE_ID_PATTERN } from '../../runtime/ids.js';
import { endSale, LIST_LIMIT, listSalePage } from '../../sales/admin.js';
import { createSale, parseSaleInput, SALE_FIELDS, saleView, type SaleState } from '../../sales/sale.js';
import { refusal } from '../plugins/errors.js';
import type { SaleCache } from '../sale-cache.js';
import {
  adminSaleSchema,
  documentedOnly,
  errorResponses,
  saleDefinitionSchema,
  saleIdParams,
  salePageSchema,
  saleViewSchema,
  SECURITY,
} from '../schemas.js';

// The shape only: parseSaleInput checks each field, for this route and for `flashsale sale create`.
const saleBody = {
  type: 'object',
  additionalProperties: false,
  properties: Object.fromEntries([...SALE_FIELDS, 'variants'].map((field) => [field, {}])),
  ...refusal('invalid_sale', 'the body must be a JSON object', 'unknown field(s): {fields}'),
};

const STATES: SaleState[] = ['upcoming', 'open', 'sold_out', 'ended'];

// Query strings are strings (the schemas never coerce): limit is checked as text.
const listQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    state: { type: 'string', enum: STATES, ...refusal('bad_request', `state must be one of ${STATES.join(', ')}.`) },
    limit: {
      type: 'string',
      pattern: '^(?:[1-9][0-9]?|100)$',
      description: `sales per page, 1 to ${LIST_LIMIT.max} (default ${LIST_LIMIT.default})`,
      ...refusal('bad_request', `limit must be a whole number from 1 to ${LIST_LIMIT.max}.`),
    },
    before: {
      type: 'string',
      pattern: SALE_ID_PATTERN.source,
      description: "the previous page's `next`: sales created before this one",
      ...refusal('bad_request', "before must be a sale id, the previous page's next."),
    },
  },
  ...refusal('bad_request', 'The query takes state, limit and before.', 'Unknown query parameter(s): {fields}.'),
};

type SaleId = { Params: { saleId: string } };
type ListQuery = { Querystring: { state?: SaleState; limit?: string; before?: string } };

type SalesDeps = {
  pool: Pool;
  redis: RedisClient;
  auth: Auth;
  saleCache: SaleCache;
  /** LEGACY_BUY_COUNTS, for the sales this API creates. */
  load: LoadOptions;
};

export const sales: FastifyPluginCallback<SalesDeps> = (app, { pool, redis, auth, saleCache, load }, done) => {
  app.post(
    '/api/sales',
    {
      preValidation: auth.admin,
      schema: {
        summary: 'Create a sale and load it into Redis',
        tags: ['admin'],
        security: SECURITY.admin,
        body: saleBody,
        response: {
          201: saleViewSchema,
          ...errorResponses(
            'invalid_sale',
            'invalid_json',
            'unauthorized',
            'forbidden',
            'sale_exists',
            'payload_too_large',
            'unsupported_media_type',
            'unavailable',
          ),
        },
      },
      config: documentedOnly({ body: saleDefinitionSchema }),
    },
    async (req, reply) => {
      // A sale given no start starts at Postgres's now, not this host's.
      const sale = parseSaleInput(req.body, await databaseNow(pool));
      await createSale(pool, redis, sale, load, req.operator);
      return reply.code(201).send(await saleView(redis, sale));
    },
  );

  app.get<ListQuery>(
    '/api/sales',
    {
      preValidation: auth.admin,
      schema: {
        summary: 'List sales, newest first, a page at a time',
        tags: ['admin'],
        security: SECURITY.admin,
        querystring: listQuery,
        description:
          'A page of `open` or `sold_out` may hold fewer than `limit` sales: follow `next` until it is null.',
        response: { 200: salePageSchema, ...errorResponses('bad_request', 'unauthorized', 'forbidden', 'unavailable') },
      },
    },
    async (req) => {
      const { state, limit, before } = req.query;
      return listSalePage(pool, redis, { state, limit: limit === undefined ? undefined : Number(limit), before });
    },
  );

  app.get<SaleId>(
    '/api/sales/:saleId',
    {
      schema: {
        summary: 'A sale, its stock left and its state',
        tags: ['sales'],
        params: saleIdParams,
        response: { 200: saleViewSchema, ...errorResponses('invalid_id', 'sale_not_found', 'unavailable') },
      },
    },
    async (req) => saleView(redis, await saleCache.get(req.params.saleId)),
  );

  app.post<SaleId>(
    '/api/sales/:saleId/end',
    {
      preValidation: auth.admin,
      bodyLimit: 1024,
      schema: adminSaleSchema(
        'End a sale now: no new purchases (a draw: no new entries, and every entrant without an order has lost); pending orders stay payable until their deadline',
        'Ending a sale that has ended already changes nothing and answers the sale as it is.',
        saleViewSchema,
      ),
    },
    async (req) => {
      const { sale } = await endSale(pool, redis, req.params.saleId, undefined, req.operator);
      saleCache.drop(sale.id);
      return saleView(redis, sale);
    },
  );
  done();
};
