// A test file's environment with the API in this process: started before its first test, stopped
// after its last. `apiSuite` builds the app without listening and answers through `inject` (for
// tests about a route's answer); `apiEnv` starts the listening API (for tests about connections).
import { after, before } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { startApi } from '../../daemons/api.js';
import type { Config, ConfigOverrides } from '../../shared/config/index.js';
import { buildApp } from '../../shared/http/app.js';
import { Purchaser } from '../../shared/purchase/purchaser.js';
import { hintSubscriber, quitRedis, type RedisClient } from '../../shared/redis/connect.js';
import { STOCK_CHANNEL } from '../../shared/redis/keys.js';
import { injector, type Inject } from './http.js';
import { testEnv, type EnvOptions, type TestEnv } from './env.js';

export interface ApiEnv {
  env: TestEnv;
  api: Awaited<ReturnType<typeof startApi>>;
}

/** `started` gets them in the same hook (root-level `before` hooks do not wait for each other). */
export function apiEnv(started: (s: ApiEnv) => void, overrides: ConfigOverrides = {}): void {
  const s = {} as ApiEnv;
  before(async () => {
    s.env = await testEnv(overrides);
    s.api = await startApi(s.env.config, s.env.logger);
    started(s);
  });
  after(() => (s.api ? s.api.stop() : Promise.resolve()).then(() => s.env?.close()));
}

export interface ApiSuite {
  env: TestEnv;
  app: FastifyInstance;
  purchaser: Purchaser;
  /** A request answered by `app.inject`, as `http()` would report it. */
  call: Inject;
}

/** The app as startApi assembles it, stock-restored hints included, on the env's own connections. */
export async function buildTestApp(
  env: TestEnv,
  overrides: Partial<Config> = {},
): Promise<{ app: FastifyInstance; purchaser: Purchaser; close(): Promise<void> }> {
  const config = { ...env.config, ...overrides };
  const purchaser = new Purchaser(env.redis, config, env.replicaAcks);
  const subscriber: RedisClient = hintSubscriber(env.redis, env.logger, 'redis subscriber');
  subscriber.on('message', (_channel: string, saleId: string) => purchaser.stockRestored(saleId));
  await subscriber.subscribe(STOCK_CHANNEL);
  const app = buildApp({
    config,
    pool: env.pool,
    redis: env.redis,
    replicaAcks: env.replicaAcks,
    purchaser,
    logger: env.logger,
  });
  await app.ready();
  return { app, purchaser, close: () => app.close().then(() => quitRedis(subscriber)) };
}

/** Like apiEnv, without a socket: `started` gets the env, the app and its `call`. */
export function apiSuite(started: (s: ApiSuite) => void, overrides: ConfigOverrides = {}, opts: EnvOptions = {}): void {
  let env: TestEnv | undefined;
  let close: (() => Promise<void>) | undefined;
  before(async () => {
    env = await testEnv(overrides, opts);
    const built = await buildTestApp(env);
    close = built.close;
    started({ env, app: built.app, purchaser: built.purchaser, call: injector(built.app) });
  });
  after(async () => {
    await close?.();
    await env?.close();
  });
}
