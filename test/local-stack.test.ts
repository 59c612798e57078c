// The local stack on a shared machine: its data is its owner's alone (data dir, secrets.json,
// Redis's and Postgres's files), its servers take only the random passwords in secrets.json (an
// older file gets them added), every process of the stack (dev, and `servers` with the PM2 apps)
// connects with them, and a second stack on the same data dir is refused instead of stopping the
// first one's servers.
import assert from 'node:assert/strict';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { connect } from 'node:net';
import { test } from 'node:test';
import { Redis } from 'ioredis';
import pg from 'pg';
import { freePort } from '../tools/local-stack.js';
import { cli, exited, ready, spawnCli, type Vars } from './support/cli.js';
import { cliHere } from './support/cli-here.js';
import { localStackVars } from './support/local-stack.js';
import { http } from './support/http.js';

const mode = (path: string) => statSync(path).mode & 0o777;

interface Secrets {
  redisPassword: string;
  postgresPassword: string;
  jwtSecret: string;
  adminToken: string;
}

/** Redis's reply to one command from a client that never authenticated. */
function anonymousReply(port: number, command: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(`${command}\r\n`));
    socket.setEncoding('utf8');
    socket.once('data', (reply: string) => {
      socket.destroy();
      resolve(reply);
    });
    socket.once('error', reject);
  });
}

