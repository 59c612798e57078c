// What the routes answer, as JSON schemas: for the OpenAPI document (plugins/docs.ts) and for
// fastify, which serializes each answer by the schema of its status. That serializer drops any
// property a schema does not list, so each success schema names every property its route returns.
// Also the schema parts several routes files share: a sale's path, an operator's route on a sale.
import type { SwaggerTransform } from '@fastify/swagger';
import { ERRORS, type ErrorCode } from '../runtime/errors.js';
import { SALE_ID_PATTERN, SALE_ID_RULE } from '../runtime/ids.js';
import { ORDER_STATES, STATE_RULES } from '../orders/states.js';
import { ADMISSIONS, BUYERS, CHALLENGES, SALE_DEFINITION, SALE_FIELDS } from '../sales/definition.js';
import type { Field } from '../sales/field.js';
import { DEFAULT_SKU, MAX_VARIANTS, SKU_PATTERN } from '../sales/variants.js';
import { refusal } from './plugins/errors.js';

/** Who may call a route, as the OpenAPI document's security schemes name them. */
export const SECURITY = {
  buyer: [{ buyer: [] }],
  admin: [{ admin: [] }],
};

/** Every route may be shed under load or meet a bug of ours. */
const ANY_ROUTE: ErrorCode[] = ['busy', 'internal'];

/**
 * The `{error, message}` body, one response per status: `error` enumerates the codes the route
 * answers with that status, and the description gives each code's usual message.
 */
export function errorResponses(...codes: ErrorCode[]): Record<number, object> {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of [...codes, ...ANY_ROUTE]) {
    const status = ERRORS[code][0];
    const list = byStatus.get(status) ?? [];
    if (!list.includes(code)) list.push(code);
    byStatus.set(status, list);
  }
  return Object.fromEntries(
    [...byStatus].map(([status, list]) => [
      status,
      {
        description: list.map((c) => `\`${c}\`: ${ERRORS[c][1]}`).join(' '),
        type: 'object',
        required: ['error', 'message'],
        properties: {
          error: { type: 'string', enum: list },
          message: { type: 'string', description: 'human text, often more precise than the usual one' },
        },
      },
    ]),
  );
}

/** The path parameter of every route on one sale. */
export const saleIdParams = {
  type: 'object',
  required: ['saleId'],
  properties: {
    saleId: {
      type: 'string',
      pattern: SALE_ID_PATTERN.source,
      ...refusal('invalid_id', `The sale id must be ${SALE_ID_RULE}.`),
    },
  },
};

/** An operator's route on one sale (end it, its live numbers): its answer, and the refusals all of them share. */
export function adminSaleSchema(summary: string, description: string, answer: object) {
  return {
    summary,
    tags: ['admin'],
    description,
    security: SECURITY.admin,
    params: saleIdParams,
    response: {
      200: answer,
      ...errorResponses('invalid_id', 'unauthorized', 'forbidden', 'sale_not_found', 'unavailable'),
    },
  };
}

const integer = { type: 'integer' };
const time = (description: string, nullable = false) => ({
  type: 'string',
  format: 'date-time',
  description,
  ...(nullable ? { nullable: true } : {}),
});

