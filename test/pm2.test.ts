// The ecosystem as an operator runs it: `pm2 start ecosystem.config.js`, buy, pay, reload, stop.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import { signPayload } from '../shared/payments/providers/signed-webhook.js';
import { reconcile } from '../shared/checks/reconcile.js';
import { testEnv, type TestEnv } from './support/env.js';
import { runConcurrently, waitFor } from './support/fixtures.js';
import { http, type Reply } from './support/http.js';
import { PM2_APPS, pm2Deployment, type Pm2Deployment } from './support/pm2.js';
import { ADMIN_TOKEN, PAYMENT_WEBHOOK_SECRET } from './support/tokens.js';

const run = promisify(execFile);
let env: TestEnv;
let deployment: Pm2Deployment;
let port: number;
let opsBase: number;
let pm2Env: NodeJS.ProcessEnv;

const pm2 = (...args: string[]) => deployment.pm2(...args);
const list = () => deployment.list();

before(async () => {
  env = await testEnv();
  deployment = await pm2Deployment(env);
  ({ port, opsBase, vars: pm2Env } = deployment);
});
after(async () => {
  await deployment.close();
  await env.close();
});

test('pm2 with real servers but no secrets: every app exits 2, shows stopped in pm2 status, and says why in one plain line of its error log', async () => {
  const noSecrets = { ...pm2Env, JWT_SECRET: undefined, ADMIN_TOKEN: undefined, PAYMENT_WEBHOOK_SECRET: undefined };
  await run('node_modules/.bin/pm2', ['start', 'ecosystem.config.js'], { env: noSecrets, timeout: 120_000 });
  // Each app's refusal in its error log first: a wait that costs no process, where each `pm2 jlist`
  // below starts one.
  const logs = join(pm2Env.PM2_HOME!, 'logs');
  const refusals = () =>
    readdirSync(logs)
      .filter((f) => f.includes('-error'))
      .map((f) => readFileSync(join(logs, f), 'utf8'))
      .join('')
      .match(/^flashsale: cannot start: JWT_SECRET is not set/gm)?.length ?? 0;
  await waitFor('every app refused', async () => refusals() >= PM2_APPS, 60_000, 100).catch(() => {});
  // PM2 decides at the exit itself: an exit it restarts keeps its pid until the restart; one of
  // stop_exit_codes gets pid 0 and is never restarted.
  const procs = await waitFor(
    'every app stopped with exit 2',
    async () => {
      const l = await list();
      return l.length === PM2_APPS && l.every((p) => p.pm2_env.exit_code === 2 && p.pm2_env.status === 'stopped') && l;
    },
    60_000,
    200,
  );
  for (const p of procs) {
    assert.equal(p.pid, 0, `${p.name} is not running`);
    assert.equal(p.pm2_env.restart_time, 0, `${p.name} was not restarted`);
    const err = readFileSync(p.pm2_env.pm_err_log_path, 'utf8');
    assert.match(err, /^flashsale: cannot start: JWT_SECRET is not set: set JWT_SECRET/m, p.name);
    assert.doesNotMatch(err + readFileSync(p.pm2_env.pm_out_log_path, 'utf8'), /\n\s+at /, `${p.name}: no stack trace`);
  }
  // Without its colours: each status is wrapped in escape codes.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: strips the terminal's colour codes
  const status = (await pm2('status')).stdout.replace(/\x1b\[[0-9;]*m/g, '');
  assert.equal(status.match(/\bstopped\b/g)?.length, PM2_APPS, status);
  assert.doesNotMatch(status, /waiting restart|online/, status);
  await pm2('delete', 'all');
});

test('pm2 starts every process from ecosystem.config.js; a buyer buys and pays; reload loses no accepted purchase', async () => {
  const procs = await deployment.start();
  assert.deepEqual(procs.map((p) => p.name).sort(), [
    'flashsale-admission',
    'flashsale-api',
    'flashsale-api',
    'flashsale-events',
    'flashsale-expiry-listener',
    'flashsale-order-writer',
    'flashsale-replay',
  ]);
  assert.equal((await http(port, 'GET', '/readyz')).status, 200);
  for (const i of [1, 2, 3, 4, 5, 10, 11]) {
    const r = await http(opsBase + i, 'GET', '/readyz');
    assert.equal(r.status, 200, `process on ops port ${opsBase + i} is ready`);
  }

  // An hour to pay: on a busy machine the reloads take over a minute, and an order expired by then
  // would be neither pending nor paid in the count below.
  const created = await http(port, 'POST', '/api/sales', {
    body: { id: 'pm2-sale', name: 'PM2 sale', stock: 3000, price: 500, currency: 'EUR', paymentWindowSeconds: 3600 },
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  assert.equal(created.status, 201);
  const won = await http(port, 'POST', '/api/sales/pm2-sale/purchases', { body: { qty: 1 }, user: 'first-buyer' });
  assert.equal(won.status, 202);
  await waitFor(
    'order pending',
    async () =>
      (await http(port, 'GET', `/api/orders/${won.body.orderId}`, { user: 'first-buyer' })).body.status ===
      'pending_payment',
  );
  // In production the payment provider pays, by signed webhook; the direct pay route is not there.
  assert.equal((await http(port, 'POST', `/api/orders/${won.body.orderId}/pay`, { user: 'first-buyer' })).status, 404);
  const raw = JSON.stringify({
    id: 'evt_pm2',
    type: 'payment.succeeded',
    orderId: won.body.orderId,
    amount: 500,
    currency: 'EUR',
  });
  const paid = await http(port, 'POST', '/api/payments/webhook', {
    body: raw,
    headers: { 'flashsale-signature': signPayload(PAYMENT_WEBHOOK_SECRET, raw) },
  });
  assert.deepEqual(paid.body, { id: 'evt_pm2', outcome: 'applied' });
  assert.equal(
    (await http(port, 'GET', `/api/orders/${won.body.orderId}`, { user: 'first-buyer' })).body.status,
    'paid',
  );

  // Reload the API and the writer while buyers keep coming; every 202 must become an order.
  const results: Reply[] = [];
  const buying = runConcurrently(2000, 20, async (i) => {
    const r = await http(port, 'POST', '/api/sales/pm2-sale/purchases', { body: { qty: 1 }, user: `reload-${i}` });
    results.push(r);
  });
  await new Promise((r) => setTimeout(r, 200));
  await pm2('reload', 'flashsale-api');
  await pm2('reload', 'flashsale-order-writer');
  await buying;
  const accepted = results.filter((r) => r.status === 202).map((r) => r.body.orderId as string);
  assert.ok(accepted.length > 1000, `${accepted.length} purchases accepted during the reload`);
  await waitFor(
    'accepted purchases written',
    async () => {
      const res = await env.pool.query('select count(*)::int as n from orders where id = any($1::text[])', [accepted]);
      return res.rows[0].n === accepted.length;
    },
    30_000,
    100,
  );
  const r = await reconcile(env.pool, env.redis, 'pm2-sale', 3000);
  assert.ok(r.holds, JSON.stringify(r));
  assert.equal(r.pending + r.paid, accepted.length + 1);

  // Metrics on the daemons show real values.
  const writerMetrics = (await http(opsBase + 1, 'GET', '/metrics')).body as string;
  assert.match(writerMetrics, /flashsale_orders_written_total \d+/);

  await pm2('stop', 'all');
  const stopped = await list();
  assert.ok(
    stopped.every((p) => p.pm2_env.status === 'stopped'),
    JSON.stringify(stopped.map((p) => p.pm2_env.status)),
  );
});
