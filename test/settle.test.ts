// Past sales cost nothing: a sale that has ended with every order final is settled by the replay
// (settled_at in Postgres, then out of the Redis registry), after which no per-tick loop walks it
// and the replay no longer reconciles it. A sale Redis sells that Postgres lacks is reported.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Cluster as RedisCluster } from 'ioredis';
import { pino } from 'pino';
import { cancelOrder } from '../shared/orders/cancel.js';
import { closeOrders, restore } from '../shared/orders/close.js';
import { closeDue, type ClosedOrder } from '../shared/orders/queries.js';
import { checkInvariants } from '../shared/checks/invariants.js';
import { SALES_REGISTRY, saleKeys } from '../shared/redis/keys.js';
import { ExpiryListener } from '../shared/pipeline/listener.js';
import type { Logger } from '../shared/runtime/logger.js';
import { metrics } from '../shared/runtime/metrics.js';
import { saleNode } from '../shared/redis/connect.js';
import { purchaseScript, type LoadOptions } from '../shared/sales/scripts.js';
import { claimBatch } from '../shared/pipeline/writer-scripts.js';
import { restoreStocks } from '../shared/orders/scripts.js';
import { PassSummary, replayOnce } from '../shared/pipeline/replay.js';
import { loadSaleIntoRedis, parseSaleInput, type Sale } from '../shared/sales/sale.js';
import { settleSales } from '../shared/sales/settle.js';
import { OrderWriter } from '../shared/pipeline/writer.js';
import { startCluster } from '../tools/redis-cluster.js';
import { buildTestApp } from './support/api.js';
import { cli } from './support/cli.js';
import { testEnv, type TestEnv } from './support/env.js';
import { countBy, newSale, runConcurrently, SALE_PRICE, waitFor, drainWriter } from './support/fixtures.js';
import { injector, outcome } from './support/http.js';
import { stateSnapshot } from './support/snapshot.js';
import { ADMIN_TOKEN } from './support/tokens.js';

let env: TestEnv;

before(async () => {
  env = await testEnv();
});
after(async () => {
  await env.close();
});

const HOUR = 3_600_000;
const iso = (ms: number) => new Date(ms).toISOString();

/** A sale that ran from two hours ago until `endedMsAgo` ago (an hour by default). */
function endedSale(
  e: TestEnv,
  fields: Record<string, unknown> = {},
  endedMsAgo = HOUR,
  load: LoadOptions = {},
): Promise<Sale> {
  const now = Date.now();
  return newSale(
    e,
    { stock: 10, paymentWindowSeconds: 3600, startsAt: iso(now - 2 * HOUR), endsAt: iso(now - endedMsAgo), ...fields },
    load,
  );
}

/**
 * Runs `buying` as if the ended sale were still open: purchase.lua judges by Redis's clock, so the
 * sale's end in Redis is put an hour ahead meanwhile, then back.
 */
async function whileOpen<T>(redis: TestEnv['redis'], sale: Sale, buying: () => Promise<T>): Promise<T> {
  const meta = saleKeys(sale.id).meta;
  await redis.hset(meta, 'endsAt', Date.now() + HOUR);
  try {
    return await buying();
  } finally {
    await redis.hset(meta, 'endsAt', sale.endsAt!.getTime());
  }
}

/** A purchase made while the sale was open (`open`: false when the caller holds it open already). */
async function buy(sale: Sale, userId: string, open = true): Promise<string> {
  const orderId = `${sale.id}.${randomUUID()}`;
  const purchase = () =>
    purchaseScript(env.redis, { saleId: sale.id, userId, qty: 1, orderId, buyCountTtlSeconds: 3600 });
  const [code] = open ? await whileOpen(env.redis, sale, purchase) : await purchase();
  assert.equal(code, 1);
  return orderId;
}

/** Writes every queued winner; a 1 ms lease, so no lease is left running afterwards. */
async function drain(e: TestEnv = env): Promise<void> {
  await drainWriter(e, 'w-test');
}

const pay = (id: string) =>
  env.pool.query(`update orders set status = 'paid', paid_at = now() where id = $1 and status = 'pending'`, [id]);

/** Closes an order now; its stock comes back only if `andRestore`. */
async function expire(id: string, andRestore = true): Promise<ClosedOrder[]> {
  await env.pool.query('update orders set expires_at = now() where id = $1', [id]);
  const closed = await closeDue(env.pool, [id]);
  assert.equal(closed.length, 1);
  if (andRestore) assert.equal(await restore(env.pool, env.redis, closed), 1);
  return closed;
}

