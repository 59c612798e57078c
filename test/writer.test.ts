// The order writer when part of the world is wrong: its commits are durable whatever the server's
// default, one sale it cannot write never holds up the others, and a Postgres that does not answer
// is every sale's problem (the whole loop backs off; no sale is set aside for it). A Postgres that
// is down is waited out without limit; a bug in our own code is retried a few times, then the
// writer gives up so that its process exits 1.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { pino, type Logger } from 'pino';
import { delay, type RetryOptions } from '../shared/runtime/daemon.js';
import { createPool, type Pool } from '../shared/runtime/db.js';
import { classify } from '../shared/runtime/errors.js';
import { SALES_REGISTRY, saleKeys } from '../shared/redis/keys.js';
import { freePort } from '../tools/local-stack.js';
import { metrics } from '../shared/runtime/metrics.js';
import { purchaseScript } from '../shared/sales/scripts.js';
import type { Sale } from '../shared/sales/sale.js';
import { writeOrders } from '../shared/orders/queries.js';
import { OrderWriter } from '../shared/pipeline/writer.js';
import { newOrderId } from '../shared/runtime/ids.js';
import { assertConserved, testEnv, type TestEnv } from './support/env.js';
import { newSale, orderCount, runConcurrently, waitFor } from './support/fixtures.js';

let env: TestEnv;
const sales: Sale[] = [];

before(async () => {
  // A long lease: nothing here re-drives another writer's batch behind the test's back.
  env = await testEnv({ writerLeaseMs: 60_000, writerIdleMs: 5 });
});
after(async () => {
  await assertConserved(env, sales);
  await env.close();
});

/** Log lines as objects, to check what an operator would be alerted with. */
function capturingLogger(): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  return { lines, logger: pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) }) };
}

function writer(
  logger: Logger,
  writerId: string,
  batchSize: number,
  pool = env.pool,
  retry?: RetryOptions,
): OrderWriter {
  return new OrderWriter({
    pool,
    redis: env.redis,
    logger,
    config: { ...env.config, writerId, writerBatchSize: batchSize },
    ...(retry ? { retry } : {}),
  });
}

async function sale(): Promise<Sale> {
  const s = await newSale(env, { stock: 10_000, paymentWindowSeconds: 3600 });
  sales.push(s);
  return s;
}

/** Queues winners straight through the purchase script; returns their entries as Redis holds them. */
async function queueWinners(saleId: string, n: number): Promise<string[]> {
  await runConcurrently(n, 100, async () => {
    const [code] = await purchaseScript(env.redis, {
      saleId,
      userId: `u-${randomUUID()}`,
      qty: 1,
      orderId: newOrderId(saleId),
      buyCountTtlSeconds: 3600,
    });
    assert.equal(code, 1);
  });
  return env.redis.lrange(saleKeys(saleId).winners, 0, -1);
}

/** Takes a sale's row out of Postgres (it stays in Redis and in the registry); the returned function puts it back. */
async function dropRow(saleId: string): Promise<() => Promise<void>> {
  const row = (await env.pool.query<{ r: unknown }>('select row_to_json(s) as r from sales s where id = $1', [saleId]))
    .rows[0]!.r;
  await env.pool.query('delete from sales where id = $1', [saleId]);
  return async () => {
    await env.pool.query('insert into sales select * from json_populate_record(null::sales, $1::json)', [
      JSON.stringify(row),
    ]);
  };
}

async function saleFailures(saleId: string): Promise<number> {
  return (await metrics.writerSaleFailures.get()).values.find((v) => v.labels.sale === saleId)?.value ?? 0;
}

const alerts = (lines: Record<string, unknown>[], saleId: string) =>
  lines.filter((l) => l.alert === 'SALE_WRITE_FAILED' && l.saleId === saleId);

test('durable commits: every connection of ours commits with synchronous_commit=on while the server default is off', async () => {
  const plain = new pg.Client({ connectionString: env.config.databaseUrl });
  await plain.connect();
  try {
    assert.equal(
      (await plain.query('show synchronous_commit')).rows[0].synchronous_commit,
      'off',
      "the server's own default",
    );
  } finally {
    await plain.end();
  }
  // Several connections held at once: every connection of the pool, not only the first.
  const clients = await Promise.all(Array.from({ length: 4 }, () => env.pool.connect()));
  try {
    for (const c of clients) assert.equal((await c.query('show synchronous_commit')).rows[0].synchronous_commit, 'on');
  } finally {
    for (const c of clients) c.release();
  }
  // A URL that carries options of its own keeps them and gets ours too.
  const pool = createPool(`${env.config.databaseUrl}?options=${encodeURIComponent('-c statement_timeout=4321')}`, 1);
  try {
    const r = await pool.query(
      "select current_setting('synchronous_commit') as sc, current_setting('statement_timeout') as st",
    );
    assert.deepEqual(r.rows[0], { sc: 'on', st: '4321ms' });
  } finally {
    await pool.end();
  }
});

