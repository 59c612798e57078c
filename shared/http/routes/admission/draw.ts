// A draw (admission 'draw'), for the buyer: enter once in the entry window, then follow the entry
// by polling GET .../entries/me or by the stream GET .../entries/events (draw-events.ts) until won
// (with the order to pay) or lost; and for anyone, GET .../draw: what recomputes the draw.
import type { FastifyPluginCallback } from 'fastify';
import type { Auth } from '../../../buyers/auth.js';
import { TOKEN_EXPIRED, type Challenges } from '../../../purchase/challenge.js';
import type { Config } from '../../../config/index.js';
import type { Pool } from '../../../runtime/db.js';
import { ENTRY_STATES, entryView, newSecret, ticketOf, type EntryView } from '../../../admission/draw/draw.js';
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
    entries: { type: 'integer', description: 'entries in the draw' },
  },
};

type SaleId = { Params: { saleId: string } };

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

export const draw: FastifyPluginCallback<DrawDeps> = (app, deps, done) => {
  const { pool, redis, auth, saleCache, challenges, rules } = deps;
  app.post<SaleId>(
    '/api/sales/:saleId/entries',
    {
      preValidation: auth.buyer,
      bodyLimit: 1024,
      schema: {
        summary: "Enter the sale's draw (admission: draw); entering again keeps the entry",
        tags: ['draw'],
        security: SECURITY.buyer,
        params: saleIdParams,
        description: `One entry per buyer, from entriesOpenAt until entriesCloseAt, as Postgres's clock says (the entry's insert judges it) and while the draw is not made. A sale with \`challenge: pow\` needs a purchase token in \`${PURCHASE_TOKEN_HEADER}\` to enter (it is spent by the entry); a buyer who has entered gets their entry back without one.`,
        response: {
          200: entryViewSchema,
          ...errorResponses(
            'invalid_id',
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
      const row = await insertEntry(pool, sale.id, req.buyer.id, ticketOf(sale.id, req.buyer.id, secret), secret);
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