const inRegistry = async (id: string) => (await env.redis.sismember(SALES_REGISTRY, id)) === 1;
const settledAt = async (id: string) =>
  (await env.pool.query<{ settled_at: Date | null }>('select settled_at from sales where id = $1', [id])).rows[0]!
    .settled_at;

interface Line {
  level: number;
  msg: string;
  alert?: string;
  reconciliation?: { saleId: string };
  passes?: number;
  salesChecked?: number;
  violations?: number;
  unregistered?: number;
}

/** A logger that keeps every line, down to debug. */
function capture(): { logger: Logger; lines: Line[] } {
  const lines: Line[] = [];
  return { lines, logger: pino({ level: 'debug' }, { write: (s: string) => void lines.push(JSON.parse(s) as Line) }) };
}

const failures = async (sale: string) =>
  (await metrics.reconciliationFailures.get()).values.find((v) => v.labels.sale === sale)?.value ?? 0;

test('reconciliation: a sale in the Redis registry with no row in Postgres is reported by the replay and by check (exit 3)', async () => {
  const ghost = parseSaleInput({ id: `ghost-${process.pid}`, name: 'Redis only', stock: 5, ...SALE_PRICE });
  await loadSaleIntoRedis(env.redis, ghost);
  // A sale being created is in the registry a moment before its row commits: never reported.
  const creating = await env.pool.connect();
  const born = parseSaleInput({ id: `born-${process.pid}`, name: 'Being created', stock: 5, ...SALE_PRICE });
  try {
    await creating.query('begin');
    await creating.query('insert into sales (id, name, stock) values ($1, $2, $3)', [born.id, born.name, born.stock]);
    await loadSaleIntoRedis(env.redis, born);

    const { logger, lines } = capture();
    const before = await failures(ghost.id);
    const pass = replayOnce({ pool: env.pool, redis: env.redis, logger });
    // The replay's probe waits on the uncommitted row; commit only once it does.
    await waitFor(
      'the probe to wait for the creating transaction',
      async () =>
        (
          await env.pool.query(
            `select 1 from pg_stat_activity where wait_event_type = 'Lock' and datname = current_database()`,
          )
        ).rowCount! > 0,
    );
    await creating.query('commit');
    const report = await pass;

    const r = report.reconciliations.find((x) => x.saleId === ghost.id);
    assert.equal(r?.holds, false);
    assert.equal(r?.missingInPostgres, true);
    assert.equal(r?.available, 5);
    assert.ok(
      !report.reconciliations.some((x) => x.saleId === born.id),
      'the sale created meanwhile is not reported missing',
    );
    const alerts = lines.filter((l) => l.alert === 'SALE_MISSING_IN_POSTGRES');
    assert.deepEqual(
      alerts.map((l) => [l.level, l.reconciliation?.saleId]),
      [[50, ghost.id]],
    );
    assert.equal(await failures(ghost.id), before + 1);

    const once = await cli(env, ['replay', '--once']);
    assert.equal(once.code, 3, once.stderr);
    const check = await cli(env, ['check', '--json']);
    assert.equal(check.code, 3, check.stderr);
    assert.deepEqual(JSON.parse(check.stdout).violations, [
      { sale: ghost.id, invariant: 'sale_exists', detail: 'in the Redis registry, no such sale in Postgres' },
    ]);
  } finally {
    await creating.query('rollback').catch(() => {});
    creating.release();
    // Later tests see only their own sales.
    await env.redis.srem(SALES_REGISTRY, ghost.id, born.id);
    await env.pool.query('delete from sales where id = $1', [born.id]);
  }
  assert.equal((await checkInvariants(env.pool, env.redis, { replayIntervalMs: 5000 })).violations.length, 0);
});