test('no order without its sale: a sale with orders can be neither deleted nor given another id, also while a batch is being inserted', async () => {
  const s = await sale();
  await queueWinners(s.id, 3);
  const w = writer(pino({ level: 'silent' }), `w-${randomUUID()}`, 100);
  assert.equal(await w.drainOnce(), 3);
  await assert.rejects(env.pool.query('delete from sales where id = $1', [s.id]), { code: '23503' });
  await assert.rejects(env.pool.query("update sales set id = id || '-renamed' where id = $1", [s.id]), {
    code: '23503',
  });
  // Its other columns stay editable.
  assert.equal((await env.pool.query('update sales set name = name where id = $1', [s.id])).rowCount, 1);

  // A batch in flight holds the sale's row: a delete waits for it, then finds its orders.
  // (Its order is written straight to Postgres: the sale leaves the registry so no pass walks it.)
  const empty = await newSale(env, { stock: 10, paymentWindowSeconds: 3600 });
  await env.redis.srem(SALES_REGISTRY, empty.id);
  const inserting = await env.pool.connect();
  try {
    await inserting.query('begin');
    const written = await writeOrders(inserting as unknown as Pool, empty.id, [
      { orderId: newOrderId(empty.id), seq: 1, qty: 1, purchasedAt: Date.now(), userId: 'u-inflight' },
    ]);
    assert.equal(written.length, 1);
    let settled = false;
    const deleting = env.pool.query('delete from sales where id = $1', [empty.id]).finally(() => {
      settled = true;
    });
    deleting.catch(() => {});
    await delay(300);
    assert.equal(settled, false, 'the delete waits for the insert in flight');
    await inserting.query('commit');
    await assert.rejects(deleting, { code: '23503' });
  } finally {
    inserting.release();
  }
  // A sale without orders can still go (the writer's tests take rows out that way).
  const unused = await newSale(env, { stock: 10, paymentWindowSeconds: 3600 });
  await env.redis.srem(SALES_REGISTRY, unused.id);
  assert.equal((await env.pool.query('delete from sales where id = $1', [unused.id])).rowCount, 1);
});

test('one bad sale: a sale missing in Postgres is set aside while every other sale drains; its winners wait intact in Redis; once its row exists they are written', async () => {
  const ours = [await sale(), await sale(), await sale(), await sale()];
  // The writer walks the registry in Redis's order: the first of ours it reaches is made the bad
  // one, so every healthy sale comes after it (what stalled them before).
  const registry = await env.redis.smembers(SALES_REGISTRY);
  const ids = new Set(ours.map((s) => s.id));
  const badId = registry.find((id) => ids.has(id))!;
  const healthy = ours.filter((s) => s.id !== badId);
  const restoreRow = await dropRow(badId);
  const badEntries = await queueWinners(badId, 300);
  for (const s of healthy) await queueWinners(s.id, 500);

  const { logger, lines } = capturingLogger();
  const w = writer(logger, 'isolating-writer', 100);
  w.start();
  try {
    await waitFor(
      'every healthy sale written',
      async () => {
        for (const s of healthy) if ((await orderCount(env, s.id)) !== 500) return false;
        return true;
      },
      30_000,
      50,
    );

    // Meanwhile the bad sale's winners are all still in Redis: in the winners list or in the
    // writer's processing list, none lost, none duplicated.
    const k = saleKeys(badId);
    const held = [
      ...(await env.redis.lrange(k.winners, 0, -1)),
      ...(await env.redis.lrange(k.processing('isolating-writer'), 0, -1)),
    ];
    assert.deepEqual(held.sort(), [...badEntries].sort());
    assert.equal(await env.redis.hlen(k.queued), 300);
    assert.equal(await orderCount(env, badId), 0);
    const failures = await saleFailures(badId);
    assert.ok(failures >= 1, 'its failures are counted');
    for (const s of healthy) assert.equal(await saleFailures(s.id), 0);
    // One alert per failed attempt, at error level, naming the sale. (Reading the counter awaits
    // only microtasks: the writer cannot fail again between the two reads.)
    const alerted = alerts(lines, badId);
    assert.equal(alerted.length, failures);
    assert.ok(alerted.every((l) => l.level === 50));

    await restoreRow();
    await waitFor(
      'the bad sale written once its row exists',
      async () => (await orderCount(env, badId)) === 300 && (await env.redis.hlen(k.queued)) === 0,
      30_000,
      50,
    );
    assert.equal(await env.redis.llen(k.winners), 0);
    assert.equal(await env.redis.exists(k.processing('isolating-writer')), 0);
    assert.ok(lines.some((l) => l.msg === 'sale writes again' && l.saleId === badId));
  } finally {
    await w.stop();
  }
});

