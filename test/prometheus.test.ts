// A real Prometheus (Debian's `prometheus`) scraping the PM2 deployment with deploy/prometheus's
// config and rules: each API instance is a target of its own (PM2 cluster mode shares PORT, whose
// /metrics is one instance's), so purchases summed over instances are what a load test was answered.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { runLoadtest } from '../tools/loadtest.js';
import { testEnv, type TestEnv } from './support/env.js';
import { waitFor } from './support/fixtures.js';
import { http } from './support/http.js';
import { PM2_APPS, pm2Deployment, type Pm2Deployment } from './support/pm2.js';
import { DEPLOY, startPrometheus, type PrometheusServer } from './support/prometheus.js';
import { ADMIN_TOKEN, JWT_SECRET } from './support/tokens.js';

let env: TestEnv;
let deployment: Pm2Deployment;
let prometheus: PrometheusServer | undefined;

/** The shipped config, on this deployment's ops ports (9100 + n there is OPS_PORT_BASE + n here), scraping every second. */
function scrapeConfig(opsBase: number): string {
  const shipped = readFileSync(join(DEPLOY, 'prometheus/prometheus.yml'), 'utf8');
  const config = shipped
    .replace(/127\.0\.0\.1:(9\d{3})/g, (_m, p: string) => `127.0.0.1:${opsBase + Number(p) - 9100}`)
    .replace(/^(\s+(scrape|evaluation)_interval:) 15s$/gm, '$1 1s');
  assert.notEqual(config, shipped);
  return config;
}

before(async () => {
  env = await testEnv();
  deployment = await pm2Deployment(env);
  // Prometheus starts beside the deployment: the test waits until it has scraped every target up.
  const [deployed, started] = await Promise.allSettled([
    deployment.start(),
    startPrometheus({
      'prometheus.yml': scrapeConfig(deployment.opsBase),
      'alerts.yml': readFileSync(join(DEPLOY, 'prometheus/alerts.yml'), 'utf8'),
    }),
  ]);
  if (started.status === 'fulfilled') prometheus = started.value; // after() stops it, whichever failed
  for (const r of [deployed, started]) if (r.status === 'rejected') throw r.reason;
});
after(async () => {
  await prometheus?.stop();
  await deployment.close();
  await env.close();
});

/** `sum by (<label>) (<expr>)` as { label value: number }. */
async function sumBy(label: string, expr: string): Promise<Record<string, number>> {
  const rows = await prometheus!.query(`sum by (${label}) (${expr})`);
  return Object.fromEntries(rows.map((r) => [r.metric[label] ?? '', Number(r.value[1])]));
}

/** Polls until the query's answer equals `want` (Prometheus has scraped past the change); fails with the last answer. */
async function settlesTo(what: string, query: () => Promise<unknown>, want: unknown): Promise<void> {
  let last: unknown;
  try {
    await waitFor(
      what,
      async () => {
        last = await query();
        return JSON.stringify(last) === JSON.stringify(want);
      },
      20_000,
      250,
    );
  } catch {
    assert.deepEqual(last, want, what);
  }
}

test('prometheus: every process of the PM2 deployment is a target, and purchases summed over the API instances equal what the load test was answered', async () => {
  const prom = prometheus!;
  await waitFor(
    'every target scraped and up',
    async () => (await prom.query('up{job=~"flashsale-.*"} == 1')).length === PM2_APPS,
    20_000,
    250,
  );
  const jobs = await sumBy('job', 'up');
  assert.deepEqual(jobs, {
    'flashsale-admission': 1,
    'flashsale-api': 2,
    'flashsale-events': 1,
    'flashsale-expiry-listener': 1,
    'flashsale-order-writer': 1,
    'flashsale-replay': 1,
  });

  const { port } = deployment;
  const created = await http(port, 'POST', '/api/sales', {
    body: { name: 'prometheus', stock: 300, price: 500, currency: 'EUR', paymentWindowSeconds: 60 },
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  assert.equal(created.status, 201);
  const saleId = created.body.id as string;
  const load = await runLoadtest({
    url: `http://127.0.0.1:${port}`,
    saleId,
    buyers: 1500,
    concurrency: 50,
    qty: 1,
    payRatio: 0,
    jwtSecret: JWT_SECRET,
  });
  assert.equal(load.won, 300);
  // "202 queued" is counted as outcome queued, "409 sold_out" as sold_out: the code the buyer got.
  const answered: Record<string, number> = {};
  for (const [reply, n] of Object.entries(load.outcomes)) {
    assert.match(reply, /^\d{3} \w+$/, 'every buyer got an HTTP answer');
    answered[reply.split(' ')[1]!] = n;
  }
  assert.equal(
    Object.values(answered).reduce((a, b) => a + b, 0),
    1500,
  );
  await settlesTo('purchases summed over instances', () => sumBy('outcome', 'flashsale_purchases_total'), answered);

  // Both instances took purchases, each scraped on its own port; the shared port shows only one of them.
  const perInstance = await prom.query('flashsale_purchases_total{outcome="queued"}');
  assert.equal(perInstance.length, 2, JSON.stringify(perInstance));
  assert.ok(
    perInstance.every((r) => Number(r.value[1]) > 0 && Number(r.value[1]) < 300),
    JSON.stringify(perInstance),
  );
  const shared = (await http(port, 'GET', '/metrics')).body as string;
  const sharedQueued = Number(/^flashsale_purchases_total\{outcome="queued"\} (\d+)$/m.exec(shared)?.[1]);
  assert.ok(
    perInstance.some((r) => Number(r.value[1]) === sharedQueued),
    `the shared port answered ${sharedQueued}: one instance's count`,
  );

  // The replay's view of the sale, and its heartbeat.
  await settlesTo(
    "the sale's stock as the replay reconciled it",
    () => sumBy('state', `flashsale_sale_stock{sale="${saleId}"}`),
    { available: 0, cancelled: 0, expired: 0, paid: 0, pending: 300, queued: 0, restoring: 0 },
  );
  assert.ok(Number((await prom.query('sum(flashsale_replay_passes_total)'))[0]?.value[1]) > 0, 'replay passes counted');

  // The shipped rules load and evaluate against these series; none fires on a healthy deployment.
  type Rule = { name: string; health: string; lastError?: string };
  const rules = await waitFor(
    'every rule evaluated',
    async () => {
      const all = (await prom.api<{ groups: { rules: Rule[] }[] }>('rules')).groups.flatMap((g) => g.rules);
      return all.every((r) => r.health !== 'unknown') && all;
    },
    10_000,
    250,
  );
  assert.ok(rules.length >= 8, `${rules.length} rules loaded`);
  assert.deepEqual(
    rules.filter((r) => r.health !== 'ok').map((r) => `${r.name}: ${r.lastError}`),
    [],
  );
  const { alerts } = await prom.api<{ alerts: { labels: { alertname: string }; state: string }[] }>('alerts');
  assert.deepEqual(
    alerts.filter((a) => a.state === 'firing').map((a) => a.labels.alertname),
    [],
  );
});