const SALE_VIEW_PROPERTIES = {
  id: { type: 'string' },
  name: { type: 'string' },
  stock: integer,
  available: { type: 'integer', description: 'stock left in Redis' },
  perUserLimit: integer,
  maxPerOrder: integer,
  paymentWindowSeconds: integer,
  startsAt: time('the start'),
  endsAt: time('the end; null: the sale never ends', true),
  state: { type: 'string', enum: ['upcoming', 'open', 'sold_out', 'ended'] },
  challenge: {
    type: 'string',
    enum: CHALLENGES,
    description: '`pow`: a purchase needs a purchase token (GET .../challenge, POST .../purchase-token)',
  },
  challengeComplexity: { type: 'integer', description: 'about how many hashes a challenge takes' },
  buyers: {
    type: 'string',
    enum: BUYERS,
    description: '`verified-email`: only buyers whose token carries `email_verified: true`',
  },
  price: {
    type: 'integer',
    nullable: true,
    description: "one unit, in the currency's minor unit; null for a sale made before prices (it takes any amount)",
  },
  currency: { type: 'string', nullable: true, description: 'ISO 4217 code; null with price' },
  admission: {
    type: 'string',
    enum: ADMISSIONS,
    description:
      'first-come: the fastest purchase wins; queue: a waiting room hands out passes; draw: entries, then a provably fair draw',
  },
  admitRatePerSecond: { type: 'integer', nullable: true, description: 'queue: passes handed out per second' },
  admitOverbook: {
    type: 'number',
    nullable: true,
    description: 'queue: outstanding passes stay within units left x this',
  },
  passSeconds: { type: 'integer', nullable: true, description: 'queue: how long a pass buys' },
  entriesOpenAt: time('draw: entries open', true),
  entriesCloseAt: time('draw: entries close and the draw is made', true),
  backfillUntil: time('draw: until then, units that come back go to the next entrants in draw order', true),
  seedSha256: {
    type: 'string',
    nullable: true,
    description: 'queue and draw: sha256 of the seed (hex), published from the start',
  },
  seed: {
    type: 'string',
    nullable: true,
    description:
      "the seed (hex): a draw's once the draw is made (as Postgres says), a waiting room's once the room has opened (its pre-queue order is then checkable); null before",
  },
  perVariantLimit: {
    type: 'integer',
    nullable: true,
    description: 'the most one buyer may hold of any one variant; null: only perUserLimit',
  },
  variants: {
    type: 'array',
    description: `what the sale sells (1 to ${MAX_VARIANTS}), in order; a sale made without variants has one, \`${DEFAULT_SKU}\``,
    items: {
      type: 'object',
      required: ['sku', 'label', 'stock', 'priceCents', 'available'],
      properties: {
        sku: { type: 'string', description: 'what a purchase names as `variant`' },
        label: { type: 'string' },
        stock: integer,
        priceCents: { type: 'integer', nullable: true, description: "this variant's price; null: the sale's" },
        available: { type: 'integer', description: 'units of it left in Redis' },
      },
    },
  },
};

/** A sale as GET /api/sales/:saleId shows it. */
export const saleViewSchema = {
  description: 'the sale',
  type: 'object',
  required: Object.keys(SALE_VIEW_PROPERTIES),
  properties: SALE_VIEW_PROPERTIES,
};

const ORDER_COUNTS = Object.fromEntries(
  ORDER_STATES.map((s) => [s, { type: 'integer', description: `orders ${STATE_RULES[s].describe}` }]),
);

/** A page of GET /api/sales: each sale as its view shows it, with its orders by status. */
export const salePageSchema = {
  description: 'a page of sales',
  type: 'object',
  required: ['sales', 'next'],
  properties: {
    sales: {
      type: 'array',
      items: {
        type: 'object',
        required: [...Object.keys(SALE_VIEW_PROPERTIES), ...Object.keys(ORDER_COUNTS)],
        properties: { ...SALE_VIEW_PROPERTIES, ...ORDER_COUNTS },
      },
    },
    next: { type: 'string', nullable: true, description: 'pass as `before` for the next page; null on the last' },
  },
};

// Left out, a time is null (no end) unless it must be given; any other field takes its default.
const required = (f: Field<unknown>) =>
  !f.only && (f.kind === 'time' ? Boolean(f.required) : f.schema.default === undefined && !f.fallback);

/** The sale definition POST /api/sales takes (parseSaleInput checks it, with its own messages). */
export const saleDefinitionSchema = {
  type: 'object',
  required: SALE_FIELDS.filter((k) => required(SALE_DEFINITION[k])),
  additionalProperties: false,
  properties: {
    ...Object.fromEntries(SALE_FIELDS.map((k) => [k, SALE_DEFINITION[k].schema])),
    variants: {
      type: 'array',
      minItems: 1,
      maxItems: MAX_VARIANTS,
      description: `its variants (sizes, colours), each with its own stock; left out: one variant, \`${DEFAULT_SKU}\`, of the whole stock`,
      items: {
        type: 'object',
        required: ['sku', 'label', 'stock'],
        additionalProperties: false,
        properties: {
          sku: { type: 'string', pattern: SKU_PATTERN.source, description: 'unique in the sale' },
          label: { type: 'string', minLength: 1, maxLength: 200 },
          stock: { type: 'integer', minimum: 0, maximum: 10_000_000 },
          priceCents: { type: 'integer', minimum: 1, description: "overrides the sale's price" },
        },
      },
    },
  },
};

/** A route's answer that is not JSON (the page, its assets, metrics). */
export const textResponse = (type: string, description: string) => ({
  description,
  content: { [type]: { schema: { type: 'string' } } },
});

/**
 * Schema parts shown in the OpenAPI document but never validated: for input a route checks in its
 * own code with its own refusals (a signed body, a sale definition), where a validating schema
 * would change the answers.
 */
export function documentedOnly(extra: Record<string, unknown>): { swaggerTransform: SwaggerTransform } {
  return { swaggerTransform: ({ schema, url }) => ({ schema: { ...schema, ...extra }, url }) };
}
