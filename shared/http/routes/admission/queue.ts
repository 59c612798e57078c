// A sale's waiting room (admission 'queue'), for the buyer: join once, then follow the place by
// polling GET .../queue/me or by the stream GET .../queue/events (room-events.ts) until admitted
// with a pass, which POST .../purchases takes as its purchase token.
import type { FastifyPluginCallback } from 'fastify';
import type { Auth } from '../../../buyers/auth.js';
import type { Challenges } from '../../../purchase/challenge.js';
import type { Config } from '../../../config/index.js';
import { HttpError } from '../../../runtime/errors.js';
import type { Logger } from '../../../runtime/logger.js';
import { refusalsAt, type PurchaseRules } from '../../../purchase/rules/sale-rules.js';
import type { RedisClient } from '../../../redis/connect.js';
import { joinQueue, QUEUE_STATES, readPlace, viewOf, type QueueView } from '../../../admission/room/room.js';
import { rulesOf, type Sale } from '../../../sales/sale.js';
import type { RateLimitSettings } from '../../plugins/rate-limit.js';
import type { SaleCache } from '../../sale-cache.js';
import { errorResponses, saleIdParams, SECURITY } from '../../schemas.js';
import { PURCHASE_TOKEN_HEADER } from '../purchase.js';

export const queueViewSchema = {
  description: 'where the buyer stands',
  type: 'object',
  required: ['saleId', 'state', 'position', 'ahead', 'waiting', 'estimatedWaitSeconds', 'seed'],
  properties: {
    saleId: { type: 'string' },
    state: {
      type: 'string',
      enum: QUEUE_STATES,
      description:
        'waiting (in line, or before the start: place drawn at the start), admitted (buy with `pass` before passExpiresAt), used (the pass bought), expired (the pass ran out unused), sold_out (nothing left now; admission resumes if units come back), ended',
    },
    position: {
      type: 'integer',
      nullable: true,
      description: '1 = next; null before the start and once out of the line',
    },
    ahead: { type: 'integer', nullable: true, description: 'people in line ahead' },
    waiting: { type: 'integer', description: 'people in line not yet admitted' },
    estimatedWaitSeconds: { type: 'integer', nullable: true, description: "ahead / the sale's admission rate" },
    seed: {
      type: 'string',
      nullable: true,
      description:
        'once the room has opened (null before): the seed that ordered the pre-queue; each pre-queue place is the first 52 bits of sha1(seed + ":" + buyer) as a fraction, lowest first, and sha256(seed) is the sale\'s seedSha256',
    },
    pass: {
      type: 'string',
      description: `with admitted: send it as the \`${PURCHASE_TOKEN_HEADER}\` header of the purchase`,
    },
    passExpiresAt: { type: 'string', format: 'date-time', description: 'with admitted: the pass buys until then' },
  },
};

type SaleId = { Params: { saleId: string } };

export interface QueueDeps {
  redis: RedisClient;
  auth: Auth;
  limits: RateLimitSettings & Pick<Config, 'sseMaxStreams'>;
  saleCache: SaleCache;
  challenges: Challenges;
  /** The sale's rules on the buyer (a verified email), judged before they take a place. */
  rules: PurchaseRules;
  logger: Logger;
}

/** The buyer's view, with the signed pass when admitted. */
export async function buyerView(
  redis: RedisClient,
  challenges: Challenges,
  sale: Sale,
  buyer: string,
  now = Date.now(),
): Promise<QueueView> {
  const place = await readPlace(redis, sale.id, buyer);
  if (place.rank < 0) throw new HttpError('not_in_queue');
  return withPass(challenges, viewOf(sale, place), buyer, place.pass, now);
}

export async function withPass(
  challenges: Challenges,
  view: QueueView,
  buyer: string,
  passExpiresAt: number,
  now = Date.now(),
): Promise<QueueView> {
  if (view.state !== 'admitted') return view;
  return { ...view, pass: await challenges.pass(view.saleId, buyer, passExpiresAt, now) };
}

export async function queueSale(saleCache: SaleCache, id: string): Promise<Sale> {
  const sale = await saleCache.get(id);
  if (sale.admission !== 'queue') throw new HttpError('no_waiting_room');
  return sale;
}

export const queue: FastifyPluginCallback<QueueDeps> = (app, deps, done) => {
  const { redis, auth, saleCache, challenges, rules } = deps;
  app.post<SaleId>(
    '/api/sales/:saleId/queue',
    {
      preValidation: auth.buyer,
      bodyLimit: 1024,
      schema: {
        summary: "Join the sale's waiting room (admission: queue); joining again keeps the place",
        tags: ['queue'],
        security: SECURITY.buyer,
        params: saleIdParams,
        description: `Before the start every joiner is in the pre-queue, put in a random order (by the sale's seed) when the sale starts; later joiners queue in arrival order. A sale with \`challenge: pow\` needs a purchase token in \`${PURCHASE_TOKEN_HEADER}\` to join (it is spent by the join).`,
        response: {
          200: queueViewSchema,
          ...errorResponses(
            'invalid_id',
            'unauthorized',
            'sale_not_found',
            'no_waiting_room',
            'ended',
            ...refusalsAt('join'),
            'purchase_token_required',
            'invalid_purchase_token',
            'purchase_token_used',
            'unavailable',
          ),
        },
      },
    },
    async (req) => {
      const sale = await queueSale(saleCache, req.params.saleId);
      rules.judgeSale('join', rulesOf(sale), req.buyer);
      const header = req.headers[PURCHASE_TOKEN_HEADER];
      // The token's expiry is join_queue.lua's to judge, by Redis's clock.
      const token = header === undefined ? undefined : await challenges.check(sale.id, req.buyer.id, String(header));
      if (token?.kind === 'pass')
        throw new HttpError('invalid_purchase_token', 'An admission pass buys; it does not join.');
      await joinQueue(redis, sale.id, req.buyer.id, token);
      return buyerView(redis, challenges, sale, req.buyer.id);
    },
  );

  app.get<SaleId>(
    '/api/sales/:saleId/queue/me',
    {
      preValidation: auth.buyer,
      schema: {
        summary: "The buyer's place in the waiting room, and the pass once admitted",
        tags: ['queue'],
        security: SECURITY.buyer,
        params: saleIdParams,
        response: {
          200: queueViewSchema,
          ...errorResponses(
            'invalid_id',
            'unauthorized',
            'sale_not_found',
            'no_waiting_room',
            'not_in_queue',
            'unavailable',
          ),
        },
      },
    },
    async (req) => buyerView(redis, challenges, await queueSale(saleCache, req.params.saleId), req.buyer.id),
  );

  done();
};
