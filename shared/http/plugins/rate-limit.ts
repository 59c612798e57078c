// Rate limits, counted in Redis by @fastify/rate-limit's Redis store (one fixed window per key), so
// a limit holds across every API process on that Redis: purchases per client address, and per
// buyer the challenges fetched and the solutions exchanged for purchase tokens (each costs the API
// a signature or a verification). Purchases per buyer are counted by purchase.lua itself, in the
// purchase's own round trip (shared/purchase/purchaser.ts), with the same answer. A refused request is answered 429 rate_limited with
// Retry-After before the handler runs: it takes no stock, issues no challenge, spends no solution.
// (429 busy is another thing: one process shedding load, see load-shedding.ts.)
import rateLimit, { normalizeIP } from '@fastify/rate-limit';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../../config/index.js';
import { HttpError } from '../../runtime/errors.js';
import { rateLimitPrefix } from '../../redis/keys.js';
import { purchaseOutcome } from '../../runtime/metrics.js';
import type { RedisClient } from '../../redis/connect.js';

export type RateLimitSettings = Pick<
  Config,
  'purchaseRatePerIp' | 'purchaseRateWindowMs' | 'challengeRatePerBuyer' | 'challengeRateWindowMs'
>;
type Limit = 'ip' | 'challenge' | 'exchange';
type Hook = (req: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => void;
type Check = ReturnType<FastifyInstance['createRateLimit']>;

const MESSAGES: Record<Limit, string> = {
  ip: 'Too many purchases from this address',
  challenge: 'This buyer is asking for challenges too fast',
  exchange: 'This buyer is exchanging solutions too fast',
};

interface LimitSpec {
  limit: Limit;
  /** 0: off, no hook. */
  max: number;
  windowMs: number;
  key: (req: FastifyRequest) => string;
  /** Requests let through without counting. */
  skip?: (req: FastifyRequest) => boolean;
  /** Called for each refusal (the purchase route counts them among its outcomes). */
  refused?: () => void;
}

/** Registers one limit under `app` and returns the hook that applies it, or nothing when it is off. */
function limiter(app: FastifyInstance, redis: RedisClient, spec: LimitSpec): Hook | undefined {
  const { limit, max, windowMs, key, skip, refused } = spec;
  if (max === 0) return undefined;
  let check: Check | undefined;
  // A scope per limit: the plugin keeps one key generator and one maximum per registration, and
  // createRateLimit() hands out that registration's. The scope is loaded before the app listens,
  // so every request finds `check` set.
  void app.register(async (scope) => {
    await scope.register(rateLimit, {
      global: false,
      redis,
      nameSpace: rateLimitPrefix(limit),
      max,
      timeWindow: windowMs,
      keyGenerator: key,
      // Its store is the product's Redis: with Redis away the request answers 503 anyway, and a
      // buyer must never be refused because the counter could not be read.
      skipOnError: true,
    });
    check = scope.createRateLimit();
  });
  // Callback style, not async: the sold-out path goes on at once, without the promises an async
  // hook costs every request (measurable on a sold-out crowd, bench/rate-limit.ts).
  return (req, reply, done) => {
    if (skip?.(req)) return done();
    check!(req).then((r) => {
      if (r.isAllowed || !r.isExceeded) return done();
      const seconds = Math.max(1, r.ttlInSeconds);
      refused?.();
      const e = new HttpError('rate_limited', `${MESSAGES[limit]}; retry in ${seconds} s.`);
      void reply.code(e.status).header('retry-after', String(seconds)).send(e.body());
    }, done);
  };
}

/**
 * The purchase route's per-address limit (an onRequest hook: before the body is read and the token
 * verified, so a flood costs neither), registered under `app` when it is on. While a sale is known
 * sold out, its purchases skip it: the answer comes from memory, which costs less than the Redis
 * round trip that would count it.
 */
export function purchaseAddressLimit(
  app: FastifyInstance,
  redis: RedisClient,
  limits: RateLimitSettings,
  soldOut: (saleId: string) => boolean,
): Hook | undefined {
  const skip = (req: FastifyRequest) => soldOut((req.params as { saleId: string }).saleId);
  const refused = () => purchaseOutcome('rate_limited').inc();
  // An IPv6 client usually holds a whole /64: counted as one address, as the plugin's own key does.
  return limiter(app, redis, {
    limit: 'ip',
    max: limits.purchaseRatePerIp,
    windowMs: limits.purchaseRateWindowMs,
    key: (req) => normalizeIP(req.ip),
    skip,
    refused,
  });
}

/** Per buyer, a preHandler (auth has said who it is, the input is valid): `challenge` counts challenges fetched, `exchange` solutions exchanged. */
export function challengeLimit(
  app: FastifyInstance,
  redis: RedisClient,
  limits: RateLimitSettings,
  limit: 'challenge' | 'exchange',
): Hook | undefined {
  return limiter(app, redis, {
    limit,
    max: limits.challengeRatePerBuyer,
    windowMs: limits.challengeRateWindowMs,
    key: (req) => req.buyer.id,
  });
}
