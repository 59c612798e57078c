// No deployment runs on a known secret: outside `flashsale dev`, every service process refuses to
// start without a buyer-token key and an admin token of its own, and the PM2 local mode generates
// random ones once instead of shipping defaults.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { signPayload } from '../shared/payments/providers/signed-webhook.js';
import { freePort } from '../tools/local-stack.js';
import { cli, exited, ready, spawnCli, type Vars } from './support/cli.js';
import { cliHere } from './support/cli-here.js';
import { testEnv, type TestEnv } from './support/env.js';
import { http } from './support/http.js';

let env: TestEnv;
before(async () => {
  env = await testEnv();
});
after(async () => {
  await env.close();
});

const SERVICES = ['api', 'order-writer', 'expiry-listener', 'admission', 'replay'];

/** `flashsale <args>` against this file's servers at info level, outside the local stack. */
const run = (args: string[], vars: Vars) =>
  cli(env, args, { LOG_LEVEL: 'info', FLASHSALE_LOCAL_STACK: undefined, ...vars });
/**
 * The same in this process (a process start costs a second of CPU): a refused service says the same
 * and has the same exit code, and never starts here. The first test starts every service in a
 * process of its own.
 */
const here = (args: string[], vars: Vars) =>
  cliHere(env, args, { LOG_LEVEL: 'info', FLASHSALE_LOCAL_STACK: undefined, ...vars });

test('secrets: every service refuses to start without JWT_SECRET (or JWT_JWKS_URL) or ADMIN_TOKEN, exit 2 naming the variable', async () => {
  // Every service side by side, each a process of its own without JWT_SECRET; without ADMIN_TOKEN in this one.
  await Promise.all(
    SERVICES.map(async (service) => {
      const [noJwt, noAdmin] = await Promise.all([
        run([service], { JWT_SECRET: undefined }),
        here([service], { ADMIN_TOKEN: undefined }),
      ]);
      assert.equal(noJwt.code, 2, `${service} without JWT_SECRET: ${noJwt.out}`);
      assert.match(noJwt.out, /JWT_SECRET is not set: set JWT_SECRET .* or JWT_JWKS_URL/);
      assert.equal(noAdmin.code, 2, `${service} without ADMIN_TOKEN: ${noAdmin.out}`);
      assert.match(noAdmin.out, /ADMIN_TOKEN is not set/);
    }),
  );
});

test('secrets: the API refuses to start without a PAYMENT_WEBHOOK_SECRET of its own, exit 2 naming it; the daemons do not need it', async () => {
  const cases: [Vars, RegExp][] = [
    [
      { PAYMENT_WEBHOOK_SECRET: undefined },
      /PAYMENT_WEBHOOK_SECRET is not set: set it to the signing secret your payment provider/,
    ],
    [{ PAYMENT_WEBHOOK_SECRET: 'short' }, /PAYMENT_WEBHOOK_SECRET is too short/],
    [
      { PAYMENT_WEBHOOK_SECRET: 'flashsale-development-secret' },
      /PAYMENT_WEBHOOK_SECRET is a published development default/,
    ],
  ];
  await Promise.all(
    cases.map(async ([setting, message]) => {
      const r = await here(['api'], setting);
      assert.equal(r.code, 2, `api with ${JSON.stringify(setting)}: ${r.out}`);
      assert.match(r.out, message);
    }),
  );
  // A one-shot pass, in this process.
  const replay = await cliHere(env, ['replay', '--once'], {
    LOG_LEVEL: 'info',
    FLASHSALE_LOCAL_STACK: undefined,
    PAYMENT_WEBHOOK_SECRET: undefined,
  });
  assert.equal(replay.code, 0, replay.out);
});

test('secrets: NODE_ENV=development is no way around them: only the local stack generates its own', async () => {
  const r = await run(['api'], { NODE_ENV: 'development', JWT_SECRET: undefined, ADMIN_TOKEN: undefined });
  assert.equal(r.code, 2, r.out);
  assert.match(r.out, /JWT_SECRET is not set/);
});

test('secrets: a published development default or a short secret is refused by every service, exit 2', async () => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ JWT_SECRET: 'flashsale-development-secret' }, /JWT_SECRET is a published development default/],
    [{ JWT_SECRET: 'flashsale-local-secret-change-me' }, /JWT_SECRET is a published development default/],
    [{ ADMIN_TOKEN: 'local-admin-change-me' }, /ADMIN_TOKEN is a published development default/],
    [{ ADMIN_TOKEN: 'dev-admin' }, /ADMIN_TOKEN is too short/],
    [{ JWT_SECRET: 'short' }, /JWT_SECRET is too short/],
  ];
  for (const service of SERVICES) {
    await Promise.all(
      cases.map(async ([setting, message]) => {
        const r = await here([service], setting);
        assert.equal(r.code, 2, `${service} with ${JSON.stringify(setting)}: ${r.out}`);
        assert.match(r.out, message);
      }),
    );
  }
});

