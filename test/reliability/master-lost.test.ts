// A Redis master lost for good (REDIS_MIN_REPLICAS_ACK=1, one replica per master): SIGKILLed under
// purchases, with winners answered 202 not yet written (the writer paused meanwhile), and never
// restarted, no replica attached afterwards. Its replica is promoted and has
// none of its own, so WAIT can never succeed on it: the degraded mode (shared/redis/replica-watch.ts).
// Every buyer answered 202 gets an order within seconds all the same (the writer drains the
// promoted master unconfirmed), purchases on its sales are answered 503 reserving nothing, the
// other masters' sales sell on, no unit is sold twice, nothing is answered 500, and `flashsale
// check` names the sales left without a replica. On a Cluster (3 masters) and on Sentinel.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { startCluster, type LocalCluster } from '../../tools/redis-cluster.js';
import { startSentinels, type LocalSentinels } from '../../tools/redis-sentinel.js';
import type { InvariantReport } from '../../shared/checks/invariants.js';
import { saleKeys } from '../../shared/redis/keys.js';
import type { Sale } from '../../shared/sales/sale.js';
import { cli } from '../support/cli.js';
import type { Cluster as Processes } from '../support/cluster.js';
import type { TestEnv } from '../support/env.js';
import { newSale, waitFor, written } from '../support/fixtures.js';
import { http } from '../support/http.js';
import {
  assertNo500,
  beginScenario,
  checkSale,
  QUIET_POLLING,
  summarize,
  tally,
  type FaultLog,
} from '../support/scenario.js';
import { answersHold, scarceFirst, scarceSizes, Shoppers } from '../support/shoppers.js';
import { addr, onTopology, salesOnEveryMaster } from '../support/topology.js';

/** The answer of a purchase refused in the degraded mode: nothing was reserved. */
const NOTHING_RESERVED = /fewer replicas than REDIS_MIN_REPLICAS_ACK[\s\S]*nothing was reserved/;
/** How long buyers answered 202 may wait for their order once the master is gone. */
const ORDERS_WITHIN_MS = 30_000;

/** A purchase of one unit of the sale's roomiest size (never sold out here). */
const probe = (c: Processes, sale: Sale) =>
  http(c.apiPort, 'POST', `/api/sales/${sale.id}/purchases`, {
    body: { qty: 1, variant: sale.variants.reduce((a, b) => (b.stock > a.stock ? b : a)).sku },
    user: `probe-${Date.now()}-${Math.random()}`,
  });

/** Waits until every id has its order in Postgres; fails saying how many have none after ORDERS_WITHIN_MS. */
async function ordersFor(env: TestEnv, ids: string[]): Promise<void> {
  let missing = ids.length;
  await waitFor(
    'every 202 an order',
    async () => {
      const res = await env.pool.query<{ n: number }>(
        'select count(*)::int as n from orders where id = any($1::text[])',
        [ids],
      );
      return (missing = ids.length - res.rows[0]!.n) === 0;
    },
    ORDERS_WITHIN_MS,
    200,
  ).catch(() => {
    throw new Error(
      `${missing} of ${ids.length} buyers answered 202 have no order ${ORDERS_WITHIN_MS / 1000} s after their master was lost`,
    );
  });
}

interface Lost {
  scenario: string;
  env: TestEnv;
  c: Processes;
  /** Sales the buyers buy from, and which of them the lost master serves. */
  sales: Sale[];
  orphaned: Set<string>;
  /** A sale of the lost master and one of a master that stays (Cluster), probed with a purchase each. */
  probes: { orphaned: Sale; healthy?: Sale };
  /** SIGKILLs the master; resolves with the promoted replica's address. */
  kill(log: FaultLog): Promise<string>;
}

