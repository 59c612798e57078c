// One classification at the edge: a bug in our code answers 500 internal and is logged once with
// its stack; Redis or Postgres away answers 503 unavailable and is logged at warn, without a stack.
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { Cluster } from 'ioredis';
import { createPool, type Pool } from '../shared/runtime/db.js';
import { backendOf, classify, type Failure } from '../shared/runtime/errors.js';
import { buildApp } from '../shared/http/app.js';
import { metrics } from '../shared/runtime/metrics.js';
import { Purchaser, type PurchaseResult } from '../shared/purchase/purchaser.js';
import { createRedis } from '../shared/redis/connect.js';
import { freePort } from '../tools/local-stack.js';
import { ask } from '../tools/redis-cluster.js';
import { testEnv, type TestEnv } from './support/env.js';
import { newSale, waitFor } from './support/fixtures.js';
import { MIGRATING, startFaultyRedis, type FaultyRedis } from './support/redis-faults.js';
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
    config: env.config,
    pool: deps.pool ?? env.pool,
    redis,
    purchaser: deps.purchaser ?? new Purchaser(redis, env.config),
    logger,
  });
  closers.push(() => app.close());
  await app.ready();
  return { app, lines };
}

/** 503 unavailable, and a warning in the log without an error or a stack. */
function assertUnavailable(
  res: { statusCode: number; body: string; headers: Record<string, unknown>; json(): any },
  lines: Record<string, any>[],
): void {
  assert.equal(res.statusCode, 503, res.body);
  assert.equal(res.json().error, 'unavailable');
  assert.equal(res.headers['retry-after'], '1', 'a 503 says when to retry');
  assert.equal(lines.filter((l) => l.level >= 50).length, 0, JSON.stringify(lines));
  const warned = lines.filter((l) => l.level === 40);
  assert.ok(warned.length >= 1, JSON.stringify(lines));
  assert.ok(
    warned.every((l) => !JSON.stringify(l).includes('    at ')),
    `no stack: ${JSON.stringify(warned)}`,
  );
}

const redisErrors = async () =>
  (await metrics.backendErrors.get()).values.find((v) => v.labels.backend === 'redis')?.value ?? 0;
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
    const redis = createRedis(env.redisServer.url, {
      enableOfflineQueue: false,
      autoResendUnfulfilledCommands: false,
      commandTimeout: 5000,
    });
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

/** The error a command fails with (it must fail). */
async function failure(p: Promise<unknown>): Promise<Error> {
  return p.then(
    (v) => assert.fail(`expected a failure, got ${JSON.stringify(v)}`),
    (err: Error) => err,
  );
}

