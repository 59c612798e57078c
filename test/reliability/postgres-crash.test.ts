// Postgres crashes: an immediate stop (SIGQUIT to the postmaster: no checkpoint, no WAL flush) while
// a real order writer drains, twice. The server's default stays synchronous_commit=off, as on many
// tuned servers: a commit it acknowledged before flushing would be gone after the crash, while the
// writer had already dropped that batch from Redis. Every purchase accepted must be an order.
// The Postgres here is this file's own: crashing the run's shared one would break the others.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import pg from 'pg';
import { delay } from '../../shared/runtime/daemon.js';
import { saleKeys } from '../../shared/redis/keys.js';
import { purchaseScript } from '../../shared/sales/scripts.js';
import { newOrderId } from '../../shared/runtime/ids.js';
import { Cluster } from '../support/cluster.js';
import { testEnv, type TestEnv } from '../support/env.js';
import { newSale, orderCount, seededRandom, waitFor } from '../support/fixtures.js';
import { beginScenario, checkSale, LiveChecks, summarize, tally } from '../support/scenario.js';

const PURCHASES = 12_000;
const BUYERS_IN_FLIGHT = 20;

let env: TestEnv | undefined;
let cluster: Cluster | undefined;

after(async () => {
  cluster?.killAll();
  await env?.close();
});

test('postgres crash: an immediate stop of Postgres, twice while the writer drains 12,000 purchases; every accepted purchase is an order', async () => {
  env = await testEnv({}, { ownPostgres: true });
  const e = env;
  const { seed, log, rand } = beginScenario('postgres-crash');
  const sale = await newSale(e, { stock: PURCHASES, paymentWindowSeconds: 3600 });
  // Small batches: many commits, so a crash always finds some just acknowledged.
  cluster = new Cluster(e, log, { WRITER_BATCH_SIZE: '100' });
  const c = cluster;
  await c.start('writer', 'order-writer', { WRITER_ID: 'writer-0' });
  const plain = new pg.Client({ connectionString: e.config.databaseUrl });
  await plain.connect();
  assert.equal(
    (await plain.query('show synchronous_commit')).rows[0].synchronous_commit,
    'off',
    "the server's own default",
  );
  await plain.end();

  // Buyers straight through the purchase script, paced (about 2,000 a second) so the writer is
  // draining a steady stream when Postgres goes down, and keeps a backlog while it is away.
  const accepted: string[] = [];
  const refused: number[] = [];
  let next = 0;
  const buying = Promise.all(
    Array.from({ length: BUYERS_IN_FLIGHT }, async (_, b) => {
      const pace = seededRandom(seed + 1 + b);
      while (next < PURCHASES) {
        const i = next++;
        const orderId = newOrderId(sale.id);
        const [code] = await purchaseScript(e.redis, {
          saleId: sale.id,
          userId: `buyer-${i}`,
          qty: 1,
          orderId,
          buyCountTtlSeconds: 3600,
        });
        if (code === 1) accepted.push(orderId);
        else refused.push(code);
        await delay(pace() * 20);
      }
    }),
  );
  // Overdue orders cannot happen here (a one-hour window); the grace only covers the outages.
  const live = new LiveChecks(e, [sale.id], () => [...accepted], { everyMs: 500, graceMs: 4000 });

  const written = () => orderCount(e, sale.id).catch(() => 0);
  const crashes: string[] = [];
  for (const at of [2000 + rand() * 1500, 6500 + rand() * 1500]) {
    // Crash once the writer has written this many: it is mid-drain, with more still to come.
    await waitFor(`${Math.round(at)} orders written`, async () => (await written()) >= at, 60_000, 20);
    const downMs = 200 + rand() * 600;
    const before = await written();
    const queued = await e.redis.hlen(saleKeys(sale.id).queued);
    log.fault(
      `Postgres immediate stop (SIGQUIT) with ${before} orders written, ${queued} queued, ${accepted.length} accepted; down ${Math.round(downMs)} ms`,
    );
    await e.crashPostgres();
    await delay(downMs);
    await e.startPostgres();
    log.note(`Postgres back after crash recovery: ${await written()} orders (${before} before the crash)`);
    crashes.push(`${before} written`);
  }
  await buying;
  const k = saleKeys(sale.id);
  await waitFor(
    'every winner drained',
    async () => (await e.redis.hlen(k.queued)) === 0 && (await e.redis.llen(k.winners)) === 0,
    60_000,
    100,
  );
  await live.stop();

  const found = await e.pool.query<{ id: string }>('select id from orders where id = any($1::text[])', [accepted]);
  const have = new Set(found.rows.map((r) => r.id));
  const lost = accepted.filter((id) => !have.has(id));
  const final = await checkSale(e, sale.id, accepted);
  const orders = await orderCount(e, sale.id);
  log.note(
    `accepted ${accepted.length}; orders ${orders}; lost ${lost.length}; live checks skipped during outages ${live.skipped}`,
  );
  summarize({
    scenario: 'postgres-crash',
    seed,
    buyers: PURCHASES,
    orders,
    faults: log.faults,
    faultKinds: `Postgres immediate stop x2 (at ${crashes.join(', ')}), server default synchronous_commit=off`,
    ...tally(live, final),
  });

  assert.deepEqual({ accepted: accepted.length, refused }, { accepted: PURCHASES, refused: [] });
  assert.deepEqual(lost, [], `${lost.length} accepted purchases never became orders`);
  assert.equal(orders, PURCHASES, 'one order per accepted purchase');
  assert.deepEqual(live.violations, [], 'invariants during the crashes');
  assert.deepEqual(final.violations, [], 'invariants at rest');
  assert.deepEqual(await e.redis.keys(k.processing('*')), [], "no batch left in the writer's hands");
  assert.deepEqual(c.unexpectedExits, [], 'the writer rode out both crashes');
  // A Postgres away is every sale's outage (the loop backs off), never blamed on the sale.
  assert.deepEqual(
    c.errors('writer').filter((l) => l.includes('SALE_WRITE_FAILED')),
    [],
  );
  assert.ok(
    c.errors('writer').some((l) => l.includes('order writer pass failed')),
    'the writer did meet the crashes',
  );
  assert.deepEqual(await c.stopAll(), { writer: 0 });
});