test('one bad sale is tried once per backoff step, not on every pass; a Postgres that does not answer fails the whole pass and sets no sale aside', async () => {
  const [bad, good] = [await sale(), await sale()];
  const restoreRow = await dropRow(bad.id);
  const { logger, lines } = capturingLogger();

  // A Postgres nobody listens on: the pass fails as a whole, and no sale is blamed for it.
  await queueWinners(good.id, 20);
  const down = createPool(`postgres://postgres:flashsale@127.0.0.1:${await freePort()}/nowhere`, 1);
  try {
    await assert.rejects(
      writer(logger, 'cut-off-writer', 20, down).drainOnce(),
      (err) => classify(err) === 'unavailable',
    );
  } finally {
    await down.end();
  }
  assert.equal(await saleFailures(good.id), 0);
  assert.deepEqual(alerts(lines, good.id), []);
  assert.equal(
    await env.redis.llen(saleKeys(good.id).processing('cut-off-writer')),
    20,
    'the batch in hand stays in Redis',
  );

  // One sale that cannot be written: the writer's clock is passed in, three passes at one instant,
  // then one after any backoff step.
  await queueWinners(bad.id, 30);
  await queueWinners(good.id, 50);
  const w = writer(logger, 'stepping-writer', 20);
  const t0 = Date.now();
  await w.drainOnce(t0);
  assert.deepEqual(
    { failures: await saleFailures(bad.id), good: await orderCount(env, good.id) },
    { failures: 1, good: 20 },
  );
  await w.drainOnce(t0);
  await w.drainOnce(t0);
  assert.deepEqual(
    { failures: await saleFailures(bad.id), good: await orderCount(env, good.id) },
    { failures: 1, good: 50 },
    'still in its backoff: not tried again',
  );
  await w.drainOnce(t0 + 10_000);
  assert.equal(await saleFailures(bad.id), 2, 'due again after its backoff');
  assert.equal(alerts(lines, bad.id).length, 2);
  assert.equal(
    await env.redis.llen(saleKeys(bad.id).processing('stepping-writer')),
    20,
    'its batch is held, not dropped',
  );

  // Back to health: the cut-off writer's batch and the bad sale's are both written.
  await restoreRow();
  await writer(logger, 'cut-off-writer', 20).drainOnce();
  await w.drainOnce(t0 + 20_000);
  await w.drainOnce(t0 + 20_000);
  assert.deepEqual({ bad: await orderCount(env, bad.id), good: await orderCount(env, good.id) }, { bad: 30, good: 70 });
});

/** Retries as in production, with the backoff shortened so the test does not wait seconds. */
const FAST: RetryOptions = { maxBugs: 5, baseMs: 5, capMs: 20 };
const passFailures = (lines: Record<string, unknown>[]) =>
  lines.filter((l) => String(l.msg).startsWith('order writer pass failed'));

test('a bug is retried a few times in a row, each logged with its stack, then the writer gives up (failed rejects) and holds its batch', async () => {
  const s = await sale();
  await queueWinners(s.id, 10);
  // Real Redis and Postgres, but every query fails the way a bug in our own code fails.
  const buggy = Object.assign(Object.create(env.pool) as Pool, {
    query: () => Promise.reject(new TypeError("Cannot read properties of undefined (reading 'rows')")),
  });
  const { logger, lines } = capturingLogger();
  const w = writer(logger, 'buggy-writer', 10, buggy, FAST);
  w.start();
  try {
    const outcome = await Promise.race([
      w.failed?.then(
        () => 'resolved',
        (err: unknown) => err,
      ),
      delay(10_000).then(() => 'still running'),
    ]);
    assert.ok(outcome instanceof TypeError, `the writer gave up with the bug: ${String(outcome)}`);
  } finally {
    await w.stop();
  }
  const failures = passFailures(lines);
  assert.equal(failures.length, FAST.maxBugs, 'retried until the bound, then stopped');
  assert.deepEqual(
    failures.map((l) => l.level),
    [50, 50, 50, 50, 60],
    'the last one is fatal',
  );
  for (const l of failures)
    assert.match(String((l.err as { stack?: string }).stack), /^TypeError: Cannot read properties/);
  assert.equal(await saleFailures(s.id), 0, 'no sale is set aside for a bug of the writer');
  assert.equal(await env.redis.llen(saleKeys(s.id).processing('buggy-writer')), 10, 'its batch stays in Redis');
  await writer(logger, 'buggy-writer', 10).drainOnce();
  assert.equal(await orderCount(env, s.id), 10);
});

test('a Postgres that is down is retried without limit: far past the bound for bugs, the writer keeps trying and has not given up', async () => {
  const s = await sale();
  await queueWinners(s.id, 10);
  const down = createPool(`postgres://postgres:flashsale@127.0.0.1:${await freePort()}/nowhere`, 1);
  const { logger, lines } = capturingLogger();
  const w = writer(logger, 'waiting-writer', 10, down, FAST);
  let gaveUp = false;
  w.failed?.catch(() => (gaveUp = true));
  w.start();
  try {
    await waitFor('many failed passes', async () => passFailures(lines).length >= 4 * FAST.maxBugs, 20_000, 10);
    assert.equal(gaveUp, false);
    assert.ok(passFailures(lines).every((l) => l.level === 50 && l.failure === 'unavailable'));
  } finally {
    await w.stop();
    await down.end();
  }
  assert.equal(gaveUp, false);
  assert.equal(typeof w.failed?.then, 'function', 'the writer has a failure to report');
  await writer(logger, 'waiting-writer', 10).drainOnce();
  assert.equal(await orderCount(env, s.id), 10);
});
