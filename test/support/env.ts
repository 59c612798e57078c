// Real servers for each test file: a fresh database in the run's Postgres (a clone of the run's
// migrated template) and a redis-server of its own. No mocks of either.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { RedisClient } from '../../shared/redis/connect.js';
import type { ReplicaAcks } from '../../shared/redis/replication.js';
import assert from 'node:assert/strict';
import { reconcile } from '../../shared/checks/reconcile.js';
import { loadConfig, type Config, type ConfigOverrides } from '../../shared/config/index.js';
import { createLogger, type Logger } from '../../shared/runtime/logger.js';
import { migrate } from '../../shared/runtime/migrate.js';
import { freePort, startPostgres, startRedis, type LocalServer } from '../../tools/local-stack.js';
import { connect } from '../../shared/runtime/services.js';
import type { Sale } from '../../shared/sales/sale.js';
import type { Pool } from '../../shared/runtime/db.js';
import { exited } from './cli.js';
import { TEMPLATE_ENV } from './template.js';
import { ADMIN_TOKEN, JWT_SECRET, PAYMENT_WEBHOOK_SECRET } from './tokens.js';

type RedisServer = LocalServer & { port: number; child: import('node:child_process').ChildProcess };

export interface TestEnv {
  config: Config;
  pool: Pool;
  redis: RedisClient;
  /** What `redis`'s writes wait for with REDIS_MIN_REPLICAS_ACK (undefined at 0): hand it to a writer or listener the test builds. */
  replicaAcks: ReplicaAcks | undefined;
  logger: Logger;
  /** The current redis-server (replaced by startRedis after a stop). */
  redisServer: RedisServer;
  dataDir: string;
  /** Stops this file's redis-server: SIGKILL is a crash, SIGTERM a clean shutdown. */
  stopRedis(signal?: NodeJS.Signals): Promise<void>;
  /** Starts redis-server again on the same port and data dir (its AOF, if on, brings the data back). */
  startRedis(): Promise<void>;
  /** Only with `ownPostgres`: a fast shutdown of this file's Postgres, and a start on the same port and dir. */
  stopPostgres(): Promise<void>;
  startPostgres(): Promise<void>;
  /** Only with `ownPostgres`: an immediate stop (SIGQUIT to the postmaster), a crash: nothing is flushed or checkpointed. */
  crashPostgres(): Promise<void>;
  close(): Promise<void>;
}

export interface EnvOptions {
  /** A Postgres of this file's own, which it may stop and start (the run's Postgres is shared by every file). */
  ownPostgres?: boolean;
  /** false: redis-server without persistence, so a restart forgets everything. */
  appendonly?: boolean;
  /** More redis-server arguments (`--enable-debug-command local`, for a test that stops its active expiry). */
  redisArgs?: string[];
  /**
   * A Redis Cluster or Sentinel set the test started (`redisClusterNodes`, or `redisSentinels` and
   * `redisSentinelName`) instead of a redis-server of the file's own; stopRedis/startRedis are then
   * the topology's business.
   */
  redis?: ConfigOverrides;
}

let ownPg: Promise<LocalServer> | undefined;

/** The run's Postgres (from test/run.ts), or one of our own when a file is run by itself. */
function adminUrl(): Promise<string> {
  if (process.env.FLASHSALE_TEST_PG) return Promise.resolve(process.env.FLASHSALE_TEST_PG);
  ownPg ??= startPostgres(mkdtempSync(join(tmpdir(), 'flashsale-pg-')), { persistent: false, fsync: false });
  return ownPg.then((s) => s.url);
}