test('secrets: the local-stack mode refuses servers that are not on this machine', async () => {
  const r = await here(['api'], {
    FLASHSALE_LOCAL_STACK: '1',
    JWT_SECRET: undefined,
    ADMIN_TOKEN: undefined,
    DATABASE_URL: 'postgres://u:p@db.example:5432/x',
  });
  assert.equal(r.code, 2, r.out);
  assert.match(r.out, /FLASHSALE_LOCAL_STACK=1 is for the local stack on this machine only/);
});

test('secrets: the PM2 local mode generates random secrets once, shared by every process, never a published one', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'flashsale-secrets-'));
  const port = await freePort();
  const start = () =>
    spawnCli(env, ['api'], {
      JWT_SECRET: undefined,
      ADMIN_TOKEN: undefined,
      PAYMENT_WEBHOOK_SECRET: undefined,
      FLASHSALE_LOCAL_STACK: '1',
      FLASHSALE_DATA_DIR: dataDir,
      PORT: String(port),
    });
  const api = start();
  try {
    await ready(api);
    const file = join(dataDir, 'secrets.json');
    assert.equal(statSync(file).mode & 0o777, 0o600);
    const secrets = JSON.parse(readFileSync(file, 'utf8')) as {
      jwtSecret: string;
      adminToken: string;
      paymentWebhookSecret: string;
    };
    assert.ok(
      secrets.jwtSecret.length >= 32 && secrets.adminToken.length >= 24 && secrets.paymentWebhookSecret.length >= 32,
      JSON.stringify(secrets),
    );
    assert.equal(
      new Set(Object.values(secrets)).size,
      5,
      'five different secrets: three keys and two server passwords',
    );
    const body = { id: 'local-secrets', name: 'Local', stock: 1, price: 500, currency: 'EUR' };
    assert.equal(
      (await http(port, 'POST', '/api/sales', { body, headers: { authorization: 'Bearer local-admin-change-me' } }))
        .status,
      403,
    );
    assert.equal(
      (await http(port, 'POST', '/api/sales', { body, headers: { authorization: `Bearer ${secrets.adminToken}` } }))
        .status,
      201,
    );
    // A second process of the same stack reads the same file.
    api.kill('SIGINT');
    assert.equal(await exited(api), 0);
    const again = start();
    await ready(again);
    assert.deepEqual(JSON.parse(readFileSync(file, 'utf8')), secrets);
    assert.equal((await http(port, 'GET', '/api/sales/local-secrets')).status, 200);
    again.kill('SIGINT');
    assert.equal(await exited(again), 0);
  } finally {
    api.kill('SIGKILL');
  }
});

test('secrets: a local secrets file from before payment webhooks gets a webhook secret added, the same for every process', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'flashsale-secrets-'));
  const file = join(dataDir, 'secrets.json');
  const old = { jwtSecret: 'an-older-jwt-secret-0123456789abcdef', adminToken: 'an-older-admin-token-0123456789' };
  writeFileSync(file, JSON.stringify(old), { mode: 0o600 });
  const port = await freePort();
  const api = spawnCli(env, ['api'], {
    JWT_SECRET: undefined,
    ADMIN_TOKEN: undefined,
    PAYMENT_WEBHOOK_SECRET: undefined,
    FLASHSALE_LOCAL_STACK: '1',
    FLASHSALE_DATA_DIR: dataDir,
    PORT: String(port),
  });
  try {
    await ready(api);
    const secrets = JSON.parse(readFileSync(file, 'utf8')) as {
      jwtSecret: string;
      adminToken: string;
      paymentWebhookSecret: string;
    };
    assert.equal(secrets.jwtSecret, old.jwtSecret);
    assert.equal(secrets.adminToken, old.adminToken);
    assert.ok(secrets.paymentWebhookSecret.length >= 32, JSON.stringify(secrets));
    assert.equal(statSync(file).mode & 0o777, 0o600);
    // The API verifies with the added secret (an event type it ignores: nothing is recorded).
    const raw = JSON.stringify({ id: 'evt_local', type: 'payment.refunded' });
    const signed = await http(port, 'POST', '/api/payments/webhook', {
      body: raw,
      headers: { 'flashsale-signature': signPayload(secrets.paymentWebhookSecret, raw) },
    });
    assert.deepEqual(signed.body, { id: 'evt_local', outcome: 'ignored' });
    // Another command of the stack (here, in this process) derives the same one and leaves the file as it is.
    const again = await cliHere(env, ['replay', '--once'], {
      JWT_SECRET: undefined,
      ADMIN_TOKEN: undefined,
      PAYMENT_WEBHOOK_SECRET: undefined,
      FLASHSALE_LOCAL_STACK: '1',
      FLASHSALE_DATA_DIR: dataDir,
    });
    assert.equal(again.code, 0, again.out);
    assert.deepEqual(JSON.parse(readFileSync(file, 'utf8')), secrets);
    api.kill('SIGINT');
    assert.equal(await exited(api), 0);
  } finally {
    api.kill('SIGKILL');
  }
});
