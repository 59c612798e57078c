// A draw (admission 'draw'), for the buyer: enter once in the entry window, then follow the entry
// by polling GET .../entries/me or by the stream GET .../entries/events (draw-events.ts) until won
// (with the order to pay) or lost; and for anyone, GET .../draw: what recomputes the draw.
import type { FastifyPluginCallback, FastifyReply, FastifyRequest } from 'fastify';
import type { Auth } from '../../../buyers/auth.js';
import { TOKEN_EXPIRED, type Challenges } from '../../../purchase/challenge.js';
import type { Config } from '../../../config/index.js';
import type { Pool } from '../../../runtime/db.js';
import {
  ENTRY_STATES,
  entryView,
  newSecret,
  ticketOf,
  type Choices,
  type EntryView,
} from '../../../admission/draw/draw.js';
import { countEntries, entryOf, insertEntry, type EntryRefusal } from '../../../admission/draw/queries.js';
import { HttpError } from '../../../runtime/errors.js';
import { saleKeys } from '../../../redis/keys.js';
import type { Logger } from '../../../runtime/logger.js';
import { refusalsAt, type PurchaseRules } from '../../../purchase/rules/sale-rules.js';
import type { RedisClient } from '../../../redis/connect.js';
import { spendTokenScript } from '../../../sales/scripts.js';
import { rulesOf, type Sale } from '../../../sales/sale.js';
import type { SaleCache } from '../../sale-cache.js';
import { errorResponses, saleIdParams, SECURITY } from '../../schemas.js';
import { refusal } from '../../plugins/errors.js';
import { SKU_PATTERN } from '../../../sales/variants.js';
import { PURCHASE_TOKEN_HEADER } from '../purchase.js';

export const entryViewSchema = {
  description: "the buyer's entry",
  type: 'object',
  required: ['saleId', 'state', 'ticket', 'secret', 'drawRank', 'orderId', 'entries'],
  properties: {
    saleId: { type: 'string' },
    state: {
      type: 'string',
      enum: ENTRY_STATES,
      description:
        'entered (before the draw), won (pay `orderId` as any order), waiting (drawn, no unit yet: one may come back until backfillUntil), lost (backfill is over without a unit)',
    },
    ticket: {
      type: 'string',
      description:
        'sha256(saleId + ":" + buyer + ":" + secret) in hex: how GET .../draw lists this entry (an entry made before secrets: sha256(saleId + ":" + buyer))',
    },
    secret: {
      type: 'string',
      nullable: true,
      description:
        "the entry's secret (64 hex digits), shown to this buyer only: with it they check their ticket; null for an entry made before secrets",
    },
    drawRank: { type: 'integer', nullable: true, description: 'the place in the draw, 1 first; null before the draw' },
    orderId: {
      type: 'string',
      nullable: true,
      description: "with won: the order the draw made (pending_payment within the sale's payment window)",
    },
    variant: { type: 'string', description: 'the sku of the variant wanted' },
    secondChoice: {
      type: 'string',
      nullable: true,
      description: 'the sku taken when `variant` has no unit left at this rank; null: none',
    },
    sku: { type: 'string', nullable: true, description: "with won: the variant of the order's unit; null otherwise" },
    entries: { type: 'integer', description: 'entries in the draw' },
  },
};

const sku = (what: string) => ({
  type: 'string',
  nullable: true,
  pattern: SKU_PATTERN.source,
  description: what,
  ...refusal('unknown_variant', 'variant and secondChoice must be skus: 1-64 characters of A-Z a-z 0-9 _ -.'),
});

const entryBody = {
  type: 'object',
  additionalProperties: false,
  properties: {
    variant: sku(
      "the sku of the variant wanted: required on a sale of several variants (GET /api/sales/{saleId} lists them), the sale's one by default",
    ),
    secondChoice: sku('the sku taken when `variant` has no unit left at this rank (optional; not `variant` itself)'),
  },
  ...refusal(
    'bad_request',
    'The body must be a JSON object like {"variant": "M", "secondChoice": "L"}, or none.',
    'Unknown field(s): {fields}.',
  ),
};

type SaleId = { Params: { saleId: string } };
type EntryBody = { variant?: string | null; secondChoice?: string | null };

/** What an entry asks for, checked against the sale's variants as a purchase's `variant` is. */
function choicesOf(sale: Sale, body: EntryBody): Choices {
  const skus = sale.variants.map((v) => v.sku);
  const listed = skus.join(', ');
  const variant = body.variant ?? (skus.length === 1 ? skus[0]! : undefined);
  if (variant === undefined)
    throw new HttpError(
      'variant_required',
      `This draw is for ${skus.length} variants: name the one wanted as "variant" in the body, one of ${listed}.`,
    );
  const secondChoice = body.secondChoice ?? null;
  for (const named of [variant, secondChoice])
    if (named !== null && !skus.includes(named))
      throw new HttpError('unknown_variant', `This sale has no variant "${named}": its variants are ${listed}.`);
  if (secondChoice === variant)
    throw new HttpError('bad_request', 'secondChoice must be another variant than variant, or left out.');
  return { variant, secondChoice };
}

export interface DrawDeps {
  pool: Pool;
  redis: RedisClient;
  auth: Auth;
  limits: Pick<Config, 'sseMaxStreams'>;
  saleCache: SaleCache;
  challenges: Challenges;
  /** The sale's rules on the buyer (a verified email), judged before they enter. */
  rules: PurchaseRules;
  logger: Logger;
}