test('settle: ended sales whose orders are all final are settled in one pass and leave the registry; their stock stays readable', async () => {
  const a = await endedSale(env);
  const ids = [await buy(a, 'u1'), await buy(a, 'u2'), await buy(a, 'u3')];
  await drain();
  await pay(ids[0]!);
  await pay(ids[1]!);
  await expire(ids[2]!);
  const b = await endedSale(env);

  const report = await replayOnce({ pool: env.pool, redis: env.redis, logger: env.logger });
  assert.equal(report.settled, 2);
  for (const sale of [a, b]) {
    assert.ok(report.reconciliations.find((r) => r.saleId === sale.id)?.holds, 'reconciled (and held) before settling');
    assert.ok(await settledAt(sale.id), `${sale.id} has settled_at`);
    assert.equal(await inRegistry(sale.id), false, `${sale.id} left the registry`);
  }
  assert.equal(await env.redis.get(saleKeys(a.id).available), '8', 'the buyer page still reads available');
  assert.equal(await env.redis.get(saleKeys(b.id).available), '10');
});

test("settle: a waiting room's places, state and passes go with the rest of a settled sale", async () => {
  const sale = await endedSale(env, { admission: 'queue' });
  const k = saleKeys(sale.id);
  // What a room leaves behind: places, the admitted count, a used pass and one that ran out.
  await env.redis.zadd(k.queue, 0.25, 'w1', 0.5, 'w2', 2, 'w3');
  await env.redis.hset(k.room, 'phase', 'open', 'admitted', 2, 'expired', 1);
  await env.redis.zadd(k.passes, 0, 'w1');
  assert.ok(
    (await replayOnce({ pool: env.pool, redis: env.redis, logger: env.logger })).reconciliations.find(
      (r) => r.saleId === sale.id,
    )?.holds,
  );
  assert.ok(await settledAt(sale.id));
  // Nothing was bought, so no purchase counter either.
  assert.deepEqual(
    (await saleMemory(env, sale.id)).keys,
    settledKeys(sale.id).filter((key) => key !== k.seq),
  );
});

test("settle: a draw's copy of its entrants in Redis goes with the rest of a settled sale; its entries stay in Postgres", async () => {
  const now = Date.now();
  const sale = await endedSale(env, {
    admission: 'draw',
    entriesOpenAt: iso(now - 2 * HOUR),
    entriesCloseAt: iso(now - 1.5 * HOUR),
    backfillUntil: iso(now - 1.25 * HOUR),
  });
  const k = saleKeys(sale.id);
  await env.pool.query("insert into draw_entries (sale_id, buyer, ticket) values ($1, 'e1', 'x'), ($1, 'e2', 'y')", [
    sale.id,
  ]);
  await env.redis.sadd(k.entries, 'e1', 'e2');
  assert.ok(
    (await replayOnce({ pool: env.pool, redis: env.redis, logger: env.logger })).reconciliations.find(
      (r) => r.saleId === sale.id,
    )?.holds,
  );
  assert.ok(await settledAt(sale.id));
  assert.equal(await env.redis.exists(k.entries), 0);
  assert.deepEqual(
    (await saleMemory(env, sale.id)).keys,
    settledKeys(sale.id).filter((key) => key !== k.seq),
  );
  assert.equal(
    (await env.pool.query('select count(*)::int as n from draw_entries where sale_id = $1', [sale.id])).rows[0].n,
    2,
  );
});

