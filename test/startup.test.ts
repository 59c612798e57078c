// How a start goes wrong, as the operator reads it: a refused start is one plain line on stderr,
// a malformed server URL is named at once, and a start waiting for a server says so.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { freePort } from '../tools/local-stack.js';
import { operatorCli as run, type Vars } from './support/cli.js';
import { cliHere } from './support/cli-here.js';
import { testEnv, type TestEnv } from './support/env.js';

let env: TestEnv;
before(async () => {
  env = await testEnv();
});
after(async () => {
  await env.close();
});

/** The commands that run until a signal (daemons/cli/services.ts `serve`). */
const SERVICE_COMMANDS = ['dev', 'servers', 'api', 'order-writer', 'expiry-listener', 'admission', 'replay'];

test('a refused start of every service command is one plain line on stderr, never a stack trace', async () => {
  // A data dir whose stack.pid names a live process (this one): `dev` and `servers` refuse it.
  const taken = mkdtempSync(join(tmpdir(), 'flashsale-taken-'));
  writeFileSync(join(taken, 'stack.pid'), String(process.pid));
  const servers = { DATABASE_URL: env.config.databaseUrl, REDIS_URL: env.config.redisUrl };
  const unreachable = {
    ...servers,
    DATABASE_URL: `postgres://postgres:x@127.0.0.1:${await freePort()}/none`,
    STARTUP_TIMEOUT_MS: '300',
  };
  const cases: [string[], Vars, number, RegExp][] = [
    [
      ['dev'],
      { FLASHSALE_DATA_DIR: taken, PORT: String(await freePort()) },
      1,
      new RegExp(`^flashsale: cannot start: another local stack \\(pid ${process.pid}\\) is running on `),
    ],
    [['servers'], { FLASHSALE_DATA_DIR: taken }, 1, /^flashsale: cannot start: another local stack/],
    ...['api', 'order-writer', 'expiry-listener', 'admission', 'replay'].flatMap(
      (service): [string[], Vars, number, RegExp][] => [
        [
          [service],
          { ...servers, JWT_SECRET: undefined },
          2,
          /^flashsale: cannot start: JWT_SECRET is not set: set JWT_SECRET/,
        ],
      ],
    ),
    // An unusable server, exit 1, by the same path in every service: two of them.
    ...['api', 'replay'].map((service): [string[], Vars, number, RegExp] => [
      [service],
      unreachable,
      1,
      /^flashsale: cannot start: Postgres at DATABASE_URL is unusable: connect ECONNREFUSED/,
    ]),
  ];
  assert.deepEqual(
    new Set(cases.map(([[command]]) => command)),
    new Set(SERVICE_COMMANDS),
    'every long-running command',
  );
  const help = (await cliHere(undefined, ['--help'], { LOG_LEVEL: 'info' })).stdout;
  for (const command of SERVICE_COMMANDS)
    assert.match(help, new RegExp(`^  flashsale ${command} `, 'm'), `${command} is a command`);
  await Promise.all(
    cases.map(async ([args, vars, code, line]) => {
      const r = await run(args, vars);
      const what = `${args.join(' ')} with ${JSON.stringify(vars)}: ${r.out}`;
      assert.equal(r.code, code, what);
      const lines = r.stderr.split('\n').filter(Boolean);
      assert.equal(lines.length, 1, what);
      assert.match(lines[0]!, line, what);
      assert.doesNotMatch(r.out, /\n\s+at /, `${what}: no stack trace`);
    }),
  );
});

test('a malformed DATABASE_URL or REDIS_URL exits 2 at once, naming the setting and what is wrong, never repeating the password', async () => {
  const servers = { DATABASE_URL: env.config.databaseUrl, REDIS_URL: env.config.redisUrl };
  const cases: [Vars, RegExp][] = [
    [
      { DATABASE_URL: 'base' },
      /DATABASE_URL does not start with a scheme \(postgres:\/\/, redis:\/\/\.\.\.\): set it to a URL like postgres:\/\/user:password@host:5432\/database/,
    ],
    [
      { DATABASE_URL: 'mysql://app:s3cret-pw@db:3306/shop' },
      /DATABASE_URL has the scheme mysql:\/\/, not postgres:\/\/ or postgresql:\/\//,
    ],
    [
      { DATABASE_URL: 'postgres://app:s3cret#pw@db:5432/shop' },
      /DATABASE_URL is not a valid URL \(a password with @, :, \/, \? or # in it must be percent-encoded\)/,
    ],
    [{ DATABASE_URL: 'postgres:///shop' }, /DATABASE_URL names no host/],
    [
      { REDIS_URL: '127.0.0.1:6379' },
      /REDIS_URL does not start with a scheme .*: set it to a URL like redis:\/\/:password@host:6379 \(rediss:\/\/ for TLS\)/,
    ],
    [
      { REDIS_URL: 'http://:s3cret-pw@127.0.0.1:6379' },
      /REDIS_URL has the scheme http:\/\/, not redis:\/\/ or rediss:\/\//,
    ],
  ];
  // Every command reads them the same way (shared/config/settings.ts): a service and a one-shot command by turns.
  await Promise.all(
    cases.map(async ([vars, message], i) => {
      const command = i % 2 === 0 ? ['api'] : ['check'];
      // In this process, with its process's output and exit code (a service never starts here): the
      // first test starts every service in a process of its own.
      const r = await cliHere(undefined, command, { LOG_LEVEL: 'info', ...servers, ...vars });
      const what = `${command.join(' ')} with ${JSON.stringify(vars)}: ${r.out}`;
      assert.equal(r.code, 2, what);
      assert.match(r.stderr, new RegExp(`^flashsale: ${message.source}`, 'm'), what);
      assert.doesNotMatch(r.out, /s3cret/, what);
    }),
  );
});

test('a start that waits for a server says so every 5 s: where, how long of STARTUP_TIMEOUT_MS, and the last error', async () => {
  const port = await freePort();
  const r = await run(['order-writer'], {
    DATABASE_URL: `postgres://postgres:x@127.0.0.1:${port}/none`,
    REDIS_URL: env.config.redisUrl,
    STARTUP_TIMEOUT_MS: '12000',
  });
  assert.equal(r.code, 1, r.out);
  const waiting = r.out.split('\n').filter((line) => line.includes('waiting for Postgres'));
  assert.ok(waiting.length >= 1, r.out);
  for (const line of waiting) {
    assert.match(
      line,
      new RegExp(
        `"level":40.*"err":"connect ECONNREFUSED 127\\.0\\.0\\.1:${port}".*"msg":"waiting for Postgres at 127\\.0\\.0\\.1:${port}, ([5-9]|1[01]) of 12 s \\(STARTUP_TIMEOUT_MS\\)"`,
      ),
    );
  }
  assert.match(r.stderr, /^flashsale: cannot start: Postgres at DATABASE_URL is unusable: connect ECONNREFUSED/m);
});
