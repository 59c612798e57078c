// How processes start and fail: a missing setting, an unusable dependency, and a Redis that
// forbids CONFIG each end the process with a message that says what to do.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { Redis } from 'ioredis';
import { freePort } from '../tools/local-stack.js';
import { exited, operatorCli as run, ready, spawnCli, type Vars } from './support/cli.js';
import { cliHere } from './support/cli-here.js';
import { testEnv, type TestEnv } from './support/env.js';
import { waitFor } from './support/fixtures.js';
import { http } from './support/http.js';

let env: TestEnv;
before(async () => {
  env = await testEnv();
});
after(async () => {
  await env.close();
});

test('a missing setting stops the command with exit 2 and says what to set', async () => {
  const r = await run(['order-writer'], {});
  assert.equal(r.code, 2);
  assert.match(r.out, /DATABASE_URL is not set: set DATABASE_URL=postgres:\/\/.* or pass --database-url/);
  const api = await run(['api'], {
    DATABASE_URL: env.config.databaseUrl,
    REDIS_URL: env.config.redisUrl,
    JWT_SECRET: undefined,
  });
  assert.equal(api.code, 2);
  assert.match(api.out, /JWT_SECRET is not set/);
  const bad = await here(['sale', 'status', 'x'], {
    DATABASE_URL: env.config.databaseUrl,
    REDIS_URL: env.config.redisUrl,
    PORT: 'eighty',
  });
  assert.equal(bad.code, 2);
  assert.match(bad.out, /PORT must be an integer >= 0, got "eighty"/);
});

test('an unusable Postgres ends a daemon with exit 1 and a log line naming it', async () => {
  const port = await freePort();
  const r = await run(['order-writer'], {
    DATABASE_URL: `postgres://postgres:x@127.0.0.1:${port}/none`,
    REDIS_URL: env.config.redisUrl,
    STARTUP_TIMEOUT_MS: '300',
  });
  assert.equal(r.code, 1);
  assert.match(r.out, /"level":60.*cannot start: Postgres at DATABASE_URL is unusable: connect ECONNREFUSED/);
});

/** A redis-server of the test's own with the given settings, until `fn` is done. */
async function withRedis(args: string[], fn: (url: string) => Promise<void>, password?: string): Promise<void> {
  const port = await freePort();
  const redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', ...args], {
    stdio: 'ignore',
  });
  try {
    const probe = new Redis(`redis://127.0.0.1:${port}`, { retryStrategy: () => 50, password });
    probe.on('error', () => {});
    await waitFor(
      'redis up',
      () =>
        probe.ping().then(
          () => true,
          () => null,
        ),
      10_000,
      50,
    );
    probe.disconnect();
    await fn(`redis://127.0.0.1:${port}`);
  } finally {
    redis.kill();
    await exited(redis);
  }
}

const NO_CONFIG = ['--rename-command', 'CONFIG', '""'];

/**
 * `flashsale <command>` as an operator types it, run in this process: what a refusal says and its
 * exit code are the same as its process's (a process start costs a second of CPU). The tests of how
 * a process ends start each service in a process of its own at least once (a missing setting, an
 * unreachable or evicting Redis), and test/cli.test.ts does so for the one-shot commands.
 */
const here = (command: string[], vars: Vars) => cliHere(undefined, command, { LOG_LEVEL: 'info', ...vars });

test('DIRECT_PAY=on outside `flashsale dev` refuses to start (exit 2 naming DIRECT_PAY_I_UNDERSTAND_BUYERS_PAY_NOTHING=yes); consented, the API starts and warns', async () => {
  const servers = { DATABASE_URL: env.config.databaseUrl, REDIS_URL: env.config.redisUrl, PORT: '0' };
  for (const service of ['api', 'replay']) {
    const r = await here([service], {
      ...servers,
      DIRECT_PAY: 'on',
      DIRECT_PAY_I_UNDERSTAND_BUYERS_PAY_NOTHING: undefined,
    });
    assert.equal(r.code, 2, `${service}: ${r.out}`);
    assert.match(
      r.out,
      /DIRECT_PAY=on lets any buyer pay an order without paying .*set DIRECT_PAY_I_UNDERSTAND_BUYERS_PAY_NOTHING=yes to run it here anyway/,
    );
  }
  const typo = await here(['api'], {
    ...servers,
    DIRECT_PAY: 'on',
    DIRECT_PAY_I_UNDERSTAND_BUYERS_PAY_NOTHING: 'true',
  });
  assert.equal(typo.code, 2, typo.out);
  assert.match(typo.out, /DIRECT_PAY_I_UNDERSTAND_BUYERS_PAY_NOTHING must be yes or unset, got "true"/);

  const child = spawnCli(
    env,
    ['api'],
    { PORT: '0', DIRECT_PAY: 'on', DIRECT_PAY_I_UNDERSTAND_BUYERS_PAY_NOTHING: 'yes' },
    'pipe',
  );
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  await ready(child, 'the api');
  child.kill('SIGINT');
  assert.equal(await exited(child), 0);
  assert.match(out, /"level":40.*DIRECT_PAY is on: any buyer can mark an order paid without paying/);
});

