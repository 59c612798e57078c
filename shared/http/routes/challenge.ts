// A `challenge: pow` sale's way to a purchase token: GET the challenge, solve it, POST the solution
// for a token that the purchase (purchase.ts), a waiting room's join or a draw's entry spends.
import type { FastifyPluginCallback } from 'fastify';
import type { RedisClient } from '../../redis/connect.js';
import type { Auth } from '../../buyers/auth.js';
import { CHALLENGE_SECONDS, type Challenges, PURCHASE_TOKEN_SECONDS } from '../../purchase/challenge.js';
import { refusal } from '../plugins/errors.js';
import { challengeLimit, type RateLimitSettings } from '../plugins/rate-limit.js';
import type { SaleCache } from '../sale-cache.js';
import { errorResponses, saleIdParams, SECURITY } from '../schemas.js';
import { PURCHASE_TOKEN_HEADER } from './purchase.js';

type SaleId = { Params: { saleId: string } };
type ChallengeDeps = {
  redis: RedisClient;
  auth: Auth;
  limits: RateLimitSettings;
  saleCache: SaleCache;
  challenges: Challenges;
};

export const challenge: FastifyPluginCallback<ChallengeDeps> = (
  app,
  { redis, auth, limits, saleCache, challenges },
  done,
) => {
  // Per buyer, once auth has said who it is: each issue costs a signature, each exchange a verification.
  app.get<SaleId>(
    '/api/sales/:saleId/challenge',
    {
      preValidation: auth.buyer,
      preHandler: challengeLimit(app, redis, limits, 'challenge'),
      schema: {
        summary: 'A proof-of-work challenge for this buyer and sale (a sale with challenge: pow)',
        tags: ['sales'],
        security: SECURITY.buyer,
        params: saleIdParams,
        description: `Solve it with the altcha widget (or altcha-lib's solveChallenge, SHA-256, searching up from 0): about challengeComplexity hashes on average, at most twice that; valid for ${CHALLENGE_SECONDS} s.`,
        response: {
          200: { description: 'the challenge, as altcha-lib makes it', type: 'object', additionalProperties: true },
          ...errorResponses(
            'invalid_id',
            'unauthorized',
            'sale_not_found',
            'no_challenge',
            'rate_limited',
            'unavailable',
          ),
        },
      },
    },
    async (req) => challenges.challenge(await saleCache.get(req.params.saleId), req.buyer.id),
  );

  app.post<SaleId & { Body: { payload: string } }>(
    '/api/sales/:saleId/purchase-token',
    {
      preValidation: auth.buyer,
      preHandler: challengeLimit(app, redis, limits, 'exchange'),
      bodyLimit: 16 * 1024,
      schema: {
        summary: 'Exchange a solved challenge for a purchase token, once the sale is open',
        tags: ['sales'],
        security: SECURITY.buyer,
        params: saleIdParams,
        description: `A solved challenge earns one token. Send it as \`${PURCHASE_TOKEN_HEADER}\` with a purchase: it makes one reservation, within ${PURCHASE_TOKEN_SECONDS} s.`,
        body: {
          type: 'object',
          required: ['payload'],
          additionalProperties: false,
          properties: {
            payload: { type: 'string', minLength: 1, maxLength: 8192, description: "the widget's base64 payload" },
          },
          ...refusal(
            'bad_request',
            'The body must be {"payload": "<the solved challenge>"}.',
            'Unknown field(s): {fields}.',
          ),
        },
        response: {
          200: {
            description: 'the purchase token',
            type: 'object',
            required: ['token', 'expiresAt'],
            properties: { token: { type: 'string' }, expiresAt: { type: 'string', format: 'date-time' } },
          },
          ...errorResponses(
            'bad_request',
            'invalid_json',
            'invalid_id',
            'unauthorized',
            'challenge_failed',
            'not_started',
            'ended',
            'sale_not_found',
            'no_challenge',
            'rate_limited',
            'payload_too_large',
            'unsupported_media_type',
            'unavailable',
          ),
        },
      },
    },
    async (req) => {
      return challenges.exchange(await saleCache.get(req.params.saleId), req.buyer.id, req.body.payload);
    },
  );
  done();
};
