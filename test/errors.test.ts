// One classification at the edge: a bug in our code answers 500 internal and is logged once with
// its stack; Redis or Postgres away answers 503 unavailable and is logged at warn, without a stack.
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { createPool, type Pool } from '../shared/db.js';
import { buildApp } from '../shared/http/app.js';
import { metrics } from '../shared/metrics.js';
import { Purchaser, type PurchaseResult } from '../shared/purchase.js';
import { createRedis } from '../shared/redis.js';
import { freePort } from '../tools/local-stack.js';
import { testEnv, type TestEnv } from './support/env.js';
import { newSale, waitFor } from './support/fixtures.js';
import { auth } from './support/tokens.js';

let env: TestEnv;
const closers: (() => Promise<unknown>)[] = [];

before(async () => {
  env = await testEnv();
});

after(async () => {
  for (const close of closers.reverse()) await close();
  await env.startRedis();
  await env.close();
});

/** A logger whose JSON lines are kept for the test to read. */
function capturedLogger() {
  const lines: Record<string, any>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line) lines.push(JSON.parse(line));
      done();
    },
  });
  return { logger: pino({ level: 'info' }, stream), lines };
}

async function appWith(deps: { pool?: Pool; purchaser?: Purchaser; redis?: TestEnv['redis'] }) {
  const { logger, lines } = capturedLogger();
  const redis = deps.redis ?? env.redis;
  const app: FastifyInstance = buildApp({
    config: env.config, pool: deps.pool ?? env.pool, redis, purchaser: deps.purchaser ?? new Purchaser(redis, env.config), logger,
  });
  closers.push(() => app.close());
  await app.ready();
  return { app, lines };
}

/** 503 unavailable, and a warning in the log without an error or a stack. */
function assertUnavailable(res: { statusCode: number; body: string; json(): any }, lines: Record<string, any>[]): void {
  assert.equal(res.statusCode, 503, res.body);
  assert.equal(res.json().error, 'unavailable');
  assert.equal(lines.filter((l) => l.level >= 50).length, 0, JSON.stringify(lines));
  const warned = lines.filter((l) => l.level === 40);
  assert.ok(warned.length >= 1, JSON.stringify(lines));
  assert.ok(warned.every((l) => !JSON.stringify(l).includes('    at ')), `no stack: ${JSON.stringify(warned)}`);
}

const purchasesOf = async (outcome: string) =>
  (await metrics.purchases.get()).values.find((v) => v.labels.outcome === outcome)?.value ?? 0;

describe('failures at the edge', () => {
  test('a bug (a TypeError in the purchase path) is 500 internal, logged once at error with its stack', async () => {
    class Broken extends Purchaser {
      override async purchase(): Promise<PurchaseResult> {
        throw new TypeError('deliberate: cannot read properties of undefined');
      }
    }
    const { app, lines } = await appWith({ purchaser: new Broken(env.redis, env.config) });
    const sale = await newSale(env);
    const before = await purchasesOf('internal');
    const res = await app.inject({ method: 'POST', url: `/api/sales/${sale.id}/purchases`, headers: auth('alice') });
    assert.equal(res.statusCode, 500, res.body);
    assert.equal(res.json().error, 'internal');
    const errors = lines.filter((l) => l.level === 50);
    assert.equal(errors.length, 1, JSON.stringify(lines));
    assert.match(errors[0]!.err.stack, /TypeError: deliberate[\s\S]*at /, 'the stack is logged');
    assert.equal(await purchasesOf('internal'), before + 1, 'the purchase metric counts it as internal');
  });

  test('Postgres away (a pool on a closed port) is 503 unavailable, logged at warn without a stack', async () => {
    const pool = createPool(`postgres://flashsale@127.0.0.1:${await freePort()}/none`, 1);
    closers.push(() => pool.end());
    const { app, lines } = await appWith({ pool });
    const res = await app.inject({ method: 'GET', url: '/api/sales/no-such-sale' });
    assertUnavailable(res, lines);
  });

  test('Redis away (its server stopped) is 503 unavailable, logged at warn without a stack', async () => {
    // As the API connects: commands fail at once while Redis is away instead of waiting for it.
    const redis = createRedis(env.redisServer.url, { enableOfflineQueue: false, autoResendUnfulfilledCommands: false, commandTimeout: 5000 });
    redis.on('error', () => {});
    closers.push(async () => redis.disconnect());
    await waitFor('the client to connect', async () => redis.status === 'ready');
    const sale = await newSale(env);
    const { app, lines } = await appWith({ redis });
    await env.stopRedis();
    await waitFor('the client to see Redis gone', async () => redis.status !== 'ready');
    const res = await app.inject({ method: 'POST', url: `/api/sales/${sale.id}/purchases`, headers: auth('bob') });
    assertUnavailable(res, lines);
  });
});