test('a Redis that forbids CONFIG and sends no events stops the listener with the exact setting to add', async () => {
  await withRedis(['--appendonly', 'no', '--notify-keyspace-events', '', ...NO_CONFIG], async (url) => {
    const r = await run(['expiry-listener'], { DATABASE_URL: env.config.databaseUrl, REDIS_URL: url });
    assert.equal(r.code, 1);
    assert.match(r.out, /add \\"notify-keyspace-events Ex\\" to redis.conf/);
  });
});

test('a Redis that forbids CONFIG but has events on: the listener sees a probe key expire and runs, warning what it cannot check', async () => {
  await withRedis(
    ['--appendonly', 'yes', '--dir', env.dataDir, '--notify-keyspace-events', 'Ex', ...NO_CONFIG],
    async (url) => {
      const child = spawnCli(env, ['expiry-listener'], { REDIS_URL: url }, 'pipe');
      let out = '';
      child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      await ready(child);
      child.kill('SIGINT');
      assert.equal(await exited(child), 0);
      assert.match(out, /cannot read maxmemory-policy \(CONFIG is refused\): make sure it is noeviction/);
      assert.match(out, /cannot read appendonly \(CONFIG is refused\)/);
    },
  );
});

test('an evicting Redis is refused by every long-running process, exit 1 naming maxmemory-policy', async () => {
  await withRedis(['--appendonly', 'yes', '--dir', env.dataDir, '--maxmemory-policy', 'allkeys-lru'], async (url) => {
    await Promise.all(
      ['api', 'order-writer', 'expiry-listener', 'replay'].map(async (service) => {
        const r = await run([service], { DATABASE_URL: env.config.databaseUrl, REDIS_URL: url });
        assert.equal(r.code, 1, `${service}: ${r.out}`);
        assert.match(r.out, /Redis maxmemory-policy is allkeys-lru: set maxmemory-policy noeviction/);
      }),
    );
  });
});

test('a Redis with neither AOF nor a replica is used, with a warning saying what a restart loses', async () => {
  await withRedis(['--appendonly', 'no'], async (url) => {
    const r = await here(['sale', 'status', 'nothing'], { DATABASE_URL: env.config.databaseUrl, REDIS_URL: url });
    assert.equal(r.code, 2, r.out);
    assert.match(r.out, /neither AOF \(appendonly yes\) nor a replica: a restart loses stock counters/);
  });
});

test('a Redis appending with everysec and no replica is used, with a warning that a dying process can lose answered purchases; always gets none', async () => {
  for (const fsync of ['everysec', 'always']) {
    await withRedis(['--appendonly', 'yes', '--appendfsync', fsync, '--dir', env.dataDir], async (url) => {
      const r = await here(['sale', 'status', 'nothing'], { DATABASE_URL: env.config.databaseUrl, REDIS_URL: url });
      assert.equal(r.code, 2, r.out);
      if (fsync === 'everysec')
        assert.match(
          r.out,
          /appendfsync everysec and has no replica: .*up to 2 s of purchases already answered 202 are lost; set appendfsync always/,
        );
      else assert.doesNotMatch(r.out, /appendfsync|neither AOF/);
    });
  }
});

