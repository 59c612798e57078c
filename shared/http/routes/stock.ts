// An operator's live stock controls of one variant: restock and remove (shared/sales/stock.ts, as
// `flashsale sale restock|remove` runs them); the operator is the request's (Auth.admin).
import type { FastifyPluginCallback } from 'fastify';
import type { Auth } from '../../buyers/auth.js';
import type { RedisClient } from '../../redis/connect.js';
import type { Pool } from '../../runtime/db.js';
import { changeStock, MAX_UNITS, type StockChange } from '../../sales/stock.js';
import { saleView } from '../../sales/sale.js';
import { SKU_PATTERN } from '../../sales/variants.js';
import { refusal } from '../plugins/errors.js';
import type { SaleCache } from '../sale-cache.js';
import { errorResponses, saleIdParams, saleViewSchema, SECURITY } from '../schemas.js';

type Route = { Params: { saleId: string; sku: string }; Body: { units: number } };

const params = {
  ...saleIdParams,
  required: ['saleId', 'sku'],
  properties: {
    ...saleIdParams.properties,
    sku: {
      type: 'string',
      pattern: SKU_PATTERN.source,
      description: "the variant's sku (a sale made without variants: `default`)",
      ...refusal('invalid_id', 'The sku must be 1-64 characters of A-Z a-z 0-9 _ -.'),
    },
  },
};

const body = {
  type: 'object',
  required: ['units'],
  additionalProperties: false,
  properties: {
    units: {
      type: 'integer',
      minimum: 1,
      maximum: MAX_UNITS,
      ...refusal('invalid_units', `units must be a whole number from 1 to ${MAX_UNITS}.`),
    },
  },
  ...refusal('invalid_units', 'The body must be {"units": <whole number>}.', 'Unknown field(s): {fields}.'),
};

const answer = {
  description: "the sale, and the variant's stock and units left after the change",
  type: 'object',
  required: ['sale', 'sku', 'units', 'stock', 'available'],
  properties: {
    sale: saleViewSchema,
    sku: { type: 'string' },
    units: { type: 'integer', description: 'the units this call added or removed' },
    stock: { type: 'integer', description: "the variant's stock now" },
    available: { type: 'integer', description: "the variant's units left to sell now" },
  },
};

const DOCS: Record<StockChange, { summary: string; description: string }> = {
  restock: {
    summary: 'Add units to one variant of a live or upcoming sale',
    description:
      "The variant's and the sale's stock grow by `units` in Postgres and in Redis in one transaction, recorded in the audit (`sale.restock`, detail {sku, units}); API processes that saw the variant or the sale sold out sell again at once. Not idempotent: a retried call adds again (its answer shows the stock it left). An ended sale's stock no longer changes (403 ended).",
  },
  remove: {
    summary: 'Take unsold units out of one variant of a live or upcoming sale',
    description:
      "Only units available now are taken, never a buyer's: more than the variant has left is refused (409 not_enough_stock, the message saying how many are available) and changes nothing. Recorded in the audit (`sale.remove`, detail {sku, units}). Not idempotent: a retried call removes again. An ended sale's stock no longer changes (403 ended).",
  },
};

export const stock: FastifyPluginCallback<{ pool: Pool; redis: RedisClient; auth: Auth; saleCache: SaleCache }> = (
  app,
  { pool, redis, auth, saleCache },
  done,
) => {
  for (const change of ['restock', 'remove'] as const) {
    app.post<Route>(
      `/api/sales/:saleId/variants/:sku/${change}`,
      {
        preValidation: auth.admin,
        bodyLimit: 1024,
        schema: {
          ...DOCS[change],
          tags: ['admin'],
          security: SECURITY.admin,
          params,
          body,
          response: {
            200: answer,
            ...errorResponses(
              'invalid_id',
              'invalid_units',
              'invalid_json',
              'unknown_variant',
              'unauthorized',
              'forbidden',
              'ended',
              'sale_not_found',
              'fixed_stock',
              ...(change === 'remove' ? (['not_enough_stock'] as const) : []),
              'payload_too_large',
              'unsupported_media_type',
              'unavailable',
            ),
          },
        },
      },
      async (req) => {
        const { saleId, sku } = req.params;
        const r = await changeStock(pool, redis, saleId, sku, change, req.body.units, req.operator);
        saleCache.drop(saleId);
        return { sale: await saleView(redis, r.sale), sku, units: r.units, stock: r.stock, available: r.available };
      },
    );
  }
  done();
};