export async function drawSale(saleCache: SaleCache, id: string): Promise<Sale> {
  const sale = await saleCache.get(id);
  if (sale.admission !== 'draw') throw new HttpError('not_a_draw');
  return sale;
}

function entryRefusal(sale: Sale, why: EntryRefusal): HttpError {
  if (why === 'ended') return new HttpError(why, 'This sale has ended: its draw takes no more entries.');
  if (why === 'entries_not_open')
    return new HttpError(why, `Entries to this draw open at ${sale.entriesOpenAt!.toISOString()}.`);
  return new HttpError(why, `Entries to this draw closed at ${sale.entriesCloseAt!.toISOString()}.`);
}

export async function buyerEntry(pool: Pool, saleId: string, buyer: string): Promise<EntryView> {
  const row = await entryOf(pool, saleId, buyer);
  if (!row) throw new HttpError('not_entered');
  return entryView(saleId, row, await countEntries(pool, saleId));
}

// No body enters for the sale's one variant; a body of null is refused like any other that is no object.
const noBodyNoChoice = (req: FastifyRequest, _reply: FastifyReply, done: () => void) => {
  if (req.body === undefined) req.body = {};
  done();
};

export const draw: FastifyPluginCallback<DrawDeps> = (app, deps, done) => {
  const { pool, redis, auth, saleCache, challenges, rules } = deps;
  app.post<SaleId & { Body: EntryBody }>(
    '/api/sales/:saleId/entries',
    {
      preValidation: [auth.buyer, noBodyNoChoice],
      bodyLimit: 1024,
      schema: {
        body: entryBody,
        summary: "Enter the sale's draw (admission: draw); entering again keeps the entry",
        tags: ['draw'],
        security: SECURITY.buyer,
        params: saleIdParams,
        description: `The body names the variant wanted and optionally a second choice, \`{"variant": "M", "secondChoice": "L"}\`: required on a sale of several variants, none needed on a sale of one. One entry per buyer, from entriesOpenAt until entriesCloseAt, as Postgres's clock says (the entry's insert judges it) and while the draw is not made. A sale with \`challenge: pow\` needs a purchase token in \`${PURCHASE_TOKEN_HEADER}\` to enter (it is spent by the entry); a buyer who has entered gets their entry back without one.`,
        response: {
          200: entryViewSchema,
          ...errorResponses(
            'invalid_id',
            'bad_request',
            'variant_required',
            'unknown_variant',
            'unauthorized',
            'sale_not_found',
            'not_a_draw',
            'entries_not_open',
            'entries_closed',
            'ended',
            ...refusalsAt('enter'),
            'purchase_token_required',
            'invalid_purchase_token',
            'purchase_token_used',
            'unavailable',
          ),
        },
      },
    },
    async (req) => {
      const sale = await drawSale(saleCache, req.params.saleId);
      const choices = choicesOf(sale, req.body);
      rules.judgeSale('enter', rulesOf(sale), req.buyer);
      if (sale.challenge === 'pow' && !(await entryOf(pool, sale.id, req.buyer.id))) {
        const header = req.headers[PURCHASE_TOKEN_HEADER];
        const token = await challenges.check(sale.id, req.buyer.id, header === undefined ? undefined : String(header));
        if (token.kind !== 'token')
          throw new HttpError('invalid_purchase_token', 'An admission pass buys; it does not enter a draw.');
        // Its expiry is judged by Redis's clock, where it is spent, as at a purchase.
        const spent = await spendTokenScript(redis, sale.id, token.id, token.expiresAt);
        if (spent === -14) throw new HttpError('invalid_purchase_token', TOKEN_EXPIRED);
        if (spent !== 1)
          throw new HttpError(
            'purchase_token_used',
            'This purchase token has been used already: solve a new challenge.',
          );
      }
      // Whether entries are open is the insert's decision, by Postgres's clock (admission/draw/queries.ts).
      // A fresh secret per attempt; a buyer who had entered gets their entry back with its own.
      const secret = newSecret();
      const ticket = ticketOf(sale.id, req.buyer.id, secret);
      const row = await insertEntry(pool, sale.id, req.buyer.id, ticket, secret, choices);
      if (typeof row === 'string') throw entryRefusal(sale, row);
      // The copy for counting (a crowd entering costs no count in Postgres); the draw reads Postgres
      // only, so losing it changes nothing but this count.
      const k = saleKeys(sale.id);
      const [, [, entries]] = (await redis.multi().sadd(k.entries, req.buyer.id).scard(k.entries).exec()) as [
        unknown,
        [unknown, number],
      ];
      return entryView(sale.id, row, Math.max(1, entries));
    },
  );

  app.get<SaleId>(
    '/api/sales/:saleId/entries/me',
    {
      preValidation: auth.buyer,
      schema: {
        summary: "The buyer's entry in the draw: entered, won (with the order), waiting or lost",
        tags: ['draw'],
        security: SECURITY.buyer,
        params: saleIdParams,
        response: {
          200: entryViewSchema,
          ...errorResponses('invalid_id', 'unauthorized', 'sale_not_found', 'not_a_draw', 'not_entered', 'unavailable'),
        },
      },
    },
    async (req) => buyerEntry(pool, (await drawSale(saleCache, req.params.saleId)).id, req.buyer.id),
  );

  done();
};