test('a wrong or missing Redis password is named as such (NOAUTH / WRONGPASS), exit 1', async () => {
  await withRedis(
    ['--requirepass', 'right-password'],
    async (url) => {
      for (const [redisUrl, message] of [
        [url, /NOAUTH/],
        [url.replace('redis://', 'redis://:wrong@'), /WRONGPASS/],
      ] as const) {
        for (const service of ['api', 'order-writer']) {
          const r = await run([service], {
            DATABASE_URL: env.config.databaseUrl,
            REDIS_URL: redisUrl,
            STARTUP_TIMEOUT_MS: '500',
          });
          assert.equal(r.code, 1, `${service}: ${r.out}`);
          assert.match(r.out, /Redis at REDIS_URL is unusable/);
          assert.match(r.out, message);
          assert.doesNotMatch(r.out, /Stream isn't writeable/);
        }
      }
    },
    'right-password',
  );
});

test('an unreachable Redis ends every daemon with exit 1 (a supervisor restarts it), never 0', async () => {
  const url = `redis://127.0.0.1:${await freePort()}`;
  await Promise.all(
    ['api', 'order-writer', 'expiry-listener', 'replay'].map(async (service) => {
      const r = await run([service], {
        DATABASE_URL: env.config.databaseUrl,
        REDIS_URL: url,
        STARTUP_TIMEOUT_MS: '300',
      });
      assert.equal(r.code, 1, `${service}: ${r.out}`);
      assert.match(r.out, /cannot start: Redis at REDIS_URL is unusable: .*ECONNREFUSED/);
    }),
  );
});

test('bad values exit 2 with a message naming the variable, not a stack trace', async () => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ AUTH_MODE: 'none' }, /AUTH_MODE must be "jwt" or "trusted-header", got "none"/],
    [{ PORT: 'abc' }, /PORT must be an integer >= 0, got "abc"/],
    [{ MAX_INFLIGHT: '0' }, /MAX_INFLIGHT must be an integer >= 1, got "0"/],
    [{ STARTUP_TIMEOUT_MS: '-1' }, /STARTUP_TIMEOUT_MS must be an integer >= 0, got "-1"/],
    [{ REPLAY_INTERVAL_SECONDS: '90' }, /REPLAY_INTERVAL_SECONDS must be 1-59, or a whole number of minutes/],
    [{ JWT_REQUIRE_EXP: 'maybe' }, /JWT_REQUIRE_EXP must be true or false/],
  ];
  for (const [setting, message] of cases) {
    await Promise.all(
      [['api'], ['replay'], ['replay', '--once'], ['check']].map(async (command) => {
        const r = await here(command, {
          DATABASE_URL: env.config.databaseUrl,
          REDIS_URL: env.config.redisUrl,
          ...setting,
        });
        assert.equal(r.code, 2, `${command.join(' ')} with ${JSON.stringify(setting)}: ${r.out}`);
        assert.match(r.out, message);
        assert.doesNotMatch(r.out, /\n\s+at /, 'no stack trace');
      }),
    );
  }
});

test('Redis forms: exactly one of REDIS_URL, REDIS_CLUSTER_NODES, REDIS_SENTINELS; anything else exits 2 naming the variables', async () => {
  const url = env.config.redisUrl!;
  const cases: [Vars, RegExp][] = [
    [
      { REDIS_URL: url, REDIS_CLUSTER_NODES: '127.0.0.1:7000' },
      /REDIS_URL and REDIS_CLUSTER_NODES are both set: set exactly one of/,
    ],
    [
      {
        REDIS_URL: undefined,
        REDIS_CLUSTER_NODES: '127.0.0.1:7000',
        REDIS_SENTINELS: '127.0.0.1:26379',
        REDIS_SENTINEL_NAME: 'm',
      },
      /REDIS_CLUSTER_NODES and REDIS_SENTINELS are both set/,
    ],
    [
      { REDIS_URL: undefined, REDIS_SENTINELS: '127.0.0.1:26379' },
      /REDIS_SENTINELS is set without REDIS_SENTINEL_NAME/,
    ],
    [{ REDIS_SENTINEL_NAME: 'm' }, /REDIS_SENTINEL_NAME is set without REDIS_SENTINELS/],
    [
      { REDIS_URL: undefined, REDIS_CLUSTER_NODES: '127.0.0.1' },
      /REDIS_CLUSTER_NODES must be host:port,host:port,\.\.\., got "127\.0\.0\.1"/,
    ],
    [
      { REDIS_URL: undefined, REDIS_SENTINELS: 'a:1,b:99999', REDIS_SENTINEL_NAME: 'm' },
      /REDIS_SENTINELS must be host:port/,
    ],
    [
      { REDIS_PASSWORD: 'secret' },
      /REDIS_PASSWORD apply to REDIS_CLUSTER_NODES and REDIS_SENTINELS only: with REDIS_URL put them in the URL/,
    ],
    [
      { REDIS_URL: undefined },
      /Redis is not set: set REDIS_URL \(one server\), REDIS_CLUSTER_NODES \(Redis Cluster\) or REDIS_SENTINELS/,
    ],
    [{ REDIS_MIN_REPLICAS_ACK: '-1' }, /REDIS_MIN_REPLICAS_ACK must be an integer >= 0/],
  ];
  for (const [vars, message] of cases) {
    // The commands of a case side by side.
    await Promise.all(
      [['api'], ['order-writer'], ['check']].map(async (command) => {
        const r = await here(command, { DATABASE_URL: env.config.databaseUrl, REDIS_URL: url, ...vars });
        assert.equal(r.code, 2, `${command.join(' ')} with ${JSON.stringify(vars)}: ${r.out}`);
        assert.match(r.out, message);
        assert.doesNotMatch(r.out, /\n\s+at /, 'no stack trace');
      }),
    );
  }
});

