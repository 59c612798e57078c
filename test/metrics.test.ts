// After a load test with payments and expiry, /metrics shows every series an operator watches,
// with the values the run produced.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { startApi } from '../daemons/api.js';
import { ExpiryListener } from '../shared/pipeline/listener.js';
import { runLoadtest } from '../tools/loadtest.js';
import { replayOnce } from '../shared/pipeline/replay.js';
import { OrderWriter } from '../shared/pipeline/writer.js';
import { testEnv, type TestEnv } from './support/env.js';
import { waitFor } from './support/fixtures.js';
import { http } from './support/http.js';
import { ADMIN_TOKEN, JWT_SECRET } from './support/tokens.js';

let env: TestEnv;
let api: Awaited<ReturnType<typeof startApi>>;
let writer: OrderWriter;
let listener: ExpiryListener;

before(async () => {
  env = await testEnv({ expiryNudgeMs: 20 });
  api = await startApi(env.config, env.logger);
  writer = new OrderWriter({ pool: env.pool, redis: env.redis, logger: env.logger, config: env.config });
  writer.start();
  listener = new ExpiryListener({ pool: env.pool, redis: env.redis, logger: env.logger, config: env.config });
  await listener.start();
});
after(async () => {
  await listener.stop();
  await writer.stop();
  await api.stop();
  await env.close();
});

/** The value of one sample line, e.g. `flashsale_orders_closed_total{by="listener"}`. */
function sample(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  assert.ok(line, `${series} is exposed`);
  return Number(line.split(' ')[1]);
}

test('/metrics after a load test with payments and expiry shows real values for every series', async () => {
  const url = `http://127.0.0.1:${api.port}`;
  // A fresh sale with an 8 s window: create it through the API, then let the loadtest fire at it.
  // The window must outlast the load test, or orders expire mid-run, their units sell again and
  // payments come too late (on a busy machine 1,000 buyers took over 2 s).
  const created = await http(api.port, 'POST', '/api/sales', {
    body: { name: 'metrics', stock: 200, price: 500, currency: 'EUR', paymentWindowSeconds: 8 },
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  assert.equal(created.status, 201);
  const saleId = created.body.id as string;
  const r = await runLoadtest({
    url,
    saleId,
    buyers: 1000,
    concurrency: 100,
    qty: 1,
    payRatio: 0.5,
    jwtSecret: JWT_SECRET,
    db: env,
  });
  assert.equal(r.won, 200);
  assert.equal(r.payments.paid, 100);
  await waitFor(
    'unpaid orders expired and restored',
    async () => (await env.redis.get(`{sale:${saleId}}:available`)) === '100',
    30_000,
  );
  await replayOnce({ pool: env.pool, redis: env.redis, logger: env.logger });

  // Requests no route takes count once each under route="unmatched"; a 405 under its path.
  for (let i = 0; i < 3; i++) assert.equal((await http(api.port, 'GET', '/no/such/path')).status, 404);
  assert.equal((await http(api.port, 'DELETE', `/api/sales/${saleId}/purchases`)).status, 405);

  const text = (await http(api.port, 'GET', '/metrics')).body as string;
  assert.equal(
    sample(text, 'flashsale_http_request_duration_seconds_count{route="unmatched",method="GET",status="404"}'),
    3,
  );
  assert.equal(
    sample(
      text,
      'flashsale_http_request_duration_seconds_count{route="/api/sales/:saleId/purchases",method="DELETE",status="405"}',
    ),
    1,
  );
  assert.equal(sample(text, 'flashsale_purchases_total{outcome="queued"}'), 200);
  assert.equal(sample(text, 'flashsale_purchases_total{outcome="sold_out"}'), 800);
  assert.equal(
    sample(
      text,
      'flashsale_http_request_duration_seconds_count{route="/api/sales/:saleId/purchases",method="POST",status="202"}',
    ),
    200,
  );
  assert.equal(sample(text, `flashsale_winners_queued{sale="${saleId}"}`), 0);
  assert.equal(sample(text, 'flashsale_orders_written_total'), 200);
  assert.ok(sample(text, 'flashsale_writer_batch_size_count') >= 1);
  assert.equal(sample(text, 'flashsale_writer_batch_size_sum'), 200);
  assert.ok(sample(text, 'flashsale_expiry_events_total') >= 1);
  const byListener = sample(text, 'flashsale_orders_closed_total{by="listener"}');
  const byReplay = text.includes('flashsale_orders_closed_total{by="replay"}')
    ? sample(text, 'flashsale_orders_closed_total{by="replay"}')
    : 0;
  assert.equal(byListener + byReplay, 100);
  assert.ok(byListener > 0, 'the listener closed orders');
  assert.equal(sample(text, 'flashsale_close_lateness_seconds_count'), 100);
  assert.equal(sample(text, 'flashsale_stock_restored_total'), 100);
  // The replay's pass: its heartbeat, and where the sale's units are as it reconciled them.
  assert.equal(sample(text, 'flashsale_replay_passes_total'), 1);
  for (const [state, units] of Object.entries({
    available: 100,
    queued: 0,
    pending: 0,
    paid: 100,
    expired: 100,
    cancelled: 0,
    restoring: 0,
  })) {
    assert.equal(sample(text, `flashsale_sale_stock{sale="${saleId}",state="${state}"}`), units, state);
  }
  assert.match(text, /^# TYPE flashsale_reconciliation_failures_total counter$/m);
  assert.doesNotMatch(text, /^flashsale_reconciliation_failures_total\{/m, 'no reconciliation failed');
  assert.match(text, /^# TYPE flashsale_backend_errors_total counter$/m);
});

test("the request latency histogram (series bound once) writes the same text as prom-client's Histogram for the same observations", async () => {
  const { Histogram, Registry } = await import('prom-client');
  const { BoundHistogram } = await import('../shared/runtime/bound-histogram.js');
  const buckets = [0.001, 0.01, 0.1, 1];
  const [ours, theirs] = [new Registry(), new Registry()];
  const bound = new BoundHistogram('latency_seconds', 'help', ['route', 'status'], buckets, ours);
  const reference = new Histogram({
    name: 'latency_seconds',
    help: 'help',
    labelNames: ['route', 'status'],
    buckets,
    registers: [theirs],
  });
  const seen: [string, string, number][] = [
    ['/a', '202', 0.0005],
    ['/a', '202', 0.001],
    ['/a', '409', 0.05],
    ['/b', '202', 3],
    ['/a', '202', 0.2],
    ['/a', '202', 0.0105],
  ];
  for (const [route, status, v] of seen) {
    bound.of(route, status).observe(v);
    reference.labels({ route, status }).observe(v);
  }
  const text = await ours.metrics();
  assert.equal(text, await theirs.metrics());
  assert.match(text, /^latency_seconds_bucket\{le="0.01",route="\/a",status="202"\} 2$/m);
  assert.match(text, /^latency_seconds_bucket\{le="\+Inf",route="\/b",status="202"\} 1$/m);
  assert.deepEqual((await bound.get()).values, (await reference.get()).values);
  const held = bound.of('/a', '202');
  bound.reset();
  reference.reset();
  assert.equal(await ours.metrics(), '# HELP latency_seconds help\n# TYPE latency_seconds histogram\n');
  // A series bound before the reset (as the request hook keeps them) counts again, as prom-client's does.
  held.observe(0.02);
  reference.labels({ route: '/a', status: '202' }).observe(0.02);
  assert.equal(await ours.metrics(), await theirs.metrics());
  assert.match(await ours.metrics(), /^latency_seconds_count\{route="\/a",status="202"\} 1$/m);
});
