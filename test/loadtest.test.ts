import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startApi } from '../daemons/api.js';
import { formatReport, runLoadtest } from '../tools/loadtest.js';
import { OrderWriter } from '../shared/pipeline/writer.js';
import { cli } from './support/cli.js';
import { testEnv, type TestEnv } from './support/env.js';
import { ADMIN_TOKEN, JWT_SECRET } from './support/tokens.js';

let env: TestEnv;
let api: Awaited<ReturnType<typeof startApi>>;
let writer: OrderWriter;
let url: string;

before(async () => {
  env = await testEnv();
  api = await startApi(env.config, env.logger);
  writer = new OrderWriter({ pool: env.pool, redis: env.redis, logger: env.logger, config: env.config });
  writer.start();
  url = `http://127.0.0.1:${api.port}`;
});
after(async () => {
  await writer.stop();
  await api.stop();
  await env.close();
});

const base = { jwtSecret: JWT_SECRET, adminToken: ADMIN_TOKEN, qty: 1, payRatio: 0 };

describe('loadtest', () => {
  test('stock 1000, 10,000 buyers at concurrency 500: 1000 won, 9000 sold out, exactly 1000 orders, conservation holds', async () => {
    const r = await runLoadtest({ ...base, url, stock: 1000, buyers: 10_000, concurrency: 500, db: env });
    assert.deepEqual(r.outcomes, { '202 queued': 1000, '409 sold_out': 9000 });
    assert.equal(r.won, 1000);
    assert.equal(r.settled, true);
    assert.deepEqual(r.orders, { total: 1000, pending: 1000, paid: 0, expired: 0 });
    const rows = await env.pool.query<{ n: number }>('select count(*)::int as n from orders where sale_id = $1', [
      r.saleId,
    ]);
    assert.equal(rows.rows[0]!.n, 1000);
    assert.equal(r.reconciliation?.holds, true);
    assert.equal(r.reconciliation?.available, 0);
    assert.ok(r.throughput > 0 && r.latencyMs.p50 <= r.latencyMs.p99 && r.latencyMs.p99 <= r.latencyMs.max);
    const table = formatReport(r);
    assert.match(table, /^ {2}202 queued +1000$/m);
    assert.match(table, /^ {2}409 sold_out +9000$/m);
    assert.match(table, /^ {2}total +10000$/m);
    assert.match(table, /^orders in Postgres +1000$/m);
    assert.match(table, /^available +0$/m);
    assert.match(table, /^conservation +holds$/m);
    assert.match(table, /^latency p99 +\d+\.\d ms$/m);
  });

  test('--pay-ratio 0.5 pays half of the won orders through the pay endpoint', async () => {
    const r = await runLoadtest({ ...base, url, stock: 41, buyers: 100, concurrency: 20, payRatio: 0.5, db: env });
    assert.equal(r.won, 41);
    assert.equal(r.payments.asked, Math.round(0.5 * 41));
    assert.equal(r.payments.paid, Math.round(0.5 * 41));
    assert.deepEqual(r.payments.outcomes, { '200 paid': 21 });
    assert.deepEqual(r.orders, { total: 41, pending: 20, paid: 21, expired: 0 });
    assert.equal(r.reconciliation?.holds, true);
    assert.match(formatReport(r), /^payments +21\/21 paid$/m);
  });

  test('an existing sale without Postgres: the table says what the missing rows need', async () => {
    const first = await runLoadtest({ ...base, url, stock: 5, buyers: 10, concurrency: 10 });
    const again = await runLoadtest({ ...base, url, saleId: first.saleId, buyers: 10, concurrency: 10 });
    assert.deepEqual(again.outcomes, { '409 sold_out': 10 });
    assert.equal(again.stock, 5);
    assert.equal(again.orders, null);
    assert.match(formatReport(again), /^conservation +unchecked \(needs DATABASE_URL and REDIS_URL\)$/m);
  });

  test('the CLI prints the table and exits 0 when conservation holds', async () => {
    const { code, stdout, stderr } = await cli(
      undefined,
      [
        'loadtest',
        '--url',
        url,
        '--stock',
        '50',
        '--buyers',
        '300',
        '--concurrency',
        '50',
        '--jwt-secret',
        JWT_SECRET,
        '--admin-token',
        ADMIN_TOKEN,
        '--database-url',
        env.config.databaseUrl!,
        '--redis-url',
        env.config.redisUrl!,
      ],
      { LOG_LEVEL: 'info', JWT_SECRET: undefined, ADMIN_TOKEN: undefined },
    );
    assert.equal(code, 0, stderr);
    assert.match(stdout, /^ {2}202 queued +50$/m);
    assert.match(stdout, /^ {2}409 sold_out +250$/m);
    assert.match(stdout, /^orders in Postgres +50$/m);
    assert.match(stdout, /^conservation +holds$/m);
    assert.match(stderr, /loadtest: buy 300\/300 \(100%\)/, 'progress lines when stderr is not a terminal');
  });
});