export async function testEnv(overrides: ConfigOverrides = {}, opts: EnvOptions = {}): Promise<TestEnv> {
  const dataDir = mkdtempSync(join(tmpdir(), 'flashsale-test-'));
  // A directory of its own: Postgres runs as another user, who cannot enter dataDir.
  const pgDir = opts.ownPostgres ? mkdtempSync(join(tmpdir(), 'flashsale-pg-')) : '';
  const pgPort = opts.ownPostgres ? await freePort() : 0;
  let pgServer = opts.ownPostgres
    ? await startPostgres(pgDir, { port: pgPort, persistent: true, fsync: false })
    : undefined;
  const admin = pgServer?.url ?? (await adminUrl());
  const db = `t_${randomBytes(6).toString('hex')}`;
  const adminClient = new pg.Client({ connectionString: admin });
  // The run's migrated template when there is one (test/run.ts), else an empty database migrated below.
  const template = !pgServer && admin === process.env.FLASHSALE_TEST_PG ? process.env[TEMPLATE_ENV] : undefined;
  await adminClient.connect();
  await adminClient.query(`create database ${db}${template ? ` template ${template}` : ''}`);
  await adminClient.end();
  const redisDir = join(dataDir, 'redis');
  const redisOpts = { appendonly: opts.appendonly ?? true, args: opts.redisArgs };
  // Without a server of its own, `redisServer` is never used (the methods below refuse).
  const redisServer = opts.redis ? (undefined as unknown as RedisServer) : await startRedis(redisDir, redisOpts);
  const databaseUrl = admin.replace(/\/[^/]*$/, `/${db}`);
  const config = loadConfig({
    databaseUrl,
    ...(opts.redis ?? { redisUrl: redisServer.url }),
    jwtSecret: JWT_SECRET,
    adminToken: ADMIN_TOKEN,
    logLevel: process.env.TEST_LOG_LEVEL ?? 'silent',
    // Tests pay through POST /api/orders/:id/pay, which signs its event and takes the webhook path.
    paymentWebhookSecret: PAYMENT_WEBHOOK_SECRET,
    directPay: true,
    // Off unless a test turns it on: many tests hammer one buyer to reach the purchase script's own guards.
    purchaseRatePerBuyer: 0,
    development: false,
    port: 0,
    ...overrides,
  });
  const logger = createLogger(config);
  const { pool, redis, replicaAcks, close } = await connect(config, logger, { poolSize: 20 });
  if (!template) await migrate(pool);
  const env: TestEnv = {
    config,
    pool,
    redis,
    replicaAcks,
    logger,
    redisServer,
    dataDir,
    async stopRedis(signal = 'SIGKILL') {
      if (opts.redis) throw new Error('stopRedis: this env uses a Redis topology the test started');
      const child = env.redisServer.child;
      if (child.exitCode !== null || child.signalCode !== null) return;
      const gone = exited(child);
      child.kill(signal);
      await gone;
    },
    async startRedis() {
      if (opts.redis) throw new Error('startRedis: this env uses a Redis topology the test started');
      env.redisServer = await startRedis(redisDir, { ...redisOpts, port: env.redisServer.port });
    },
    async stopPostgres() {
      if (!pgServer) throw new Error('stopPostgres needs testEnv(..., { ownPostgres: true })');
      await pgServer.stop();
    },
    async crashPostgres() {
      if (!pgServer) throw new Error('crashPostgres needs testEnv(..., { ownPostgres: true })');
      const pid = Number(readFileSync(join(pgDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
      process.kill(pid, 'SIGQUIT');
      // In the same tick, so the wrapper hears the exit (and forgets the process). Its own SIGINT
      // changes nothing: Postgres acts on the most immediate shutdown request it has.
      await pgServer.stop();
    },
    async startPostgres() {
      if (!opts.ownPostgres) throw new Error('startPostgres needs testEnv(..., { ownPostgres: true })');
      pgServer = await startPostgres(pgDir, { port: pgPort, persistent: true, fsync: false });
    },
    async close() {
      await close();
      await env.redisServer?.stop();
      await pgServer?.stop();
      rmSync(dataDir, { recursive: true, force: true });
      if (pgDir) rmSync(pgDir, { recursive: true, force: true });
      if (ownPg) await (await ownPg).stop();
    },
  };
  return env;
}

/** Conservation must hold for every sale given: the check run after each test that moves stock. */
export async function assertConserved(env: TestEnv, sales: Sale[]): Promise<void> {
  for (const sale of sales) {
    const r = await reconcile(env.pool, env.redis, sale.id, sale.stock, sale.variants);
    assert.ok(r.holds, `conservation broken for ${sale.id}: ${JSON.stringify(r)}`);
  }
}
