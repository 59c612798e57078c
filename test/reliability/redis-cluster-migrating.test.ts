// A sale's slot held in the middle of a reshard: MIGRATING on its master, IMPORTING on the new one,
// the sale-wide keys, half the expiry keys and one writer's batch moved, the rest (the buyers'
// counts hash among them) left behind. The writer's ack, a cancel's and the writer's restores, the nudger and the
// reconciliation's snapshot all run against it. Each either does its whole work where the keys are
// or refuses as "unavailable" having changed nothing; once the slot is finished, their callers'
// retries (the replay's sweep, the writer's next pass) leave every buyer's count, the stock and the
// indexes exactly right. Scripts that build key names from a prefix are the danger: Redis checks
// only declared keys, and on the importing node an undeclared key still on the old one reads as
// missing (a buyer's count read as 0 and never given back).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { Cluster as RedisCluster } from 'ioredis';
import { cancelOrder } from '../../shared/orders/cancel.js';
import { classify } from '../../shared/runtime/errors.js';
import { closeOrders, sweepOverdue } from '../../shared/orders/close.js';
import { newOrderId, parseWinner } from '../../shared/runtime/ids.js';
import { saleKeys } from '../../shared/redis/keys.js';
import { writeOrders } from '../../shared/orders/queries.js';
import { reconcile } from '../../shared/checks/reconcile.js';
import { purchaseScript } from '../../shared/sales/scripts.js';
import { acknowledgeBatch, claimBatch } from '../../shared/pipeline/writer-scripts.js';
import { touchDue } from '../../shared/orders/scripts.js';
import { snapshotSale } from '../../shared/pipeline/replay-scripts.js';
import { ask, startCluster, type LocalCluster } from '../../tools/redis-cluster.js';
import { testEnv, type TestEnv } from '../support/env.js';
import { buyCount } from '../support/fixtures.js';
import { checkSale } from '../support/scenario.js';
import { addr, salesOnEveryMaster } from '../support/topology.js';

let topo: LocalCluster;
let env: TestEnv;
let dir = '';

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'flashsale-migrating-'));
  topo = await startCluster(dir, { masters: 3, replicasPerMaster: 0 });
  env = await testEnv({}, { redis: { redisClusterNodes: topo.seeds } });
});