test('settle: ended sales with work left stay until it is done, then settle; open and no-end sales stay', async () => {
  const pending = await endedSale(env);
  const queued = await endedSale(env);
  const held = await endedSale(env);
  const leased = await endedSale(env);
  const violated = await endedSale(env);
  const recent = await endedSale(env, {}, 10_000);
  const open = await newSale(env, { startsAt: iso(Date.now() - HOUR), endsAt: iso(Date.now() + HOUR) });
  const noEnd = await newSale(env, { startsAt: iso(Date.now() - HOUR) });

  const pendingId = await buy(pending, 'u1');
  const leasedId = await buy(leased, 'u1');
  await buy(violated, 'u1');
  await drain();
  await pay(leasedId);
  await env.pool.query(`update orders set status = 'paid', paid_at = now() where sale_id = $1`, [violated.id]);
  await env.redis.zadd(saleKeys(leased.id).writers, Date.now() + HOUR, 'w-alive');
  await env.redis.incr(saleKeys(violated.id).available);
  await buy(queued, 'u1');
  await buy(held, 'u1');
  assert.equal((await claimBatch(env.redis, held.id, 'w-busy', 100, HOUR)).entries.length, 1);
  const all = [pending, queued, held, leased, violated, recent, open, noEnd];

  const first = await replayOnce({ pool: env.pool, redis: env.redis, logger: env.logger });
  assert.equal(first.settled, 0);
  for (const sale of all) {
    assert.equal(await inRegistry(sale.id), true, `${sale.id} stays in the registry`);
    assert.equal(await settledAt(sale.id), null, `${sale.id} is not settled`);
  }

  // The work done: paid, written and paid, the busy writer's lease run out (the next writer
  // re-drives its batch), the live lease gone, the stock counted right, the end over a minute ago.
  await pay(pendingId);
  await env.redis.zadd(saleKeys(held.id).writers, Date.now() - 1, 'w-busy');
  await drain();
  for (const sale of [queued, held])
    await env.pool.query(`update orders set status = 'paid', paid_at = now() where sale_id = $1`, [sale.id]);
  await env.redis.zadd(saleKeys(leased.id).writers, Date.now() - 1, 'w-alive');
  await env.redis.decr(saleKeys(violated.id).available);
  await env.pool.query(`update sales set ends_at = now() - interval '61 seconds' where id = $1`, [recent.id]);

  const second = await replayOnce({ pool: env.pool, redis: env.redis, logger: env.logger });
  assert.equal(second.settled, 6);
  for (const sale of [pending, queued, held, leased, violated, recent]) {
    assert.equal(await inRegistry(sale.id), false, `${sale.id} left the registry`);
    assert.ok(await settledAt(sale.id), `${sale.id} is settled`);
  }
  for (const sale of [open, noEnd]) {
    assert.equal(await inRegistry(sale.id), true, `${sale.id} stays`);
    assert.equal(await settledAt(sale.id), null);
  }
  // A sale without an end can never be marked settled, whoever tries.
  await assert.rejects(
    env.pool.query('update sales set settled_at = now() where id = $1', [noEnd.id]),
    /sales_settled_after_end/,
  );
});

test('settle: an expired order whose stock is not yet back keeps its sale; restored, the sale settles', async () => {
  const sale = await endedSale(env);
  const id = await buy(sale, 'u1');
  await drain();
  const closed = await expire(id, false);
  const held = new Set([sale.id]);
  assert.deepEqual(await settleSales(env.pool, env.redis, [sale.id], held), { settled: [], unregistered: [] });
  assert.equal(await inRegistry(sale.id), true);
  assert.equal(await restore(env.pool, env.redis, closed), 1);
  assert.deepEqual(await settleSales(env.pool, env.redis, [sale.id], held), { settled: [sale.id], unregistered: [] });
  assert.equal(await inRegistry(sale.id), false);
});

test('settle: a settled sale is not reconciled again, passes log one info summary a minute at most, and a settled sale back in the registry is dropped', async () => {
  const sale = await endedSale(env);
  const live = await newSale(env, { startsAt: iso(Date.now() - HOUR), endsAt: iso(Date.now() + HOUR) });
  assert.equal((await replayOnce({ pool: env.pool, redis: env.redis, logger: env.logger })).settled, 1);

  const { logger, lines } = capture();
  let clock = 0;
  const summary = new PassSummary(60_000, () => clock);
  const info = () => lines.filter((l) => l.level >= 30);
  const quiet = await replayOnce({ pool: env.pool, redis: env.redis, logger, summary });
  const reconciled = quiet.reconciliations.map((r) => r.saleId);
  assert.ok(!reconciled.includes(sale.id), 'the settled sale is not reconciled');
  assert.ok(reconciled.includes(live.id), 'an open sale still is');
  const unsettled = await env.pool.query<{ id: string }>('select id from sales where settled_at is null order by id');
  assert.deepEqual(
    [...reconciled].sort(),
    unsettled.rows.map((r) => r.id),
    'exactly the unsettled sales',
  );
  assert.deepEqual(
    info().map((l) => [l.level, l.msg, l.passes, l.salesChecked, l.violations]),
    [[30, 'replay summary', 1, reconciled.length, 0]],
    'the first pass: one summary at info, nothing at error',
  );
  assert.deepEqual(
    lines
      .filter((l) => l.msg === 'reconciliation ok')
      .map((l) => [l.level, l.reconciliation?.saleId])
      .sort(),
    reconciled.map((id) => [20, id]).sort(),
    'one debug line per reconciled sale',
  );

  // A crash between settled_at and the SREM (or a reload) leaves it in the registry: the next pass drops it.
  await env.redis.sadd(SALES_REGISTRY, sale.id);
  clock += 59_000;
  const next = await replayOnce({ pool: env.pool, redis: env.redis, logger, summary });
  assert.equal(next.unregistered, 1);
  assert.equal(await inRegistry(sale.id), false);
  assert.equal(info().length, 1, 'no second summary within the minute');
  clock += 1_000;
  await replayOnce({ pool: env.pool, redis: env.redis, logger, summary });
  assert.deepEqual(
    info()
      .slice(1)
      .map((l) => [l.msg, l.passes, l.unregistered, l.violations]),
    [['replay summary', 2, 1, 0]],
    'a minute on, one line sums up both passes since the last',
  );
});