async function masterLost({ scenario, env, c, sales, orphaned, probes, kill }: Lost): Promise<void> {
  const { seed, log, rand, answers } = beginScenario(scenario, c);
  // No payers: a payment retries until its order exists, and a scenario that fails must say how
  // many orders are missing rather than wait on them.
  const shoppers = sales.map(
    (s, i) =>
      new Shoppers({
        port: c.apiPort,
        saleId: s.id,
        rand,
        users: 100,
        prefix: `m${i}-`,
        maxQty: 2,
        payRatio: 0,
        payDelayMs: [0, 0],
        concurrency: 8,
        demand: scarceFirst(s.variants, rand),
      }),
  );
  for (const s of shoppers) s.run();
  // Each sale's most wanted size, and its scarcest, sells out first and the others sell on.
  await waitFor(
    'every sale selling, a size of each sold out',
    async () => shoppers.every((s) => s.accepted.length >= 10 && s.soldOutWithOthersLeft > 0),
    30_000,
    50,
  );
  // The writer held back, so that the lost master surely dies with winners answered 202 and not yet
  // written: they live on only in its promoted replica, which can confirm nothing.
  await c.signal('writer', 'SIGSTOP');
  const paused = shoppers.map((s) => s.accepted.length);
  await waitFor(
    '202s left for the writer on the master to lose',
    async () => shoppers.every((s, i) => !orphaned.has(sales[i]!.id) || s.accepted.length >= paused[i]! + 10),
    30_000,
    50,
  );
  const promoted = await kill(log);
  log.note(`${promoted} promoted, with no replica of its own; none is added`);
  await c.signal('writer', 'SIGCONT', true);
  log.note('writer resumed');
  // The API looks at every master each second: from then on the lost master's sales refuse at once.
  await waitFor(
    'the orphaned sale refused without reserving',
    async () => {
      const r = await probe(c, probes.orphaned);
      return r.status === 503 && NOTHING_RESERVED.test(String(r.body.message));
    },
    30_000,
    100,
  );
  log.note('purchases on the promoted master are refused, reserving nothing');
  await Promise.all(shoppers.map((s) => s.done()));

  // Refused reserving nothing: the units left stay as they were, of the sale and of each size.
  const k = saleKeys(probes.orphaned.id);
  const left = [await env.redis.get(k.available), await env.redis.hgetall(k.variantsLeft)];
  const refused = await probe(c, probes.orphaned);
  assert.equal(refused.status, 503, JSON.stringify(refused.body));
  assert.match(String(refused.body.message), NOTHING_RESERVED);
  assert.deepEqual([await env.redis.get(k.available), await env.redis.hgetall(k.variantsLeft)], left);
  if (probes.healthy)
    assert.equal((await probe(c, probes.healthy)).status, 202, 'a sale of a master that kept its replica sells on');

  const accepted = shoppers.flatMap((s) => s.accepted.map((w) => w.orderId));
  await ordersFor(env, accepted);
  const reports: InvariantReport[] = [];
  for (const [i, sale] of [...sales, probes.orphaned, ...(probes.healthy ? [probes.healthy] : [])].entries()) {
    await written(env, sale.id);
    const report = await checkSale(
      env,
      sale.id,
      shoppers[i]?.accepted.map((w) => w.orderId),
    );
    assert.deepEqual(report.violations, [], `sale ${sale.id}`);
    reports.push(report);
  }
  for (const [i, sale] of sales.entries()) {
    assert.deepEqual(await answersHold(env, sale.id, shoppers[i]!), []);
    const byVariant = await env.redis.hgetall(saleKeys(sale.id).variantsLeft);
    console.log(
      `[${scenario}] sale ${sale.id}${orphaned.has(sale.id) ? ' (lost master)' : ''}: ${JSON.stringify(shoppers[i]!.purchases)}; units left by size ${JSON.stringify(byVariant)}`,
    );
    // Answered sold out before the master was lost (confirmed by its replica): none of it came back.
    assert.deepEqual(
      [...shoppers[i]!.soldOutAt.keys()],
      [sale.variants[0]!.sku],
      `sale ${sale.id}: only the scarce size sold out`,
    );
    assert.equal(byVariant[sale.variants[0]!.sku], '0', `sale ${sale.id}: the scarce size`);
    // Buyers of the lost master's sales were answered 202 or 503, or for the scarce size sold out (or
    // not enough left for 2), nothing else.
    if (orphaned.has(sale.id))
      for (const label of Object.keys(shoppers[i]!.purchases))
        assert.match(label, /^(202 queued|503 unavailable|409 sold_out|409 not_enough_stock)$/, `sale ${sale.id}`);
  }

  // `flashsale check` names exactly the sales left without a replica, and nothing else.
  const check = await cli(env, ['check', '--json'], { REDIS_MIN_REPLICAS_ACK: '1' });
  assert.equal(check.code, 3, check.out);
  const found = JSON.parse(check.stdout) as InvariantReport;
  assert.deepEqual(
    found.violations.filter((v) => v.invariant !== 'replicated'),
    [],
  );
  assert.deepEqual(found.violations.map((v) => v.sale).sort(), [...orphaned, probes.orphaned.id].sort());
  assert.equal(await c.metric('api', 'flashsale_redis_masters_unreplicated'), 1);
  assert.equal(await c.metric('writer', 'flashsale_redis_masters_unreplicated'), 1);
  const unconfirmed = await c.metric('writer', 'flashsale_writer_unreplicated_orders_total');
  log.note(`orders written unconfirmed: ${unconfirmed}`);
  assert.ok(
    unconfirmed >= 10 * orphaned.size,
    `the winners left on the lost master were written unconfirmed (${unconfirmed})`,
  );
  assert.deepEqual(c.unexpectedExits, []);

  const statuses = answers();
  summarize({
    scenario,
    seed,
    buyers: shoppers.reduce((n, s) => n + s.buyers.size, 0),
    orders: accepted.length,
    faults: 2,
    faultKinds: '1 SIGSTOP writer until the promotion, 1 SIGKILL master, never restarted, no replica added',
    ...tally(...reports),
    answers: statuses,
  });
  assertNo500(scenario, statuses);
}