/** What the servers of the stack in `dataDir` let in. */
async function assertLockedDown(dataDir: string, vars: Vars): Promise<void> {
  const secrets = JSON.parse(readFileSync(join(dataDir, 'secrets.json'), 'utf8')) as Secrets;
  if (process.getuid?.() === 0) {
    // Postgres runs as the postgres user, who must pass through; nobody else may.
    assert.equal(mode(dataDir), 0o710);
    assert.equal(statSync(dataDir).gid, Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' })));
  } else {
    assert.equal(mode(dataDir), 0o700);
  }
  assert.equal(mode(join(dataDir, 'secrets.json')), 0o600);
  assert.equal(mode(join(dataDir, 'redis')), 0o700);
  assert.equal(mode(join(dataDir, 'redis', 'appendonlydir')), 0o700);
  assert.equal(mode(join(dataDir, 'redis', 'auth.conf')), 0o600);
  assert.ok([0o700, 0o750].includes(mode(join(dataDir, 'pg'))), mode(join(dataDir, 'pg')).toString(8));
  assert.ok(
    secrets.redisPassword.length >= 32 &&
      secrets.postgresPassword.length >= 32 &&
      secrets.redisPassword !== secrets.postgresPassword,
  );

  const redisPort = Number(vars.LOCAL_REDIS_PORT);
  assert.match(await anonymousReply(redisPort, 'SET stolen 1'), /^-NOAUTH /);
  const authed = new Redis(redisPort, '127.0.0.1', { password: secrets.redisPassword });
  assert.equal(await authed.ping(), 'PONG');
  authed.disconnect();

  const pgUrl = (password: string) =>
    `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${vars.LOCAL_PG_PORT}/postgres`;
  const old = new pg.Client({ connectionString: pgUrl('flashsale') });
  await assert.rejects(old.connect(), (err: { code?: string }) => err.code === '28P01');
  const own = new pg.Client({ connectionString: pgUrl(secrets.postgresPassword) });
  await own.connect();
  await own.end();
}

test('local stack: dev keeps its data to itself, its servers take only the random passwords added to an older secrets.json, and a one-shot command given no servers finds it', async () => {
  const { dataDir, port, vars } = await localStackVars();
  const older = { jwtSecret: 'an-older-jwt-secret-0123456789abcdef', adminToken: 'an-older-admin-token-0123456789' };
  writeFileSync(join(dataDir, 'secrets.json'), JSON.stringify(older), { mode: 0o600 });
  const dev = spawnCli(undefined, ['dev'], vars);
  try {
    await ready(dev, 'dev');
    const secrets = JSON.parse(readFileSync(join(dataDir, 'secrets.json'), 'utf8')) as Secrets;
    assert.equal(secrets.jwtSecret, older.jwtSecret, 'the older secrets are kept');
    await assertLockedDown(dataDir, vars);
    assert.equal((await http(port, 'GET', '/readyz')).status, 200, 'dev itself connects with them');

    // A one-shot command (run in this process) given no servers finds this stack by itself, and says which in one line.
    const listed = await cliHere(undefined, ['sale', 'list', '--json'], vars);
    assert.equal(listed.code, 0, listed.out);
    assert.deepEqual(
      (JSON.parse(listed.stdout) as { id: string }[]).map((s) => s.id),
      ['demo'],
    );
    assert.equal(
      listed.stderr,
      `flashsale: using the local stack running on ${dataDir} (pid ${dev.pid}): Postgres 127.0.0.1:${vars.LOCAL_PG_PORT}, Redis 127.0.0.1:${vars.LOCAL_REDIS_PORT}\n`,
    );
    // A service never does: without servers it refuses to start, as it must in production (judged
    // in this process too: a refused service never starts here).
    const writer = await cliHere(undefined, ['order-writer'], vars);
    assert.equal(writer.code, 2, writer.out);
    assert.match(writer.stderr, /^flashsale: cannot start: DATABASE_URL is not set/m);
    dev.kill('SIGINT');
    assert.equal(await exited(dev), 0);
    const noStack = await cliHere(undefined, ['sale', 'list'], vars);
    assert.equal(noStack.code, 2, noStack.out);
    assert.match(noStack.stderr, /^flashsale: DATABASE_URL is not set: .*or run `flashsale dev`/m);
  } finally {
    dev.kill('SIGKILL');
  }
});

test('local stack: `servers` as PM2 runs it, and an app given no server URLs connects with the passwords in secrets.json', async () => {
  const { dataDir, port, vars } = await localStackVars();
  const servers = spawnCli(undefined, ['servers'], { ...vars, FLASHSALE_LOCAL_STACK: '1', NODE_ENV: 'production' });
  const api = spawnCli(undefined, ['api'], { ...vars, FLASHSALE_LOCAL_STACK: '1', NODE_ENV: 'production' });
  try {
    await ready(servers, 'servers');
    await assertLockedDown(dataDir, vars);
    await ready(api, 'the api');
    assert.equal((await http(port, 'GET', '/readyz')).status, 200);
    api.kill('SIGINT');
    assert.equal(await exited(api), 0);
    servers.kill('SIGINT');
    assert.equal(await exited(servers), 0);
  } finally {
    api.kill('SIGKILL');
    servers.kill('SIGKILL');
  }
});

test('local stack: a second dev on the same data dir is refused, exit 1 naming the live one, which keeps its servers and sells', async () => {
  const { dataDir, port, vars } = await localStackVars();
  const first = spawnCli(undefined, ['dev'], vars);
  try {
    await ready(first, 'the first dev');
    const second = await cli(undefined, ['dev'], { ...vars, PORT: String(await freePort()), LOG_LEVEL: 'info' });
    assert.equal(second.code, 1, second.out);
    assert.match(second.out, new RegExp(`another local stack \\(pid ${first.pid}\\) is running on ${dataDir}`));
    assert.equal((await http(port, 'GET', '/readyz')).status, 200, 'the first one still has its servers');
    const { token } = (await http(port, 'POST', '/api/dev/token', { body: { userId: 'still-served' } })).body as {
      token: string;
    };
    const bought = await http(port, 'POST', '/api/sales/demo/purchases', {
      body: { qty: 1 },
      headers: { authorization: `Bearer ${token}` },
    });
    assert.equal(bought.status, 202, JSON.stringify(bought.body));
    first.kill('SIGINT');
    assert.equal(await exited(first), 0);
  } finally {
    first.kill('SIGKILL');
  }
});