/** Every key of a sale (its hash tag), found by SCAN, and the sum of their MEMORY USAGE. */
async function saleMemory(e: TestEnv, saleId: string): Promise<{ keys: string[]; bytes: number }> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await e.redis.scan(cursor, 'MATCH', saleKeys(saleId).everyKey, 'COUNT', 1000);
    cursor = next;
    keys.push(...batch);
  } while (cursor !== '0');
  let bytes = 0;
  for (const key of keys) bytes += Number(await e.redis.memory('USAGE', key, 'SAMPLES', 0));
  return { keys: keys.sort(), bytes };
}

/** What a settled sale keeps: its stock counter, its rules and its purchase counter. */
const settledKeys = (id: string) => [saleKeys(id).available, saleKeys(id).meta, saleKeys(id).seq].sort();

test("settle: once its reconciliation holds, a settled sale's buyer counts, restored ids and units, cancel notes, purchased ids, deadlines and leftover expiry keys are deleted; nothing restores there again", async () => {
  const sale = await endedSale(env, { stock: 3000 });
  const open = await endedSale(env);
  // More buyers than one SCAN batch looks at.
  const users = Array.from({ length: 2500 }, (_, i) => `m${i}`);
  const ids = await whileOpen(env.redis, sale, () =>
    runConcurrently(users.length, 50, (i) => buy(sale, users[i]!, false)),
  );
  const openId = await buy(open, 'o1');
  await drain();
  const expired = (await Promise.all(ids.slice(0, 10).map((id) => expire(id)))).flat();
  for (let i = 10; i < 13; i++)
    assert.equal((await cancelOrder(env.pool, env.redis, ids[i]!, users[i]!, 3)).status, 'cancelled');
  const queuedId = await buy(sale, 'late-cancel');
  await cancelOrder(env.pool, env.redis, queuedId, 'late-cancel', 3);
  await drain();
  // Paid straight in Postgres: their expiry keys and deadlines stay behind, as a lost drop would leave them.
  await env.pool.query(`update orders set status = 'paid', paid_at = now() where sale_id = $1 and status = 'pending'`, [
    sale.id,
  ]);
  const before = await saleMemory(env, sale.id);
  assert.equal(
    await env.redis.hlen(saleKeys(sale.id).buyCounts),
    2487,
    'a count for every buyer still holding an order',
  );
  assert.deepEqual(
    before.keys.filter((k) => k.startsWith(saleKeys(sale.id).buysPrefix)),
    [],
    'none in the older format',
  );
  for (const k of [
    saleKeys(sale.id).buyCounts,
    saleKeys(sale.id).restored,
    saleKeys(sale.id).restoredQty,
    saleKeys(sale.id).cancels,
    saleKeys(sale.id).purchased,
    saleKeys(sale.id).deadlines,
  ]) {
    assert.ok(before.keys.includes(k), `${k} is there before`);
  }

  // A reconciliation that fails settles nothing and deletes nothing.
  await env.redis.incr(saleKeys(sale.id).available);
  assert.equal(
    (await replayOnce({ pool: env.pool, redis: env.redis, logger: env.logger })).reconciliations.find(
      (r) => r.saleId === sale.id,
    )?.holds,
    false,
  );
  const openKeys = async () => (await stateSnapshot(env, (k) => !k.startsWith(`{sale:${open.id}}`))).redis;
  const openState = await openKeys();
  assert.equal(await settledAt(sale.id), null);
  // (The pass re-drove the test writer's run-out lease, as any pass does.)
  assert.deepEqual(
    (await saleMemory(env, sale.id)).keys,
    before.keys.filter((k) => k !== saleKeys(sale.id).writers),
  );
  await env.redis.decr(saleKeys(sale.id).available);

  const report = await replayOnce({ pool: env.pool, redis: env.redis, logger: env.logger });
  assert.ok(report.reconciliations.find((r) => r.saleId === sale.id)?.holds);
  assert.ok(await settledAt(sale.id));
  const after = await saleMemory(env, sale.id);
  assert.deepEqual(after.keys, settledKeys(sale.id));
  assert.ok(after.bytes < 1024, `${after.bytes} B left of ${before.bytes} B`);
  console.log(
    `# a settled sale of ${users.length} buyers: ${before.bytes} B in ${before.keys.length} keys before, ${after.bytes} B in ${after.keys.length} after`,
  );
  assert.equal(await env.redis.get(saleKeys(sale.id).available), String(3000 - 2500 + 13));
  assert.equal(await env.redis.hget(saleKeys(sale.id).meta, 'settled'), '1');
  // The sale with an order still pending is not settled and keeps every key, byte for byte.
  assert.deepEqual(await openKeys(), openState);
  assert.equal(await settledAt(open.id), null);

  // A late sweep or a duplicate event finds nothing to give back, and writes nothing.
  assert.equal(await restore(env.pool, env.redis, expired), 0);
  assert.deepEqual(await restoreStocks(env.redis, sale.id, [{ orderId: ids[20]!, userId: users[20]!, qty: 1 }]), [
    false,
  ]);
  assert.deepEqual((await closeOrders(env.pool, env.redis, ids.slice(0, 10), 'listener')).closed, []);
  assert.deepEqual(await saleMemory(env, sale.id), after);
  // Its Postgres record still reconciles: nothing restoring, every unit available or paid. (Paid
  // here without payment rows: the next test pays through the API and checks every invariant.)
  const checked = await checkInvariants(env.pool, env.redis, { saleIds: [sale.id], replayIntervalMs: 5000 });
  assert.deepEqual(
    checked.violations.filter((v) => v.invariant !== 'payments_match_orders'),
    [],
  );

  // Back in the registry with counts again, in both formats (a crash between settling and the registry, a reload): forgotten and dropped.
  await env.redis.sadd(SALES_REGISTRY, sale.id);
  await env.redis.set(saleKeys(sale.id).buys('m0'), '1');
  await env.redis.hset(saleKeys(sale.id).buyCounts, 'm1', '1');
  assert.equal((await replayOnce({ pool: env.pool, redis: env.redis, logger: env.logger })).unregistered, 1);
  assert.deepEqual((await saleMemory(env, sale.id)).keys, settledKeys(sale.id));
  await env.pool.query(`update orders set status = 'paid', paid_at = now() where id = $1`, [openId]);
});

