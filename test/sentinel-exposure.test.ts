// What a Sentinel client trusts: with REDIS_TLS the sentinels' password goes over TLS only (never in
// clear, not even to a sentinel that does not speak TLS: the process refuses to start instead), and
// with REDIS_SENTINEL_ALLOWED_HOSTS a master the sentinels name outside the list is never used.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { loadConfig, redisTarget } from '../shared/config/index.js';
import { createRedis } from '../shared/redis/connect.js';
import { startSentinels, type LocalSentinels } from '../tools/redis-sentinel.js';
import { freePort } from '../tools/local-stack.js';
import { cli, exited, ready, spawnCli } from './support/cli.js';
import { testEnv, type TestEnv } from './support/env.js';
import { newSale } from './support/fixtures.js';
import { http } from './support/http.js';

let set: LocalSentinels;
let env: TestEnv;
let dir: string;
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'flashsale-sentinel-exposure-'));
  set = await startSentinels(dir, { replicas: 0, sentinels: 1 });
  env = await testEnv({}, { redis: { redisSentinels: set.sentinels, redisSentinelName: set.name } });
});
after(async () => {
  await env?.close();
  await set?.stop();
  rmSync(dir, { recursive: true, force: true });
});

// Side by side: the TLS tests talk to a listener of their own, never to the set's master, whose
// connections the allowed-hosts test counts.
describe('sentinel exposure', { concurrency: true }, () => {
  test('sentinel TLS: with REDIS_TLS the sentinels and the master are both reached over TLS', () => {
    const config = loadConfig({
      redisSentinels: '127.0.0.1:26379',
      redisSentinelName: 'm',
      redisSentinelPassword: 'sentinel-secret',
      redisTls: 'true',
    });
    const redis = createRedis(redisTarget(config), { lazyConnect: true }) as Redis;
    try {
      assert.deepEqual(redis.options.sentinelTLS, {}, 'the sentinels get TLS');
      assert.equal(redis.options.enableTLSForSentinelMode, true, 'the master gets TLS');
      assert.deepEqual(redis.options.tls, {});
    } finally {
      redis.disconnect();
    }
    const plain = createRedis(redisTarget(loadConfig({ redisSentinels: '127.0.0.1:26379', redisSentinelName: 'm' })), {
      lazyConnect: true,
    }) as Redis;
    assert.equal(plain.options.sentinelTLS, undefined);
    plain.disconnect();
  });

  test('sentinel TLS: a sentinel that does not speak TLS never sees the password; the process refuses to start (exit 1)', async () => {
    const password = 'sentinel-password-never-in-clear';
    const received: Buffer[] = [];
    const sockets = new Set<Socket>();
    // A plain TCP listener where the sentinel should be: it records every byte a client sends.
    const fake = createServer((s) => {
      sockets.add(s);
      s.on('data', (d) => received.push(d));
      s.on('error', () => {});
    });
    const port = await freePort();
    await new Promise<void>((res) => fake.listen(port, '127.0.0.1', res));
    try {
      const r = await cli(env, ['replay', '--once'], {
        REDIS_SENTINELS: `127.0.0.1:${port}`,
        REDIS_SENTINEL_NAME: 'flashsale',
        REDIS_SENTINEL_PASSWORD: password,
        REDIS_TLS: 'true',
        STARTUP_TIMEOUT_MS: '1500',
      });
      assert.equal(r.code, 1, r.out);
      const bytes = Buffer.concat(received);
      assert.ok(bytes.length > 0, 'the client did reach the listener');
      assert.equal(bytes[0], 0x16, 'the first byte is a TLS handshake record');
      assert.ok(!bytes.includes(password), 'the password never went out in clear');
      assert.ok(!bytes.includes('AUTH'), 'no AUTH in clear');
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((res) => fake.close(res));
    }
  });

  test('sentinel allowed hosts: a master outside REDIS_SENTINEL_ALLOWED_HOSTS is never used; named in the list, it works', async () => {
    const master = await set.master();
    const probe = new Redis(master.port, '127.0.0.1');
    const received = async () => Number(/total_connections_received:(\d+)/.exec(await probe.info('stats'))![1]);
    try {
      const before = await received();
      const refused = await cli(env, ['replay', '--once'], {
        REDIS_SENTINEL_ALLOWED_HOSTS: `127.0.0.1:${master.port + 1},10.0.0.1`,
        STARTUP_TIMEOUT_MS: '1500',
        LOG_LEVEL: 'warn',
      });
      assert.equal(refused.code, 1, refused.out);
      assert.match(
        refused.out,
        new RegExp(
          `master 127\\.0\\.0\\.1:${master.port}, which is not in REDIS_SENTINEL_ALLOWED_HOSTS \\(127\\.0\\.0\\.1:${master.port + 1},10\\.0\\.0\\.1\\)`,
        ),
      );
      assert.match(refused.out, /SENTINEL_MASTER_REFUSED/);
      // The sentinel's own links to the master are long-lived: any new connection would be the process's.
      assert.equal(await received(), before, 'no connection was made to the master');

      const sale = await newSale(env, { stock: 3 });
      const port = await freePort();
      const api = spawnCli(env, ['api'], {
        PORT: String(port),
        REDIS_SENTINEL_ALLOWED_HOSTS: `10.0.0.1,127.0.0.1:${master.port}`,
      });
      try {
        await ready(api, 'the api');
        assert.equal((await http(port, 'GET', '/readyz')).status, 200);
        const bought = await http(port, 'POST', `/api/sales/${sale.id}/purchases`, {
          body: { qty: 1 },
          user: 'allowed-buyer',
        });
        assert.equal(bought.status, 202, JSON.stringify(bought.body));
        api.kill('SIGINT');
        assert.equal(await exited(api), 0);
      } finally {
        api.kill('SIGKILL');
      }
    } finally {
      probe.disconnect();
    }
  });
});
