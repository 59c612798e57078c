// Real servers for each test file: a fresh database in the run's Postgres and a redis-server of
// its own. No mocks of either.
import { spawn } from 'node:child_process';
import { request, Agent } from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { Redis } from 'ioredis';
import assert from 'node:assert/strict';
import { signJwt } from '../shared/jwt.js';
import { reconcile } from '../shared/reconcile.js';
import { loadConfig, type Config, type ConfigOverrides } from '../shared/config.js';
import { createLogger, type Logger } from '../shared/logger.js';
import { migrate } from '../shared/migrate.js';
import { freePort, startPostgres, startRedis, type LocalServer } from '../tools/local-stack.js';
import { connect } from '../shared/services.js';
import { createSale, parseSaleInput, type Sale } from '../shared/sales.js';
import type { Pool } from '../shared/db.js';

export const JWT_SECRET = 'test-secret-0123456789abcdef';
export const ADMIN_TOKEN = 'test-admin-token';

type RedisServer = LocalServer & { port: number; child: import('node:child_process').ChildProcess };

export interface TestEnv {
  config: Config;
  pool: Pool;
  redis: Redis;
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
  let pgServer = opts.ownPostgres ? await startPostgres(pgDir, { port: pgPort, persistent: true, fsync: false }) : undefined;
  const admin = pgServer?.url ?? (await adminUrl());
  const db = `t_${randomBytes(6).toString('hex')}`;
  const adminClient = new pg.Client({ connectionString: admin });
  await adminClient.connect();
  await adminClient.query(`create database ${db}`);
  await adminClient.end();
  const redisDir = join(dataDir, 'redis');
  const redisOpts = { appendonly: opts.appendonly ?? true };
  const redisServer = await startRedis(redisDir, redisOpts);
  const databaseUrl = admin.replace(/\/[^/]*$/, `/${db}`);
  const config = loadConfig({
    databaseUrl, redisUrl: redisServer.url, jwtSecret: JWT_SECRET, adminToken: ADMIN_TOKEN, logLevel: process.env.TEST_LOG_LEVEL ?? 'silent',
    development: false, port: 0, ...overrides,
  });
  const logger = createLogger(config);
  const { pool, redis, close } = await connect(config, logger, { poolSize: 20 });
  await migrate(pool);
  const env: TestEnv = {
    config, pool, redis, logger, redisServer, dataDir,
    async stopRedis(signal = 'SIGKILL') {
      const child = env.redisServer.child;
      if (child.exitCode !== null || child.signalCode !== null) return;
      const gone = exited(child);
      child.kill(signal);
      await gone;
    },
    async startRedis() {
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
      await env.redisServer.stop();
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
    const r = await reconcile(env.pool, env.redis, sale.id, sale.stock);
    assert.ok(r.holds, `conservation broken for ${sale.id}: ${JSON.stringify(r)}`);
  }
}

export interface StateSnapshot {
  databases: string[];
  redis: Record<string, { type: string; expiresAt: number; value: unknown; dump: string }>;
  sales: string[];
  orders: string[];
}

async function redisValue(r: Redis, key: string, type: string): Promise<unknown> {
  switch (type) {
    case 'string': return r.get(key);
    case 'hash': return r.hgetall(key);
    case 'list': return r.lrange(key, 0, -1);
    case 'set': return (await r.smembers(key)).sort();
    case 'zset': return r.zrange(key, '0', '-1', 'WITHSCORES');
    case 'stream': return r.xrange(key, '-', '+');
    default: return null; // the dump still covers it
  }
}

/**
 * Every Redis key (value, absolute expiry and DUMP) and every row of sales and orders, all columns:
 * what "nothing changed" is checked against. `skip` leaves out keys that change by design.
 */
export async function stateSnapshot(env: TestEnv, skip?: (key: string) => boolean): Promise<StateSnapshot> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await env.redis.scan(cursor, 'COUNT', 1000);
    cursor = next;
    keys.push(...batch.filter((k) => !skip?.(k)));
  } while (cursor !== '0');
  const redis: StateSnapshot['redis'] = {};
  for (const key of keys.sort()) {
    const type = await env.redis.type(key);
    redis[key] = {
      type,
      expiresAt: await env.redis.pexpiretime(key),
      value: await redisValue(env.redis, key, type),
      dump: (await env.redis.dumpBuffer(key)).toString('hex'),
    };
  }
  // SCAN sees one database; a write anywhere else shows up here.
  const databases = (await env.redis.info('keyspace')).split('\n').filter((l) => /^db\d+:/.test(l)).map((l) => l.split(':')[0]!);
  // Row text keeps microseconds that a JS Date would drop.
  const rows = async (table: 'sales' | 'orders') =>
    (await env.pool.query<{ r: string }>(`select row_to_json(t)::text as r from ${table} t order by id`)).rows.map((x) => x.r);
  return { databases, redis, sales: await rows('sales'), orders: await rows('orders') };
}

let saleCounter = 0;

export async function newSale(env: TestEnv, fields: Record<string, unknown> = {}): Promise<Sale> {
  const sale = parseSaleInput({ id: `sale-${process.pid}-${++saleCounter}`, name: 'Test sale', stock: 10, ...fields });
  await createSale(env.pool, env.redis, sale);
  return sale;
}

export function token(userId: string, secret = JWT_SECRET): string {
  return signJwt(userId, secret);
}

export const auth = (userId: string) => ({ authorization: `Bearer ${token(userId)}` });

const agent = new Agent({ keepAlive: true, maxSockets: 1000 });

export interface HttpResult {
  status: number;
  body: any;
}

/** A real HTTP request over loopback. */
export function http(port: number, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<HttpResult> {
  const payload = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request({
      host: '127.0.0.1', port, method, path, agent,
      headers: { ...(payload !== undefined ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } : {}), ...headers },
    }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let parsed: unknown = text;
        try { parsed = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode ?? 0, body: parsed });
      });
    });
    req.on('error', reject);
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}

/** Runs fn(i) for i in [0, n) with at most `concurrency` in flight. */
export async function runConcurrently<T>(n: number, concurrency: number, fn: (i: number) => Promise<T>): Promise<T[]> {
  const results = new Array<T>(n);
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(concurrency, n) }, async () => {
    while (next < n) {
      const i = next++;
      results[i] = await fn(i);
    }
  }));
  return results;
}

export function countBy<T>(items: T[], key: (t: T) => string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const it of items) out[key(it)] = (out[key(it)] ?? 0) + 1;
  return out;
}

export async function waitFor<T>(what: string, fn: () => Promise<T | undefined | null | false>, timeoutMs = 20_000, everyMs = 25): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Starts a real `flashsale <command>` process (compiled JS, as PM2 runs it) against the test servers. */
export function spawnDaemon(env: TestEnv, args: string[], extraEnv: Record<string, string> = {}): import('node:child_process').ChildProcess {
  return spawn(process.execPath, ['dist/daemons/cli.js', ...args], {
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    env: {
      ...process.env,
      DATABASE_URL: env.config.databaseUrl, REDIS_URL: env.config.redisUrl, LOG_LEVEL: 'warn', NODE_ENV: 'production',
      JWT_SECRET, ADMIN_TOKEN, ...extraEnv,
    },
  });
}

/** Resolves when the process reports ready (as PM2's wait_ready hears it). */
export function ready(child: import('node:child_process').ChildProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    child.on('message', (m) => m === 'ready' && resolve());
    child.once('exit', (code) => reject(new Error(`exited with ${code} before ready`)));
  });
}

export function exited(child: import('node:child_process').ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

/** A small seeded PRNG (mulberry32) so fault schedules are reproducible from the seed printed. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