test('settle: 1,000 buy-cancel cycles, the sale ended and settled: its Redis memory is back under 1 KB; it still reads, refuses purchases as ended and answers its orders', async () => {
  const api = await buildTestApp(env);
  const inject = injector(api.app);
  try {
    const sale = await newSale(env, {
      stock: 400,
      perUserLimit: 1,
      paymentWindowSeconds: 3600,
      startsAt: iso(Date.now() - HOUR),
      endsAt: iso(Date.now() + HOUR),
    });
    const call = (method: string, path: string, user?: string) =>
      inject(method, path, { user, ...(method === 'POST' && path.endsWith('/purchases') ? { body: { qty: 1 } } : {}) });
    const buyOne = async (user: string) => {
      const r = await call('POST', `/api/sales/${sale.id}/purchases`, user);
      assert.equal(r.status, 202, outcome(r));
      return r.body.orderId as string;
    };
    // 334 buyers, 3 cycles each (MAX_CANCELS_PER_SALE): pending, then queued, then queued while the writer runs.
    const buyers = Array.from({ length: 334 }, (_, i) => `c${i}`);
    let cycles = 0;
    let lastCancelled = '';
    for (const round of [0, 1, 2]) {
      const these = buyers.slice(0, Math.min(buyers.length, 1000 - cycles));
      const ids = await runConcurrently(these.length, 20, (i) => buyOne(these[i]!));
      if (round === 0) await drain();
      const writing = round === 2 ? drain() : Promise.resolve();
      const answers = await runConcurrently(these.length, 20, (i) =>
        call('POST', `/api/orders/${ids[i]}/cancel`, these[i]),
      );
      await writing;
      assert.deepEqual(countBy(answers, outcome), { '200 cancelled': these.length }, `round ${round}`);
      cycles += these.length;
      lastCancelled = ids[0]!;
    }
    assert.equal(cycles, 1000);
    await drain();
    // Buyers who keep what they bought: their counts stay until the sale settles.
    const payers = Array.from({ length: 50 }, (_, i) => `p${i}`);
    const paid = await runConcurrently(payers.length, 10, (i) => buyOne(payers[i]!));
    await drain();
    for (const [i, id] of paid.entries())
      assert.equal(outcome(await call('POST', `/api/orders/${id}/pay`, payers[i])), '200 paid');

    const ended = await inject('POST', `/api/sales/${sale.id}/end`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    assert.equal(ended.status, 200, outcome(ended));
    await env.pool.query(`update sales set ends_at = now() - interval '61 seconds' where id = $1`, [sale.id]);
    const before = await saleMemory(env, sale.id);
    const report = await replayOnce({ pool: env.pool, redis: env.redis, logger: env.logger });
    assert.ok(report.reconciliations.find((r) => r.saleId === sale.id)?.holds);
    assert.ok(await settledAt(sale.id), 'settled');
    const after = await saleMemory(env, sale.id);
    console.log(
      `# 1,000 buy-cancel cycles and 50 paid orders: ${before.bytes} B in ${before.keys.length} keys before settling, ${after.bytes} B in ${after.keys.length} after`,
    );
    assert.deepEqual(after.keys, settledKeys(sale.id));
    assert.ok(after.bytes < 1024, `${after.bytes} B`);

    const view = await call('GET', `/api/sales/${sale.id}`);
    assert.equal(view.status, 200, outcome(view));
    assert.deepEqual([view.body.available, view.body.state, view.body.stock], [350, 'ended', 400]);
    assert.equal(outcome(await call('POST', `/api/sales/${sale.id}/purchases`, 'newcomer')), '403 ended');
    assert.equal(outcome(await call('POST', `/api/sales/${sale.id}/purchases`, 'c0')), '403 ended');
    assert.equal(outcome(await call('POST', `/api/orders/${lastCancelled}/cancel`, 'c0')), '200 cancelled');
    assert.equal((await call('GET', `/api/orders/${paid[0]}`, 'p0')).body.status, 'paid');
    assert.deepEqual((await saleMemory(env, sale.id)).keys, settledKeys(sale.id), 'answering them wrote nothing');
    assert.deepEqual(
      (await checkInvariants(env.pool, env.redis, { saleIds: [sale.id], replayIntervalMs: 5000 })).violations,
      [],
    );
  } finally {
    await api.close();
  }
});

test("settle: on a Redis Cluster, each settled sale's buyer counts are found on the master serving its slot and deleted", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'flashsale-cluster-'));
  const cluster = await startCluster(dir, { masters: 3, replicasPerMaster: 0 });
  const own = await testEnv({}, { redis: { redisClusterNodes: cluster.seeds } });
  try {
    // Enough sales that they land on different masters; half keep a key per buyer's count (LEGACY_BUY_COUNTS), half the counts hash.
    const sales = await Promise.all(
      Array.from({ length: 6 }, (_, i) => endedSale(own, { stock: 300 }, HOUR, { legacyBuyCounts: i % 2 === 1 })),
    );
    const legacy = sales.filter((_, i) => i % 2 === 1);
    for (const sale of sales) {
      await whileOpen(own.redis, sale, () =>
        runConcurrently(300, 50, async (i) => {
          const [code] = await purchaseScript(own.redis, {
            saleId: sale.id,
            userId: `u${i}`,
            qty: 1,
            orderId: `${sale.id}.${randomUUID()}`,
            buyCountTtlSeconds: 3600,
          });
          assert.equal(code, 1);
        }),
      );
    }
    await drain(own);
    await own.pool.query(`update orders set status = 'paid', paid_at = now() where status = 'pending'`);
    /** Every key of a sale on every master (a SCAN answers for one node only). */
    const keysOf = async (id: string) =>
      (
        await Promise.all(
          (own.redis as RedisCluster).nodes('master').map(async (node) => {
            const found: string[] = [];
            let cursor = '0';
            do {
              const [next, batch] = await node.scan(cursor, 'MATCH', saleKeys(id).everyKey, 'COUNT', 1000);
              cursor = next;
              found.push(...batch);
            } while (cursor !== '0');
            return found;
          }),
        )
      )
        .flat()
        .sort();
    const masters = new Set(sales.map((sale) => saleNode(own.redis, sale.id)!.options.port));
    assert.ok(masters.size > 1, 'the sales live on more than one master');
    for (const sale of sales) {
      const keys = await keysOf(sale.id);
      const perBuyer = keys.filter((k) => k.startsWith(saleKeys(sale.id).buysPrefix)).length;
      if (legacy.includes(sale)) assert.equal(perBuyer, 300, `${sale.id}: a key per buyer's count before`);
      else
        assert.deepEqual(
          [perBuyer, keys.includes(saleKeys(sale.id).buyCounts)],
          [0, true],
          `${sale.id}: the counts hash before`,
        );
    }
    assert.equal((await replayOnce({ pool: own.pool, redis: own.redis, logger: own.logger })).settled, sales.length);
    for (const sale of sales) assert.deepEqual(await keysOf(sale.id), settledKeys(sale.id), sale.id);
  } finally {
    await own.close();
    await cluster.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

/**
 * Calls since the last CONFIG RESETSTAT of the commands the per-sale loops send, and of SMEMBERS
 * (one per tick). A script's first call may be an EVAL (after NOSCRIPT): both count as scripts.
 */
async function calls(e: TestEnv): Promise<{ scripts: number; llen: number; zrangebyscore: number; smembers: number }> {
  const info = await e.redis.info('commandstats');
  const n = (name: string) => Number(new RegExp(`^cmdstat_${name}:calls=(\\d+)`, 'm').exec(info)?.[1] ?? 0);
  return {
    scripts: n('evalsha') + n('eval'),
    llen: n('llen'),
    zrangebyscore: n('zrangebyscore'),
    smembers: n('smembers'),
  };
}

test('settle: settled sales cost the writer and the listener no Redis calls per tick', async () => {
  // A Redis and a database of its own: only this test's sales are in the registry.
  const own = await testEnv();
  try {
    await newSale(own, { startsAt: iso(Date.now() - HOUR), endsAt: iso(Date.now() + HOUR) });

    /** Redis calls of K writer passes (a fresh writer each time: its first pass also recovers and gauges). */
    const writerCalls = async () => {
      await own.redis.config('RESETSTAT');
      const writer = new OrderWriter({
        pool: own.pool,
        redis: own.redis,
        logger: own.logger,
        config: { ...own.config, writerId: 'w-idle' },
      });
      for (let i = 0; i < 20; i++) await writer.drainOnce();
      return calls(own);
    };
    /** The listener's nudger running until it has ticked 20 times; returns per-sale calls per tick. */
    const listenerCallsPerTick = async () => {
      const listener = new ExpiryListener({
        pool: own.pool,
        redis: own.redis,
        logger: own.logger,
        config: { expiryNudgeMs: 5 },
      });
      await listener.start();
      await own.redis.config('RESETSTAT');
      const seen = await waitFor('20 nudger ticks', async () => {
        const c = await calls(own);
        return c.smembers >= 20 && c;
      });
      await listener.stop();
      // Rounded: the counters are reset and read while the nudger runs, so the first or the last
      // tick may be counted by its SMEMBERS without its per-sale calls, or the other way round.
      return Math.round((seen.scripts + seen.llen + seen.zrangebyscore) / seen.smembers);
    };

    const baseWriter = await writerCalls();
    const baseListener = await listenerCallsPerTick();
    assert.ok(baseListener >= 1, 'the nudger touches the one open sale each tick');

    // 100 past sales, each with an order closed and restored, as every stack had them before.
    const past: Sale[] = [];
    for (let i = 0; i < 100; i++) past.push(await endedSale(own));
    for (const sale of past.slice(0, 10)) {
      const orderId = `${sale.id}.${randomUUID()}`;
      await whileOpen(own.redis, sale, () =>
        purchaseScript(own.redis, { saleId: sale.id, userId: 'u1', qty: 1, orderId, buyCountTtlSeconds: 3600 }),
      );
    }
    await drain(own);
    await own.pool.query(`update orders set status = 'paid', paid_at = now() where status = 'pending'`);
    assert.equal((await replayOnce({ pool: own.pool, redis: own.redis, logger: own.logger })).settled, 100);

    assert.deepEqual(await writerCalls(), baseWriter, 'the writer makes exactly the calls it made without them');
    assert.ok(
      (await listenerCallsPerTick()) <= baseListener,
      'the nudger makes no more calls per tick than without them',
    );
  } finally {
    await own.close();
  }
});