test('one-shot commands: bad input exits 2, an unusable dependency 1', async () => {
  const servers = { DATABASE_URL: env.config.databaseUrl, REDIS_URL: env.config.redisUrl };
  const invalid = await here(
    ['sale', 'create', '--name', 'x', '--stock', '0', '--price', '100', '--currency', 'EUR'],
    servers,
  );
  assert.equal(invalid.code, 2, invalid.out);
  assert.match(invalid.out, /^flashsale: --stock must be an integer/m);
  const missing = await here(['sale', 'status', 'no-such-sale'], servers);
  assert.equal(missing.code, 2, missing.out);
  assert.match(missing.out, /No sale with id "no-such-sale"/);
  const down = await run(['sale', 'status', 'x'], {
    ...servers,
    DATABASE_URL: `postgres://postgres:x@127.0.0.1:${await freePort()}/none`,
    STARTUP_TIMEOUT_MS: '200',
  });
  assert.equal(down.code, 1, down.out);
  assert.match(down.out, /Postgres at DATABASE_URL is unusable/);
});

test('where CONFIG is allowed, the listener turns expired events on itself', async () => {
  await env.redis.config('SET', 'notify-keyspace-events', '');
  const child = spawnCli(env, ['expiry-listener']);
  await ready(child);
  const [, flags] = (await env.redis.config('GET', 'notify-keyspace-events')) as [string, string];
  assert.ok(flags.includes('E') && flags.includes('x'), `flags: ${flags}`);
  child.kill('SIGINT');
  assert.equal(await exited(child), 0);
});

test('dev killed outright leaves its servers behind; the next dev stops them cleanly and comes up on the same data', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'flashsale-dev-'));
  chmodSync(dataDir, 0o755); // Postgres runs as another user
  const [port, pgPort, redisPort] = [await freePort(), await freePort(), await freePort()];
  const start = () =>
    spawnCli(undefined, ['dev'], {
      NODE_ENV: undefined,
      JWT_SECRET: undefined,
      ADMIN_TOKEN: undefined,
      FLASHSALE_DATA_DIR: dataDir,
      PORT: String(port),
      LOCAL_PG_PORT: String(pgPort),
      LOCAL_REDIS_PORT: String(redisPort),
    });
  const alive = (pid: number) => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  };
  const pgPid = () => Number(readFileSync(join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);
  const first = start();
  let second: ReturnType<typeof start> | undefined;
  try {
    await ready(first);
    const orphanPg = pgPid();
    const { redisPassword } = JSON.parse(readFileSync(join(dataDir, 'secrets.json'), 'utf8')) as {
      redisPassword: string;
    };
    const redis = new Redis(redisPort, '127.0.0.1', { password: redisPassword });
    const orphanRedis = Number(/process_id:(\d+)/.exec(await redis.info('server'))![1]);
    await redis.set('survives', '1');
    redis.disconnect();
    first.kill('SIGKILL');
    await exited(first);
    assert.ok(alive(orphanPg) && alive(orphanRedis), 'kill -9 leaves both servers running');
    assert.equal(
      Number(readFileSync(join(dataDir, 'stack.pid'), 'utf8')),
      first.pid,
      'and its lock, naming a process that is gone',
    );

    second = start();
    await ready(second);
    assert.ok(!alive(orphanPg) && !alive(orphanRedis), 'the orphans were stopped');
    assert.notEqual(pgPid(), orphanPg);
    assert.equal((await http(port, 'GET', '/api/sales/demo')).status, 200);
    const after = new Redis(redisPort, '127.0.0.1', { password: redisPassword });
    assert.equal(await after.get('survives'), '1', 'Redis data kept (clean shutdown, AOF)');
    after.disconnect();
    second.kill('SIGINT');
    assert.equal(await exited(second), 0);
  } finally {
    first.kill('SIGKILL');
    second?.kill('SIGKILL');
  }
});
