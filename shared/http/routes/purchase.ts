// POST /api/sales/:saleId/purchases, the hot path: every buyer of a crowd sends it, most of them
// after the sale sold out. Its hooks answer what they can before the body is read; the handler
// judges the sale's purchase rules (shared/purchase/rules/), makes the reservation (purchase.lua
// through the Purchaser) and counts its outcome.
import type { FastifyPluginCallback, FastifyReply, FastifyRequest } from 'fastify';
import type { RedisClient } from '../../redis/connect.js';
import type { Auth } from '../../buyers/auth.js';
import { HttpError } from '../../runtime/errors.js';
import { purchaseOutcome } from '../../runtime/metrics.js';
import type { Purchaser } from '../../purchase/purchaser.js';
import { refusalsAt, type PurchaseRules } from '../../purchase/rules/sale-rules.js';
import { MAX_PER_ORDER } from '../../sales/sale.js';
import { SKU_PATTERN } from '../../sales/variants.js';
import { answerFor, refusal } from '../plugins/errors.js';
import { purchaseAddressLimit, type RateLimitSettings } from '../plugins/rate-limit.js';
import { errorResponses, saleIdParams, SECURITY } from '../schemas.js';

export const PURCHASE_URL = '/api/sales/:saleId/purchases';
export const PURCHASE_TOKEN_HEADER = 'flashsale-purchase-token';

const purchaseBody = {
  type: 'object',
  additionalProperties: false,
  // A null qty is the default, as a missing one.
  properties: {
    qty: {
      type: 'integer',
      nullable: true,
      minimum: 1,
      maximum: MAX_PER_ORDER,
      ...refusal('invalid_qty', `qty must be an integer from 1 to ${MAX_PER_ORDER}.`),
    },
    variant: {
      type: 'string',
      nullable: true,
      pattern: SKU_PATTERN.source,
      description:
        'the sku of the variant to buy: required on a sale of several variants (GET /api/sales/{saleId} lists them)',
      ...refusal('unknown_variant', 'variant must be a sku: 1-64 characters of A-Z a-z 0-9 _ -.'),
    },
  },
  ...refusal(
    'bad_request',
    'The body must be a JSON object like {"qty": 1, "variant": "M"}.',
    'Unknown field(s): {fields}.',
  ),
};

const purchaseAnswer = {
  description: 'reserved: the order is queued for writing',
  type: 'object',
  required: ['orderId', 'status'],
  properties: { orderId: { type: 'string' }, status: { type: 'string', enum: ['queued'] } },
};

const SOLD_OUT_BODY = JSON.stringify(new HttpError('sold_out').body());

type PurchaseDeps = {
  redis: RedisClient;
  purchaser: Purchaser;
  auth: Auth;
  limits: RateLimitSettings;
  rules: PurchaseRules;
};

export const purchase: FastifyPluginCallback<PurchaseDeps> = (app, { redis, purchaser, auth, limits, rules }, done) => {
  // The sale id before the buyer, the buyer before the body: a malformed path is a 400 whoever asks.
  // Callback hooks, not async: every purchase runs them, and an async hook costs a promise each.
  const saleIdFirst = (req: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void) => {
    const valid = req.getValidationFunction('params');
    if (valid && !valid(req.params))
      return done(Object.assign(new Error('invalid params'), { validation: valid.errors }));
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
  app.post<{ Params: { saleId: string }; Body: { qty?: number | null; variant?: string | null } }>(
    PURCHASE_URL,
    {
      onRequest: addressLimit ? [soldOutFirst, addressLimit] : soldOutFirst,
      bodyLimit: 1024,
      preValidation: [saleIdFirst, auth.buyer, noBodyBuysOne],
      schema: {
        summary: 'Buy: reserve stock for the buyer',
        tags: ['sales'],
        security: SECURITY.buyer,
        params: saleIdParams,
        body: purchaseBody,
        description: `A sale with \`challenge: pow\` needs the header \`${PURCHASE_TOKEN_HEADER}\` (POST /api/sales/{saleId}/purchase-token); a token makes one reservation. A sale with \`admission: queue\` takes the pass its waiting room gave the buyer in the same header; a \`draw\` sale sells only through its draw; a \`buyers: verified-email\` sale only to buyers whose token carries \`email_verified: true\`. Once this API process knows a sale is sold out (every variant), a buyer's purchase is answered \`409 sold_out\` before its body is read; once it knows the variant named is sold out, right after the body is read, without asking Redis. A sale of several variants needs \`variant\`; a sale of one takes its sku or none.`,
        response: {
          202: purchaseAnswer,
          ...errorResponses(
            'invalid_qty',
            'qty_above_max',
            'variant_required',
            'unknown_variant',
            'bad_request',
            'invalid_json',
            'invalid_id',
            'unauthorized',
            'not_started',
            'ended',
            ...refusalsAt('purchase'),
            'invalid_purchase_token',
            'purchase_token_used',
            'admission_pass_invalid',
            'not_admitted',
            'sale_not_found',
            'sold_out',
            'not_enough_stock',
            'limit_reached',
            'paused',
            'unpaid_limit',
            'rate_limited',
            'payload_too_large',
            'unsupported_media_type',
            'unavailable',
          ),
        },
      },
    },
    async (req, reply) => {
      const { saleId } = req.params;
      const qty = req.body.qty ?? 1;
      const variant = req.body.variant ?? undefined;
      try {
        // A variant this process saw sold out is answered from memory, as a sale sold out whole is before the body.
        const soldOut = variant === undefined ? undefined : purchaser.variantSoldOutAnswer(saleId, variant);
        if (soldOut) throw soldOut;
        // The sale's rules refuse here, or name what the reservation spends (a token, a pass): purchase.lua spends it.
        const header = req.headers[PURCHASE_TOKEN_HEADER];
        const judged = rules.judge('purchase', saleId, req.buyer, header === undefined ? undefined : String(header));
        const gate = judged instanceof Promise ? await judged : judged;
        const { orderId } = await purchaser.purchase(saleId, req.buyer.id, qty, gate, variant);
        purchaseOutcome('queued').inc();
        // The answer's JSON by hand: an order id is [A-Za-z0-9_.-] only (ids.ts), nothing to escape.
        return await reply
          .code(202)
          .type('application/json; charset=utf-8')
          .send(`{"orderId":"${orderId}","status":"queued"}`);
      } catch (err) {
        // The code the buyer is answered: a refusal's own, `unavailable`, or `internal` for a bug.
        purchaseOutcome(answerFor(err).code).inc();
        throw err;
      }
    },
  );
  done();
};
