// The HTTP app, built by a factory apart from listen() so tests can inject requests: the
// cross-cutting plugins first (plugins/), then the API's documentation, then one routes plugin per
// resource (routes/), then the 405 pass. Each plugin names those it needs before it (fastify-plugin's
// dependencies): fastify refuses to start when one is missing or comes later.
import Fastify, { type FastifyInstance, type FastifyPluginCallback } from 'fastify';
import type { ModeRouteDeps } from './routes/admission/deps.js';
import type { RedisClient } from '../redis/connect.js';
import { createAuth } from '../buyers/auth.js';
import { controls } from './routes/controls.js';
import { stock } from './routes/stock.js';
import type { Buyer } from '../buyers/buyer.js';
import { Challenges } from '../purchase/challenge.js';
import type { Config } from '../config/index.js';
import type { Pool } from '../runtime/db.js';
import type { Logger } from '../runtime/logger.js';
import { createProviders } from '../payments/providers/index.js';
import { signedWebhook, type SignedWebhook } from '../payments/providers/signed-webhook.js';
import type { Purchaser } from '../purchase/purchaser.js';
import { PurchaseRules } from '../purchase/rules/sale-rules.js';
import { registeredModes } from '../admission/modes.js';
import type { ReplicaAcks } from '../redis/replication.js';
import { serverLimits } from './plugins/client-limits.js';
import { docs } from './plugins/docs.js';
import { errorHandler, errorMapping, onClientError, SCHEMA_OPTIONS } from './plugins/errors.js';
import { jsonBody } from './plugins/json-body.js';
import { loadShedding } from './plugins/load-shedding.js';
import { methodNotAllowed } from './plugins/method-not-allowed.js';
import { requestMetrics } from './plugins/request-metrics.js';
import { admin } from './routes/admin.js';
import { challenge } from './routes/challenge.js';
import { orderEvents } from './routes/order-events.js';
import { orders } from './routes/orders.js';
import { ops } from './routes/ops.js';
import { page } from './routes/page.js';
import { payments } from './routes/payments.js';
import { purchase } from './routes/purchase.js';
import { refunds } from './routes/refunds.js';
import { eventEndpoints } from './routes/event-endpoints.js';
import { events } from './routes/events.js';
import { sales } from './routes/sales.js';
import { SaleCache } from './sale-cache.js';

export interface AppDeps {
  config: Config;
  pool: Pool;
  redis: RedisClient;
  /** REDIS_MIN_REPLICAS_ACK's confirmation of `redis`'s writes (services.ts connect), for cancels; the purchaser has its own. */
  replicaAcks?: ReplicaAcks;
  purchaser: Purchaser;
  logger: Logger;
}

export function buildApp({ config, pool, redis, replicaAcks, purchaser, logger }: AppDeps): FastifyInstance {
  const onError = errorHandler(logger);
  const app = Fastify({
    ...serverLimits(config),
    logger: false,
    ajv: SCHEMA_OPTIONS,
    // Bad percent-encoding and overlong parameters are answered by the router itself unless routed here.
    frameworkErrors: onError,
    clientErrorHandler: onClientError,
  });
  // Here, not in a plugin: a bad JWT setting or a provider's missing secret must stop buildApp itself (ConfigError).
  const auth = createAuth(config, logger, pool);
  const providers = createProviders(config);
  const paymentDeps = { pool, redis, logger };
  // DIRECT_PAY signs its events as the signed webhook, which the registry always holds.
  const directPay = { ...paymentDeps, signed: providers.get(signedWebhook.name) as SignedWebhook };
  // Set by auth.buyer before any handler reads it; declared here so every request has the same shape.
  app.decorateRequest('buyer', null as unknown as Buyer);
  app.decorateRequest('operator', '');
  const otherMethods = methodNotAllowed(app);

  void app.register(errorMapping, { onError });
  void app.register(loadShedding, { limits: config });
  void app.register(requestMetrics);
  void app.register(jsonBody);
  // Before the routes: it collects their schemas as they are added.
  void app.register(docs);

  void app.register(ops, { config, pool, redis });
  const saleCache = new SaleCache(pool);
  const challenges = new Challenges(redis);
  void app.register(sales, { pool, redis, auth, saleCache, load: { legacyBuyCounts: config.legacyBuyCounts } });
  void app.register(challenge, { redis, auth, limits: config, saleCache, challenges });
  const rules = new PurchaseRules(redis, challenges);
  void app.register(purchase, { redis, purchaser, auth, limits: config, rules });
  // Each admission mode's own routes (joining a waiting room, entering a draw, their streams).
  for (const { routes } of registeredModes())
    if (routes)
      void app.register(routes as FastifyPluginCallback<ModeRouteDeps>, {
        pool,
        redis,
        auth,
        limits: config,
        saleCache,
        challenges,
        rules,
        logger,
      });
  void app.register(payments, { ...paymentDeps, providers });
  void app.register(orders, {
    pool,
    redis,
    replicaAcks,
    auth,
    maxCancelsPerSale: config.maxCancelsPerSale,
    directPay: config.directPay ? directPay : undefined,
  });
  void app.register(orderEvents, { pool, redis, auth, limits: config, logger });
  void app.register(page, { development: config.development, directPay: config.directPay });
  void app.register(admin, { pool, redis, auth });
  void app.register(controls, { pool, redis, auth, saleCache });
  void app.register(stock, { pool, redis, auth, saleCache });
  void app.register(refunds, { pool, auth });
  void app.register(eventEndpoints, { pool, auth, config });
  void app.register(events, { pool, auth });
  void app.register(otherMethods);
  return app;
}