/** A drop of 4 sizes, the scarcest (100 units) most wanted. */
const SALE = { ...scarceSizes(4, 25_000, 100), paymentWindowSeconds: 300, perUserLimit: 1000, maxPerOrder: 2 };

describe('Cluster', () => {
  let topo: LocalCluster;
  let env: TestEnv;
  let c: Processes;
  onTopology(
    'master-lost-cluster',
    (d) => startCluster(d, { masters: 3, replicasPerMaster: 1 }),
    (t) => ({ redisClusterNodes: t.seeds }),
    (on) => ({ topo, env, c } = on),
    QUIET_POLLING,
  );

  test('cluster: a master lost for good: every 202 gets its order, its sales answer 503 reserving nothing, the others sell on', async () => {
    const victim = (await topo.masters())[1]!;
    const placed = await salesOnEveryMaster(env, 3, 'lost', SALE);
    const [orphanProbe, ...lostSales] = placed.get(addr(victim))!;
    const [healthyProbe, ...keptSales] = [...placed].filter(([m]) => m !== addr(victim)).flatMap(([, s]) => s);
    const sales = [...lostSales, ...keptSales];
    await masterLost({
      scenario: 'master-lost/cluster',
      env,
      c,
      sales,
      orphaned: new Set(lostSales.map((s) => s.id)),
      probes: { orphaned: orphanProbe!, healthy: healthyProbe! },
      async kill(log) {
        log.fault(`SIGKILL master ${addr(victim)}`);
        return addr(await topo.killMaster(victim));
      },
    });
  });
});

describe('Sentinel', () => {
  let topo: LocalSentinels;
  let env: TestEnv;
  let c: Processes;
  onTopology(
    'master-lost-sentinel',
    (d) => startSentinels(d, { replicas: 1 }),
    (t) => ({ redisSentinels: t.sentinels, redisSentinelName: t.name }),
    (on) => ({ topo, env, c } = on),
    QUIET_POLLING,
  );

  test('sentinel: the master lost for good: every 202 gets its order, purchases answer 503 reserving nothing', async () => {
    const sales = await Promise.all(['a', 'b'].map((s) => newSale(env, { id: `lost-${s}-${Date.now()}`, ...SALE })));
    const orphanProbe = await newSale(env, { id: `lost-probe-${Date.now()}`, ...SALE });
    await masterLost({
      scenario: 'master-lost/sentinel',
      env,
      c,
      sales,
      orphaned: new Set(sales.map((s) => s.id)),
      probes: { orphaned: orphanProbe },
      async kill(log) {
        log.fault(`SIGKILL master ${addr(await topo.master())}`);
        return addr(await topo.killMaster());
      },
    });
  });
});