after(async () => {
  await env?.close();
  await topo?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const STOCK = 100;
const USERS = Array.from({ length: 10 }, (_, i) => `u${i}`);

test("cluster: a slot held mid-migration loses and doubles no buyer's quota or unit, whatever runs against it", async () => {
  const [src, dst] = await topo.masters();
  const [sale] = (
    await salesOnEveryMaster(
      env,
      1,
      'migrating',
      { stock: STOCK, perUserLimit: 4, maxPerOrder: 2, paymentWindowSeconds: 300 },
      [addr(src!)],
    )
  ).get(addr(src!))!;
  const saleId = sale!.id;
  const k = saleKeys(saleId);
  const owner = new Map<string, string>();
  const buy = async (user: string) => {
    const orderId = newOrderId(saleId);
    const [code] = await purchaseScript(env.redis, { saleId, userId: user, qty: 1, orderId, buyCountTtlSeconds: 60 });
    assert.equal(code, 1);
    owner.set(orderId, user);
    return orderId;
  };
  // Two rounds of one unit for each buyer, then two for `q` that stay unclaimed in the winners list.
  const first = new Map<string, string>();
  for (const u of USERS) first.set(u, await buy(u));
  for (const u of USERS) await buy(u);
  for (let i = 0; i < 2; i++) await buy('q');
  // w1's batch (the first round) is written and acknowledged; w2's (u0-u4's second) and w3's
  // (u5-u9's second) are written and wait for their ack.
  const writeBatch = async (writer: string, size: number) => {
    const winners = (await claimBatch(env.redis, saleId, writer, size, 600_000)).entries.map((e) => parseWinner(e));
    assert.equal(winners.length, size);
    return { writer, rows: await writeOrders(env.pool, saleId, winners) };
  };
  const ack = async (b: { writer: string; rows: { id: string }[] }) => {
    const pending = (
      await env.pool.query<{ id: string; ms: string }>(
        `select id, (extract(epoch from expires_at) * 1000)::int8 as ms from orders where id = any($1::text[]) and status = 'pending'`,
        [b.rows.map((r) => r.id)],
      )
    ).rows;
    return (
      await acknowledgeBatch(
        env.redis,
        saleId,
        b.writer,
        pending.map((r) => ({ orderId: r.id, expiresAt: Number(r.ms) })),
        b.rows.map((r) => r.id),
      )
    ).set;
  };
  const w1 = await writeBatch('w1', 10);
  assert.equal(await ack(w1), 10);
  const w2 = await writeBatch('w2', 5);
  const w3 = await writeBatch('w3', 5);
  // One cancel before the move, so the restored set and counter exist on the old master.
  const cancelled = [first.get('u9')!];
  await cancelOrder(env.pool, env.redis, cancelled[0]!, 'u9', 3);

  // The reshard, held open: sale-wide keys, w2's batch and u0-u4's expiry keys moved; the buyers'
  // counts, u5-u9's expiry keys and w3's batch still on the old master.
  const slot = await ask<number>(src!.port, 'CLUSTER', 'KEYSLOT', k.meta);
  const [srcId, dstId] = [
    await ask<string>(src!.port, 'CLUSTER', 'MYID'),
    await ask<string>(dst!.port, 'CLUSTER', 'MYID'),
  ];
  await ask(dst!.port, 'CLUSTER', 'SETSLOT', slot, 'IMPORTING', srcId);
  await ask(src!.port, 'CLUSTER', 'SETSLOT', slot, 'MIGRATING', dstId);
  const migrate = (keys: string[]) => ask(src!.port, 'MIGRATE', '127.0.0.1', dst!.port, '', 0, 5000, 'KEYS', ...keys);
  const moved = USERS.slice(0, 5);
  await migrate([
    k.meta,
    k.available,
    k.seq,
    k.winners,
    k.queued,
    k.purchased,
    k.deadlines,
    k.writers,
    k.restored,
    k.restoredQty,
    k.processing('w2'),
    ...moved.map((u) => k.expiry(first.get(u)!)),
  ]);
  assert.equal(await ask(src!.port, 'EXISTS', k.buyCounts), 1, 'the counts are still on the old master');

  // Everything that runs meanwhile either works or is refused as a dependency away (retried later).
  const refused: string[] = [];
  const attempt = async <T>(what: string, run: () => Promise<T>): Promise<T | undefined> => {
    try {
      return await run();
    } catch (err) {
      assert.equal(classify(err), 'unavailable', `${what}: ${(err as Error).message}`);
      refused.push(what);
      return undefined;
    }
  };
  let w2Acked = await attempt('ack w2', () => ack(w2));
  // A cancel of a buyer whose expiry key moved, one of a buyer's whose key did not; the writer
  // closing two orders whose deadline passed while queued (counts on the old master).
  for (const u of ['u0', 'u5']) {
    cancelled.push(first.get(u)!);
    await attempt(`cancel of ${u}'s order`, () => cancelOrder(env.pool, env.redis, first.get(u)!, u, 3));
  }
  const overdue = w3.rows.filter((r) => ['u7', 'u8'].includes(owner.get(r.id)!)).map((r) => r.id);
  await env.pool.query(`update orders set expires_at = now() - interval '1 second' where id = any($1::text[])`, [
    overdue,
  ]);
  cancelled.push(...overdue);
  await attempt('the writer closing overdue orders', () => closeOrders(env.pool, env.redis, overdue, 'writer'));
  // The nudger an hour ahead: every indexed deadline is due, and no expiry key is gone.
  const gone = await attempt('touch_due', () => touchDue(env.redis, saleId, 100, 1, 3_600_000));
  if (gone !== undefined) assert.equal(gone, 0, 'touch_due found keys gone that still exist on the old master');
  const snap = await attempt('snapshot', () => snapshotSale(env.redis, saleId));
  const unacked = [...w3.rows.map((r) => r.id), ...[...owner].filter(([, u]) => u === 'q').map(([id]) => id)];
  if (snap)
    assert.deepEqual(
      snap.entries.map((e) => parseWinner(e).orderId).sort(),
      unacked.sort(),
      'the snapshot holds every winner not yet acknowledged',
    );
  console.log(`[redis-cluster/migrating] refused while migrating: ${refused.join(', ') || 'nothing'}`);

  // The slot finished: the rest moved, every master told.
  const left = await ask<string[]>(src!.port, 'CLUSTER', 'GETKEYSINSLOT', slot, 1000);
  if (left.length > 0) await migrate(left);
  for (const m of [dst!, src!, ...(await topo.masters()).filter((n) => n.port !== src!.port && n.port !== dst!.port)])
    await ask(m.port, 'CLUSTER', 'SETSLOT', slot, 'NODE', dstId);
  await new Promise<void>((resolve, reject) =>
    (env.redis as RedisCluster).refreshSlotsCache((err) => (err ? reject(err) : resolve())),
  );

  // The callers' retries: the writer acks what it holds, the replay finishes the restores.
  if (w2Acked === undefined) w2Acked = await ack(w2);
  assert.equal(w2Acked, 5);
  assert.equal(await ack(w3), 3);
  await sweepOverdue(env.pool, env.redis, 'replay');
  assert.equal(await touchDue(env.redis, saleId, 100), 0);

  // Exactly: each buyer holds one unit per order still open; the stock is what they do not hold.
  const open = [...owner.keys()].filter((id) => !cancelled.includes(id));
  const held = new Map<string, number>();
  for (const id of open) held.set(owner.get(id)!, (held.get(owner.get(id)!) ?? 0) + 1);
  for (const u of [...USERS, 'q']) assert.equal(await buyCount(env.redis, saleId, u), held.get(u) ?? 0, `${u}'s count`);
  assert.equal(Number(await env.redis.get(k.available)), STOCK - open.length);
  assert.deepEqual((await env.redis.smembers(k.restored)).sort(), [...cancelled].sort());
  assert.equal(Number(await env.redis.get(k.restoredQty)), cancelled.length);
  const restoredRows = await env.pool.query<{ n: number }>(
    `select count(*)::int as n from orders where id = any($1::text[]) and restored_at is not null`,
    [cancelled],
  );
  assert.equal(restoredRows.rows[0]!.n, cancelled.length, 'every closed order recorded as restored');
  // Every pending order is indexed by its deadline with its expiry key set; every other id is in purchased.
  const pending = (
    await env.pool.query<{ id: string }>(`select id from orders where sale_id = $1 and status = 'pending'`, [saleId])
  ).rows.map((r) => r.id);
  const deadlines = new Set(await env.redis.zrange(k.deadlines, '0', '-1'));
  const purchased = new Set(await env.redis.smembers(k.purchased));
  for (const id of pending) {
    assert.ok(deadlines.has(id) && !purchased.has(id), `pending ${id} indexed by its deadline only`);
    assert.equal(await env.redis.exists(k.expiry(id)), 1, `pending ${id} has its expiry key`);
  }
  for (const id of owner.keys())
    assert.ok(
      deadlines.has(id) !== purchased.has(id) || cancelled.includes(id),
      `${id} in exactly one of deadlines and purchased`,
    );
  assert.ok((await reconcile(env.pool, env.redis, saleId, STOCK)).holds);
  assert.deepEqual((await checkSale(env, saleId, [...owner.keys()])).violations, []);
});
