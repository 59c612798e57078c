// Buyers keep buying while their sales' slots move: three sales (first come with a limit of 2, a
// 'pow' sale bought with purchase tokens, a 'queue' sale bought with admission passes, limit 1),
// on one master of a 3-master cluster, each with a fixed set of buyers who keep trying past their
// limit through the real API and order writer. Each sale's slot is moved by hand, MIGRATE a few
// keys at a time with pauses so purchases land on the half-moved slot, then again with `redis-cli
// --cluster reshard`. No buyer may get more than the limit (answers, Redis counts, Postgres
// orders), conservation holds at every periodic check, both moves finish (a key the target made
// for itself meanwhile stops MIGRATE with BUSYKEY), every purchase is answered 202, 409, 429 or
// 503, and every 202 ends as its order. A script that builds key names instead of declaring them
// is what this finds: on the importing node an undeclared key still on the old one reads as
// missing (a buyer's count of 0, a pass never given) and is made anew there, where the move then
// meets it; on the old node it stops at the first key gone, whatever it wrote before.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { Redis, type Cluster as RedisCluster } from 'ioredis';
import { AdmissionLoop } from '../../shared/admission/loop.js';
import { delay } from '../../shared/runtime/daemon.js';
import { PURCHASE_TOKEN_HEADER } from '../../shared/http/routes/purchase.js';
import { saleKeys } from '../../shared/redis/keys.js';
import type { Sale } from '../../shared/sales/sale.js';
import { ask, startCluster, type LocalCluster, type RedisNode } from '../../tools/redis-cluster.js';
import { Cluster as Processes } from '../support/cluster.js';
import { testEnv, type TestEnv } from '../support/env.js';
import { buyCount, waitFor, written } from '../support/fixtures.js';
import { http, outcome } from '../support/http.js';
import * as pow from '../support/pow.js';
import { assertNo500, beginScenario, checkSale, FaultLog, LiveChecks, summarize, tally } from '../support/scenario.js';
import { moveSlotByHand } from '../support/slot-move.js';
import { addr, salesOnEveryMaster } from '../support/topology.js';

const SCENARIO = 'redis-cluster/live-migration';
let topo: LocalCluster;
let env: TestEnv;
let c: Processes;
let dir = '';

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'flashsale-live-migration-'));
  topo = await startCluster(dir, { masters: 3, replicasPerMaster: 0 });
  env = await testEnv({}, { redis: { redisClusterNodes: topo.seeds } });
  // A purchase limit per buyer, so its counter (a key per buyer) moves with the rest; challenges
  // unlimited: every attempt at the 'pow' sale solves a new one.
  c = new Processes(env, new FaultLog(SCENARIO), { PURCHASE_RATE_PER_BUYER: '20', CHALLENGE_RATE_PER_BUYER: '0' });
  await c.startAll([
    ['api', 'api'],
    ['writer', 'order-writer'],
  ]);
});

