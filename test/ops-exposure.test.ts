// What the ops port and the readiness probe show, and to whom: the ops port listens on OPS_HOST
// (loopback unless set, whatever HOST the API takes) with the API's per-address connection cap, and
// /readyz names the dependency that fails, never its error text (hosts, ports, users, databases).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { after, before, test } from 'node:test';
import { createPool } from '../shared/runtime/db.js';
import { buildApp } from '../shared/http/app.js';
import { startOpsServer } from '../shared/runtime/ops-server.js';
import { Purchaser } from '../shared/purchase/purchaser.js';
import { freePort } from '../tools/local-stack.js';
import { unusedPort } from '../tools/redis-cluster.js';
import { exited, ready, spawnCli } from './support/cli.js';
import { testEnv, type TestEnv } from './support/env.js';
import { http } from './support/http.js';

let env: TestEnv;
before(async () => {
  env = await testEnv();
});
after(async () => {
  await env.close();
});

/** The addresses listening on `port`, as the kernel has them. */
const listening = (port: number) =>
  execFileSync('ss', ['-ltnH', `sport = :${port}`], { encoding: 'utf8' })
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((line) => line.split(/\s+/)[3]);

/** A connection to host:port, with everything it is sent collected, resolved once open. */
function open(host: string, port: number): Promise<{ socket: Socket; text: () => string; closed: Promise<void> }> {
  return new Promise((resolve, reject) => {
    let text = '';
    const socket = connect(port, host, () => resolve({ socket, text: () => text, closed }));
    const closed = new Promise<void>((res) => socket.once('close', () => res()));
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => (text += d));
    socket.once('error', reject);
  });
}

// Ports no other API of this file was given: two of them may start side by side.
async function withApi(vars: Record<string, string>, fn: (opsPort: number) => Promise<void>): Promise<void> {
  const opsPort = await unusedPort();
  const api = spawnCli(env, ['api'], { PORT: String(await unusedPort()), OPS_PORT: String(opsPort), ...vars });
  try {
    await ready(api, 'the api');
    await fn(opsPort);
    api.kill('SIGINT');
    assert.equal(await exited(api), 0);
  } finally {
    api.kill('SIGKILL');
  }
}

test('ops port: loopback only by default, even with the API on every address; OPS_HOST moves it', async () => {
  await Promise.all([
    withApi({ HOST: '0.0.0.0' }, async (opsPort) => {
      assert.deepEqual(listening(opsPort), [`127.0.0.1:${opsPort}`]);
      assert.equal((await http(opsPort, 'GET', '/healthz')).status, 200);
    }),
    withApi({ OPS_HOST: '127.0.0.2' }, async (opsPort) => {
      assert.deepEqual(listening(opsPort), [`127.0.0.2:${opsPort}`]);
      assert.equal((await fetch(`http://127.0.0.2:${opsPort}/healthz`)).status, 200);
      await assert.rejects(open('127.0.0.1', opsPort), /ECONNREFUSED/);
    }),
  ]);
});

test('ops port: one address past MAX_CONNECTIONS_PER_CLIENT is answered 429 busy and closed; the others still answer', async () => {
  await withApi({ MAX_CONNECTIONS_PER_CLIENT: '3' }, async (opsPort) => {
    const held = await Promise.all([1, 2, 3].map(() => open('127.0.0.1', opsPort)));
    try {
      const extra = await open('127.0.0.1', opsPort);
      await extra.closed;
      assert.match(extra.text(), /^HTTP\/1\.1 429 busy\r\n/);
      assert.match(extra.text(), /"error":"busy"/);
      held[0]!.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
      await held[0]!.closed;
      assert.match(held[0]!.text(), /^HTTP\/1\.1 200 OK\r\n[\s\S]*"status":"ok"/);
    } finally {
      for (const h of held) h.socket.destroy();
    }
  });
});

/** /readyz from both faces: the API's own route and a daemon's ops server. */
async function readyz(pool = env.pool): Promise<{ status: number; body: any }[]> {
  const app = buildApp({
    config: env.config,
    pool,
    redis: env.redis,
    purchaser: new Purchaser(env.redis, env.config),
    logger: env.logger,
  });
  const opsPort = await freePort();
  const ops = await startOpsServer({ ...env.config, opsPort }, env.redis, pool);
  try {
    const viaApi = await app.inject({ method: 'GET', url: '/readyz' });
    const viaOps = await http(opsPort, 'GET', '/readyz', { agent: false });
    return [
      { status: viaApi.statusCode, body: viaApi.json() },
      { status: viaOps.status, body: viaOps.body },
    ];
  } finally {
    ops?.close();
    await app.close();
  }
}

/** Nothing of the backend's own words: no host, port, user, database or driver message. */
function assertNamesOnly(body: any, secrets: string[]): void {
  const text = JSON.stringify(body);
  for (const s of [
    '127.0.0.1',
    'localhost',
    'ECONNREFUSED',
    'connect',
    'password',
    'authentication',
    'does not exist',
    ...secrets,
  ]) {
    assert.ok(!text.includes(s), `${text} carries ${s}`);
  }
}

test('readyz: Redis stopped: 503 naming redis, never its address or error', async () => {
  for (const r of await readyz()) assert.equal(r.status, 200, JSON.stringify(r.body));
  await env.stopRedis('SIGKILL');
  try {
    for (const r of await readyz()) {
      assert.equal(r.status, 503);
      assert.deepEqual(r.body, {
        error: 'unavailable',
        message: 'not ready: redis is not answering',
        failed: ['redis'],
      });
      assertNamesOnly(r.body, [String(env.redisServer.port)]);
    }
  } finally {
    await env.startRedis();
  }
});

test('readyz: Postgres with a wrong user and database: 503 naming postgres, never the user, database, host or port', async () => {
  const url = new URL(env.config.databaseUrl!);
  const pgPort = url.port;
  url.username = 'no_such_reader';
  url.pathname = '/no_such_database';
  const pool = createPool(url.toString(), 2);
  pool.on('error', () => {});
  try {
    for (const r of await readyz(pool)) {
      assert.equal(r.status, 503);
      assert.deepEqual(r.body, {
        error: 'unavailable',
        message: 'not ready: postgres is not answering',
        failed: ['postgres'],
      });
      assertNamesOnly(r.body, ['no_such_reader', 'no_such_database', pgPort]);
    }
  } finally {
    await pool.end();
  }
});
