// How processes start and fail: a missing setting, an unusable dependency, and a Redis that
// forbids CONFIG each end the process with a message that says what to do.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { after, before, test } from 'node:test';
import { Redis } from 'ioredis';
import { freePort } from '../shared/local-stack.js';
import { exited, testEnv, waitFor, type TestEnv } from './helpers.js';

let env: TestEnv;
before(async () => {
  env = await testEnv();
});
after(async () => {
  await env.close();
});

function cli(args: string[], extraEnv: Record<string, string | undefined>): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    const environment: NodeJS.ProcessEnv = { ...process.env, NODE_ENV: 'production', LOG_LEVEL: 'info', DATABASE_URL: undefined, REDIS_URL: undefined };
    for (const [k, v] of Object.entries(extraEnv)) environment[k] = v;
    execFile(process.execPath, ['dist/daemons/cli.js', ...args], { env: environment, timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code) : 0, out: stdout + stderr });
    });
  });
}

test('a missing setting stops the command with exit 2 and says what to set', async () => {
  const r = await cli(['order-writer'], {});
  assert.equal(r.code, 2);
  assert.match(r.out, /DATABASE_URL is not set: set DATABASE_URL=postgres:\/\/.* or pass --database-url/);
  const api = await cli(['api'], { DATABASE_URL: env.config.databaseUrl, REDIS_URL: env.config.redisUrl, JWT_SECRET: undefined });
  assert.equal(api.code, 2);
  assert.match(api.out, /JWT_SECRET is not set/);
  const bad = await cli(['sale', 'status', 'x'], { DATABASE_URL: env.config.databaseUrl, REDIS_URL: env.config.redisUrl, PORT: 'eighty' });
  assert.equal(bad.code, 2);
  assert.match(bad.out, /PORT must be an integer >= 0, got "eighty"/);
});

test('an unusable Postgres ends a daemon with exit 1 and a log line naming it', async () => {
  const port = await freePort();
  const r = await cli(['order-writer'], {
    DATABASE_URL: `postgres://postgres:x@127.0.0.1:${port}/none`, REDIS_URL: env.config.redisUrl, STARTUP_TIMEOUT_MS: '300',
  });
  assert.equal(r.code, 1);
  assert.match(r.out, /"level":60.*cannot start: Postgres at DATABASE_URL is unusable: connect ECONNREFUSED/);
});

test('a Redis that forbids CONFIG stops the listener with the exact setting to add', async () => {
  const port = await freePort();
  const redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
    '--notify-keyspace-events', '', '--rename-command', 'CONFIG', '""'], { stdio: 'ignore' });
  try {
    const probe = new Redis(`redis://127.0.0.1:${port}`, { retryStrategy: () => 50 });
    probe.on('error', () => {});
    await waitFor('redis up', () => probe.ping().then(() => true, () => null), 10_000, 50);
    probe.disconnect();
    const r = await cli(['expiry-listener'], { DATABASE_URL: env.config.databaseUrl, REDIS_URL: `redis://127.0.0.1:${port}` });
    assert.equal(r.code, 1);
    assert.match(r.out, /add \\"notify-keyspace-events Ex\\" to redis.conf/);
  } finally {
    redis.kill();
    await exited(redis);
  }
});

test('where CONFIG is allowed, the listener turns expired events on itself', async () => {
  await env.redis.config('SET', 'notify-keyspace-events', '');
  const child = spawn(process.execPath, ['dist/daemons/cli.js', 'expiry-listener'], {
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    env: { ...process.env, NODE_ENV: 'production', LOG_LEVEL: 'warn', DATABASE_URL: env.config.databaseUrl, REDIS_URL: env.config.redisUrl },
  });
  await new Promise<void>((resolve) => child.on('message', (m) => m === 'ready' && resolve()));
  const [, flags] = (await env.redis.config('GET', 'notify-keyspace-events')) as [string, string];
  assert.ok(flags.includes('E') && flags.includes('x'), `flags: ${flags}`);
  child.kill('SIGINT');
  assert.equal(await exited(child), 0);
});