after(async () => {
  c?.killAll();
  await env?.close();
  await topo?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const BUYERS = 10;
/** Of each sale's buyers, these start just before the move, once the others are at their limits. */
const LATE = 4;
const PURCHASE_ANSWERS = new Set([202, 409, 429, 503]);

interface Shop {
  sale: Sale;
  kind: 'first-come' | 'pow' | 'queue';
  buyers: string[];
  passes: Map<string, string>;
}
interface Won {
  saleId: string;
  orderId: string;
  userId: string;
}

/** Each buyer of each shop clicks until stopped, a moment apart, with a fresh token or its pass as the sale needs. */
class Buyers {
  readonly accepted: Won[] = [];
  /** Purchase answers by outcome label; the rest (challenges, exchanges) apart. */
  readonly purchases: Record<string, number> = {};
  readonly other: Record<string, number> = {};
  /** Purchases sent while their sale's slot was half moved. */
  duringMove = 0;
  readonly moving = new Set<string>();
  private stopping = false;
  private readonly running: Promise<void>;
  private opened!: () => void;
  private readonly gate = new Promise<void>((resolve) => (this.opened = resolve));

  /** The `late` buyers wait for letIn(): they still have their whole quota when it comes. */
  constructor(port: number, shops: Shop[], rand: () => number, late: number) {
    const tally = (into: Record<string, number>, label: string) => void (into[label] = (into[label] ?? 0) + 1);
    const click = async (shop: Shop, user: string) => {
      const headers: Record<string, string> = {};
      if (shop.kind === 'queue') headers[PURCHASE_TOKEN_HEADER] = shop.passes.get(user)!;
      if (shop.kind === 'pow') {
        const ch = await pow.challengeFor(port, shop.sale, user);
        tally(this.other, `challenge ${outcome(ch)}`);
        if (ch.status !== 200) return;
        const t = await pow.exchange(port, shop.sale, user, await pow.solve(ch.body));
        tally(this.other, `exchange ${outcome(t)}`);
        if (t.status !== 200) return;
        headers[PURCHASE_TOKEN_HEADER] = t.body.token;
      }
      if (this.moving.has(shop.sale.id)) this.duringMove++;
      const r = await http(port, 'POST', `/api/sales/${shop.sale.id}/purchases`, { user, body: { qty: 1 }, headers });
      tally(this.purchases, outcome(r));
      if (r.status === 202) this.accepted.push({ saleId: shop.sale.id, orderId: r.body.orderId, userId: user });
    };
    this.running = Promise.all(
      shops.flatMap((shop) =>
        shop.buyers.map(async (user, i) => {
          if (i >= shop.buyers.length - late) await this.gate;
          while (!this.stopping) {
            await click(shop, user);
            await delay(100 + rand() * 200);
          }
        }),
      ),
    ).then(() => {});
  }

  letIn(): void {
    this.opened();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.opened();
    await this.running;
  }
}

/** The results of every promise once all have settled; if any failed, one error saying each failure. */
async function settledAll<T>(promises: Promise<T>[]): Promise<T[]> {
  const results = await Promise.allSettled(promises);
  const failed = results.flatMap((r) => (r.status === 'rejected' ? [(r.reason as Error).message] : []));
  if (failed.length > 0) throw new Error(failed.join('; '));
  return results.map((r) => (r as PromiseFulfilledResult<T>).value);
}

/** A sale's counts hash as one node holds it, whether or not it owns the slot yet (ASKING); empty where it has none. */
async function countsOn(n: RedisNode, saleId: string): Promise<Map<string, string>> {
  const r = new Redis(n.port, '127.0.0.1', { retryStrategy: () => null, maxRetriesPerRequest: 1 });
  try {
    await r.call('ASKING');
    // The migrating node answers ASK for a key it no longer holds.
    return new Map(Object.entries(await r.hgetall(saleKeys(saleId).buyCounts).catch(() => ({}))));
  } finally {
    r.disconnect();
  }
}

/** Every key of the slot on a node. */
const keysIn = (n: RedisNode, slot: number) => ask<string[]>(n.port, 'CLUSTER', 'GETKEYSINSLOT', slot, 100_000);

test("cluster: buyers buying while their sales' slots are migrated key by key and resharded get no more than their limit, and both moves finish", async () => {
  const { seed, log, rand, answers } = beginScenario(SCENARIO, c);
  const cluster = env.redis as RedisCluster;
  await new Promise<void>((resolve, reject) => cluster.refreshSlotsCache((err) => (err ? reject(err) : resolve())));
  const masters = await topo.masters();
  // The sales on the master of the lowest slots, so once moved they are the lowest slots of their
  // new master too: the ones `redis-cli --cluster reshard` takes first from it.
  const src = masters.find((m) => addr(m) === cluster.slots[0]![0])!;
  const [dst, third] = masters.filter((m) => m !== src) as [RedisNode, RedisNode];
  const place = async (prefix: string, fields: Record<string, unknown>) =>
    (
      await salesOnEveryMaster(
        env,
        1,
        `${prefix}-${seed}`,
        { stock: 10_000, maxPerOrder: 1, paymentWindowSeconds: 600, ...fields },
        [addr(src)],
      )
    ).get(addr(src))![0]!;
  const buyersOf = (p: string) => Array.from({ length: BUYERS }, (_, i) => `${p}${i}`);
  const shops: Shop[] = [
    { sale: await place('fc', { perUserLimit: 2 }), kind: 'first-come', buyers: buyersOf('f'), passes: new Map() },
    {
      sale: await place('pow', { perUserLimit: 2, challenge: 'pow', challengeComplexity: 1000 }),
      kind: 'pow',
      buyers: buyersOf('p'),
      passes: new Map(),
    },
    // Limit 1: a pass buys once, so a second purchase is refused for the limit, checked first (409).
    {
      sale: await place('queue', { perUserLimit: 1, admission: 'queue', admitRatePerSecond: 1000, passSeconds: 600 }),
      kind: 'queue',
      buyers: buyersOf('q'),
      passes: new Map(),
    },
  ];
  const room = shops[2]!;
  for (const u of room.buyers)
    assert.equal((await http(c.apiPort, 'POST', `/api/sales/${room.sale.id}/queue`, { user: u })).status, 200);
  const loop = new AdmissionLoop({ pool: env.pool, redis: env.redis, logger: env.logger });
  await loop.refreshSales();
  await waitFor(
    'every buyer of the waiting room admitted',
    async () => {
      await loop.tick();
      for (const u of room.buyers) {
        const me = await http(c.apiPort, 'GET', `/api/sales/${room.sale.id}/queue/me`, { user: u });
        if (me.body.state === 'admitted') room.passes.set(u, me.body.pass);
      }
      return room.passes.size === BUYERS;
    },
    20_000,
    100,
  );
  const limitOf = new Map(shops.map((s) => [s.sale.id, s.sale.perUserLimit]));
  const slots = await Promise.all(
    shops.map((s) => cluster.cluster('KEYSLOT', saleKeys(s.sale.id).meta) as Promise<number>),
  );
  log.note(`sales ${shops.map((s, i) => `${s.sale.id} (${s.kind}, slot ${slots[i]})`).join(', ')} on ${addr(src)}`);

  const buyers = new Buyers(c.apiPort, shops, rand, LATE);
  const accepted = () => buyers.accepted.map((w) => w.orderId);
  const live = new LiveChecks(
    env,
    shops.map((s) => s.sale.id),
    accepted,
    { everyMs: 500, graceMs: 60_000 },
  );
  const problems: string[] = [];
  const moved = async (what: string, from: RedisNode, to: RedisNode): Promise<boolean> => {
    for (const [i, slot] of slots.entries()) {
      const leftOnSource = await ask<number>(from.port, 'CLUSTER', 'COUNTKEYSINSLOT', slot);
      if (leftOnSource !== 0) problems.push(`${what}: ${leftOnSource} keys of slot ${slot} left on ${addr(from)}`);
      const there = new Set(await keysIn(to, slot));
      const k = saleKeys(shops[i]!.sale.id);
      // The keys this sale always has by now (lists and sets the writer drains may be gone).
      const missing = [k.meta, k.available, k.seq, k.buyCounts, k.deadlines].filter((key) => !there.has(key));
      if (missing.length) problems.push(`${what}: ${missing.join(', ')} not on ${addr(to)}`);
    }
    return problems.length === 0;
  };
  // A periodic check that ran (one that meets the half-moved slot is refused and skipped, not passed).
  const checked = async (when: string) => {
    const before = live.checks;
    await waitFor(`a live check ${when}`, async () => live.checks > before, 30_000, 100);
  };
  let finished = false;
  try {
    // The first buyers at their limits; then the late ones each with one unit, and quota left
    // for a purchase that runs on the old node once part of the sale has gone.
    const early = shops.reduce((n, s) => n + (BUYERS - LATE) * s.sale.perUserLimit, 0);
    await waitFor('the first buyers to reach their limits', async () => buyers.accepted.length >= early, 30_000, 100);
    await checked('before the moves');
    buyers.letIn();
    await waitFor(
      'every late buyer to buy once',
      async () => buyers.accepted.length >= early + LATE * shops.length,
      30_000,
      20,
    );
    // By hand: the keys a purchase writes last go first, then the sale's rules and stock, the
    // buyers' counts and the passes last, so a purchase's keys stay split across the two nodes
    // for several pauses. Any order is a real reshard's; this one keeps the split longest.
    log.fault(
      `moving slots ${slots.join(', ')} from ${addr(src)} to ${addr(dst)} by hand (MIGRATE, batches of 8, 800 ms apart)`,
    );
    for (const s of shops) buyers.moving.add(s.sale.id);
    // Settled, not all: a move that fails leaves the others to finish or fail on their own first.
    const byHand = await settledAll(
      shops.map((s, i) => {
        const k = saleKeys(s.sale.id);
        return moveSlotByHand({
          slot: slots[i]!,
          from: src,
          to: dst,
          masters,
          batch: 8,
          pauseMs: 800,
          note: (what) => log.note(what),
          first: [
            [k.winners, k.queued],
            [
              k.meta,
              k.available,
              k.seq,
              k.purchased,
              k.deadlines,
              k.writers,
              k.restored,
              k.restoredQty,
              k.room,
              k.queue,
            ],
          ],
          last: [k.buyCounts, k.passes],
        });
      }),
    );
    for (const s of shops) buyers.moving.delete(s.sale.id);
    log.note(
      `moved by hand: ${byHand.map((b, i) => `slot ${slots[i]} ${b.keys} keys in ${b.batches} batches`).join(', ')}; ${buyers.duringMove} purchases sent meanwhile`,
    );
    if (!(await moved('after the move by hand', src, dst))) throw new Error('the move by hand left keys behind');
    await checked('between the moves');
    log.fault(
      `resharding the ${slots.length} lowest slots of ${addr(dst)} to ${addr(third)} (redis-cli --cluster reshard)`,
    );
    await topo.reshard(dst, third, new Set(slots).size);
    if (!(await moved('after the reshard', dst, third))) throw new Error('the reshard left keys behind');
    await checked('after the moves');
    finished = true;
  } catch (err) {
    problems.push(`a move did not finish: ${(err as Error).message}`);
  } finally {
    await buyers.stop();
    await live.stop();
  }

  // What the buyers were told, which needs no Redis: never more 202s than the limit.
  const wins = new Map<string, number>();
  for (const w of buyers.accepted) wins.set(`${w.saleId} ${w.userId}`, (wins.get(`${w.saleId} ${w.userId}`) ?? 0) + 1);
  for (const [who, n] of wins)
    if (n > limitOf.get(who.split(' ')[0]!)!)
      problems.push(`${who}: answered 202 ${n} times, limit ${limitOf.get(who.split(' ')[0]!)}`);
  for (const [label, n] of Object.entries(buyers.purchases))
    if (!PURCHASE_ANSWERS.has(Number(label.split(' ')[0]))) problems.push(`${n} purchases answered ${label}`);
  problems.push(...live.violations.map((v) => `live check: ${v.invariant} (sale ${v.sale}): ${v.detail}`));
  const reports = [];
  if (finished) {
    for (const s of shops) {
      await written(env, s.sale.id);
      const report = await checkSale(env, s.sale.id, accepted());
      reports.push(report);
      problems.push(...report.violations.map((v) => `at rest: ${v.invariant} (sale ${v.sale}): ${v.detail}`));
      const rows = await env.pool.query<{ id: string; user_id: string }>(
        'select id, user_id from orders where sale_id = $1',
        [s.sale.id],
      );
      const owner = new Map(rows.rows.map((r) => [r.id, r.user_id]));
      for (const w of buyers.accepted.filter((x) => x.saleId === s.sale.id)) {
        if (owner.get(w.orderId) !== w.userId)
          problems.push(`${w.orderId}: answered 202 to ${w.userId}, order is ${owner.get(w.orderId) ?? 'missing'}`);
      }
      // Each buyer's count in Redis is their orders, and within the limit.
      for (const u of s.buyers) {
        const orders = rows.rows.filter((r) => r.user_id === u).length;
        const count = await buyCount(env.redis, s.sale.id, u);
        if (orders > s.sale.perUserLimit || count !== orders)
          problems.push(`${s.sale.id} ${u}: ${orders} orders, count ${count} in Redis, limit ${s.sale.perUserLimit}`);
      }
    }
  } else {
    // The slot is stuck half moved: say which keys each node holds of it, and each buyer's 202s
    // beside their count in the counts hash on either node.
    for (const [i, slot] of slots.entries()) {
      const [a, b] = [new Set(await keysIn(src, slot)), new Set(await keysIn(dst, slot))];
      problems.push(
        `slot ${slot}: ${a.size} keys left on ${addr(src)}, ${b.size} on ${addr(dst)}, on both: ${[...a].filter((k) => b.has(k)).join(' ') || 'none'}`,
      );
      const { sale, buyers: users } = shops[i]!;
      const [onSrc, onDst] = [await countsOn(src, sale.id), await countsOn(dst, sale.id)];
      const held = (u: string) => Number(onSrc.get(u) ?? 0) + Number(onDst.get(u) ?? 0);
      if ((onSrc.size > 0 && onDst.size > 0) || users.some((u) => held(u) !== (wins.get(`${sale.id} ${u}`) ?? 0)))
        problems.push(
          `${sale.id} (202s / count on ${addr(src)} / on ${addr(dst)}): ${users.map((u) => `${u} ${wins.get(`${sale.id} ${u}`) ?? 0}/${onSrc.get(u) ?? '-'}/${onDst.get(u) ?? '-'}`).join(', ')}`,
        );
    }
  }
  const statuses = answers();
  console.log(
    `[${SCENARIO}] purchases ${JSON.stringify(buyers.purchases)}; challenges and exchanges ${JSON.stringify(buyers.other)}; ${buyers.duringMove} purchases sent while a slot was half moved`,
  );
  summarize({
    scenario: SCENARIO,
    seed,
    buyers: shops.length * BUYERS,
    orders: buyers.accepted.length,
    faults: log.faults,
    faultKinds: `${slots.length} slots moved by MIGRATE by hand, then resharded with redis-cli`,
    ...tally(live, ...reports),
    answers: statuses,
  });
  for (const p of problems) console.log(`[${SCENARIO}] PROBLEM ${p}`);
  assert.ok(buyers.duringMove > 0, 'purchases were sent while a slot was half moved');
  // First: a process that died explains the refused connections among the problems.
  assert.deepEqual(c.unexpectedExits, []);
  assert.deepEqual(problems, []);
  assertNo500(SCENARIO, statuses);
});