describe('what each Redis fault is, taken from ioredis against real servers', () => {
  let r: FaultyRedis;
  before(async () => {
    r = await startFaultyRedis();
  });
  after(() => r?.stop());

  test('a purchase meeting a slot nobody serves (CLUSTERDOWN) is 503 unavailable with Retry-After, one warn line naming the error, and counted as a Redis error', async () => {
    const redis = createRedis(r.bare.url, {
      enableOfflineQueue: false,
      autoResendUnfulfilledCommands: false,
      commandTimeout: 5000,
    });
    closers.push(async () => redis.disconnect());
    // Connected first: before that, a command fails as "Stream isn't writeable", not as the slot's CLUSTERDOWN.
    await waitFor('the client to connect', async () => redis.status === 'ready');
    const { app, lines } = await appWith({ redis });
    const before = await redisErrors();
    const res = await app.inject({ method: 'POST', url: '/api/sales/any/purchases', headers: auth('carol') });
    assertUnavailable(res, lines);
    const warned = lines.filter((l) => l.level === 40);
    assert.equal(warned.length, 1, JSON.stringify(lines));
    assert.deepEqual([warned[0]!.error, warned[0]!.backend], ['ReplyError', 'redis']);
    assert.match(warned[0]!.reason, /^CLUSTERDOWN /);
    assert.equal(await redisErrors(), before + 1, 'flashsale_backend_errors_total{backend="redis"} counts it');
  });

  // [what, how to meet it, the error's name and message, its class]
  const cases: [string, () => Promise<Error>, RegExp, Failure][] = [
    ['a slot nobody serves', () => failure(r.client(r.bare).get('k')), /^ReplyError: CLUSTERDOWN /, 'unavailable'],
    [
      'a multi-key command on a half-migrated slot',
      () => failure(r.client(r.a).mget(MIGRATING.present, MIGRATING.missing)),
      /^ReplyError: TRYAGAIN /,
      'unavailable',
    ],
    [
      'a key already moved off a migrating slot',
      () => failure(r.client(r.a).get(MIGRATING.missing)),
      /^ReplyError: ASK \d+ /,
      'unavailable',
    ],
    [
      'a key another node serves',
      () => failure(r.client(r.b).get(MIGRATING.present)),
      /^ReplyError: MOVED \d+ /,
      'unavailable',
    ],
    [
      'a script reaching a key its node does not serve',
      () => failure(r.client(r.b).eval(`return redis.call('get', '${MIGRATING.present}')`, 0)),
      /^ReplyError: ERR Script attempted to access a non local key/,
      'unavailable',
    ],
    [
      'TRYAGAIN until the cluster client gives up',
      async () => {
        const cluster = new Cluster([{ host: '127.0.0.1', port: r.a.port }], {
          maxRedirections: 2,
          retryDelayOnTryAgain: 10,
          clusterRetryStrategy: () => null,
        });
        cluster.on('error', () => {});
        try {
          return await failure(cluster.mget(MIGRATING.present, MIGRATING.missing));
        } finally {
          cluster.disconnect();
        }
      },
      /^Error: Too many Cluster redirections\. Last error: ReplyError: TRYAGAIN/,
      'unavailable',
    ],
    [
      'a write to a demoted master',
      () => failure(r.client(r.replica).set('k', 'v')),
      /^ReplyError: READONLY /,
      'unavailable',
    ],
    [
      'a MULTI a demoted master discarded',
      () => failure(r.client(r.replica).multi().set('k', 'v').exec()),
      /^ReplyError: EXECABORT /,
      'unavailable',
    ],
    [
      'a WAIT on a demoted master',
      () => failure(r.client(r.replica).wait(1, 10)),
      /^ReplyError: ERR WAIT cannot be used with replica instances/,
      'unavailable',
    ],
    [
      'a WAIT cut short when its server became a replica',
      async () => {
        await ask(r.replica.port, 'REPLICAOF', 'NO', 'ONE');
        const waiting = failure(r.client(r.replica).wait(5, 0));
        await waitFor('the WAIT to block', async () =>
          String(await r.client(r.replica).info('clients')).includes('blocked_clients:1'),
        );
        await ask(r.replica.port, 'REPLICAOF', '127.0.0.1', r.master.port);
        return waiting;
      },
      /^ReplyError: UNBLOCKED /,
      'unavailable',
    ],
    [
      'a write short of min-replicas-to-write',
      async () => {
        const master = r.client(r.master);
        await master.config('SET', 'min-replicas-to-write', '5');
        try {
          return await failure(master.set('k', 'v'));
        } finally {
          await master.config('SET', 'min-replicas-to-write', '0');
        }
      },
      /^ReplyError: NOREPLICAS /,
      'unavailable',
    ],
    [
      'a WAIT behind a pipelined command when the connection drops',
      async () => {
        const client = r.client(r.master, { autoResendUnfulfilledCommands: false });
        const id = await client.client('ID');
        const results = client.pipeline().ping().wait(5, 0).exec();
        const waiting = new Promise<Error>((resolve) => void results.catch(resolve));
        await waitFor('the WAIT to block', async () =>
          String(await r.client(r.master).info('clients')).includes('blocked_clients:1'),
        );
        await ask(r.master.port, 'CLIENT', 'KILL', 'ID', id);
        return Promise.race([waiting, results.then((rs) => rs?.[1]?.[0] as Error)]);
      },
      /^AbortError: Command aborted due to connection close$/,
      'unavailable',
    ],
    [
      'a command on a closed connection',
      async () => {
        const client = r.client(r.master);
        client.disconnect();
        return failure(client.get('k'));
      },
      /^Error: Connection is closed\.$/,
      'unavailable',
    ],
    [
      'a command while the connection is down, without an offline queue',
      () => failure(r.client(r.master, { enableOfflineQueue: false, lazyConnect: true }).get('k')),
      /^Error: Stream isn't writeable/,
      'unavailable',
    ],
    [
      'a command past its timeout',
      () => failure(r.client(r.master, { commandTimeout: 50 }).wait(5, 2000)),
      /^Error: Command timed out$/,
      'unavailable',
    ],
    [
      'retries per request used up while reconnecting',
      async () =>
        failure(
          r.client(r.master, { port: await freePort(), maxRetriesPerRequest: 1, retryStrategy: () => 10 }).get('k'),
        ),
      /^MaxRetriesPerRequestError: Reached the max retries/,
      'unavailable',
    ],
    [
      'a slot map no node could give',
      async () => {
        const cluster = new Cluster([{ host: '127.0.0.1', port: await freePort() }], {
          lazyConnect: true,
          clusterRetryStrategy: () => null,
        });
        const refreshed = new Promise<Error>((resolve) => cluster.once('error', resolve));
        const connecting = failure(cluster.connect());
        const err = await refreshed;
        await connecting;
        cluster.disconnect();
        return err;
      },
      /^ClusterAllFailedError: Failed to refresh slots cache/,
      'unavailable',
    ],
    [
      'no startup node of a cluster answering',
      async () => {
        const cluster = new Cluster([{ host: '127.0.0.1', port: await freePort() }], {
          lazyConnect: true,
          clusterRetryStrategy: () => null,
        });
        cluster.on('error', () => {});
        return failure(cluster.connect());
      },
      /^Error: None of startup nodes is available$/,
      'unavailable',
    ],
    [
      'a cluster not ready, without an offline queue',
      async () => {
        const cluster = new Cluster([{ host: '127.0.0.1', port: await freePort() }], {
          lazyConnect: true,
          enableOfflineQueue: false,
          clusterRetryStrategy: () => null,
        });
        cluster.on('error', () => {});
        return failure(cluster.get('k'));
      },
      /^Error: Cluster isn't ready and enableOfflineQueue options is false$/,
      'unavailable',
    ],
    // Ours to fix: they must stay 500.
    [
      'a script of ours calling what does not exist',
      () => failure(r.client(r.master).eval(`return redis.call('nosuchcommand')`, 0)),
      /^ReplyError: ERR /,
      'bug',
    ],
    [
      'a script of ours failing at run time',
      () => failure(r.client(r.master).eval('return nil + 1', 0)),
      /^ReplyError: ERR user_script:1: /,
      'bug',
    ],
    [
      'a command on a key of the wrong type',
      async () => {
        const master = r.client(r.master);
        await master.del('list');
        await master.lpush('list', 'x');
        return failure(master.get('list'));
      },
      /^ReplyError: WRONGTYPE /,
      'bug',
    ],
    [
      'keys of different slots in one command',
      () => failure(r.client(r.a).mget('one', 'two')),
      /^ReplyError: CROSSSLOT /,
      'bug',
    ],
    [
      'a MULTI discarded for a malformed command',
      () => failure(r.client(r.master).multi().call('set', 'k').exec()),
      /^ReplyError: EXECABORT /,
      'bug',
    ],
    ['a TypeError', async () => new TypeError('Cannot read properties of undefined'), /^TypeError: /, 'bug'],
  ];
  for (const [what, meet, looks, expected] of cases) {
    test(`${what} is ${expected}`, async () => {
      const err = await meet();
      assert.match(`${err.name}: ${err.message}`, looks);
      assert.equal(classify(err), expected);
      if (expected === 'unavailable') assert.equal(backendOf(err), 'redis');
    });
  }
});
