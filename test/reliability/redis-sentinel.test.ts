// The product on Sentinel (a master, 2 replicas, 3 sentinels, REDIS_MIN_REPLICAS_ACK=1) through
// its faults, with the invariants checked after each: a graceful SENTINEL FAILOVER under purchases
// with orders pending loses no 202 and no expiry, and purchases resume on the promoted replica; a
// master SIGKILLed under purchases (buyers at concurrency 50 and 200) loses no 202 and doubles
// nothing. No request of any of them is answered 500. Every process finds the master through the
// sentinels. No replay runs until the end, so every close is the daemons'.
//
// The graceful case is the hard one: the old master keeps taking writes until the clients move at
// +switch-master, and its other replica acknowledges them before it, too, is moved and resyncs,
// dropping them. Confirming only on REDIS_MIN_REPLICAS_ACK replicas lost 8 of 10,984 202s here;
// every process therefore also waits for every replica the sentinels see healthy (the one being
// promoted is one), which refuses those writes instead. Meanwhile the old master has no replica
// online; it is not taken as degraded (its writes recorded unconfirmed) while the sentinels see its
// replicas up, or the writer, polling every 100 ms here, made orders of reservations the new master
// never had.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startSentinels, type LocalSentinels, type RedisNode } from '../../tools/redis-sentinel.js';
import { saleKeys } from '../../shared/redis/keys.js';
import { cli } from '../support/cli.js';
import { http } from '../support/http.js';
import type { Cluster as Processes } from '../support/cluster.js';
import type { TestEnv } from '../support/env.js';
import { newSale, waitFor, written } from '../support/fixtures.js';
import {
  assertNo500,
  beginScenario,
  checkSale,
  killMasterRuns,
  QUIET_POLLING,
  summarize,
  tally,
} from '../support/scenario.js';
import { answersHold, scarceFirst, scarceSizes, Shoppers } from '../support/shoppers.js';
import { addr, allClosed, buy, lateness, onTopology } from '../support/topology.js';

let topo: LocalSentinels;
let env: TestEnv;
let c: Processes;
// The sentinels' default failover-timeout (10 s): a failover of the same master again within twice that
// could promote the replica the test has just added, before it has its copy.
onTopology(
  'redis-sentinel',
  (d) => startSentinels(d, { replicas: 2 }),
  (t) => ({ redisSentinels: t.sentinels, redisSentinelName: t.name }),
  (on) => ({ topo, env, c } = on),
  QUIET_POLLING,
);

const closedBy = async () =>
  (await c.metric('listener', 'flashsale_orders_closed_total', 'by="listener"')) +
  (await c.metric('writer', 'flashsale_orders_closed_total', 'by="writer"'));

/**
 * Buyers on a drop of 4 sizes with long windows (nothing expires meanwhile), `concurrency` at a
 * time, through `fault`; the most wanted size has 100 units and is sold out before the fault, the
 * others never are. Then every answer and invariant is checked, conservation for each size.
 */
async function underPurchases(scenario: string, fault: string, run: () => Promise<RedisNode>, concurrency = 8) {
  const { seed, log, rand, answers } = beginScenario(`redis-sentinel/${scenario}`, c);
  const id = `${scenario.replace(/\W+/g, '-')}-${seed}`;
  const sale = await newSale(env, {
    id,
    ...scarceSizes(4, 25_000, 100),
    perUserLimit: 1000,
    maxPerOrder: 2,
    paymentWindowSeconds: 300,
  });
  const shoppers = new Shoppers({
    port: c.apiPort,
    saleId: sale.id,
    rand,
    users: 300,
    prefix: 's',
    maxQty: 2,
    payRatio: 0.3,
    payDelayMs: [0, 500],
    concurrency,
    demand: scarceFirst(sale.variants, rand),
  });
  shoppers.run();
  await new Promise((r) => setTimeout(r, 1500));
  await waitFor('a size sold out while the others sell', async () => shoppers.soldOutWithOthersLeft > 0, 30_000, 50);
  const old = await topo.master();
  log.fault(`${fault} (master ${addr(old)})`);
  const promoted = await run();
  log.note(`${addr(promoted)} is master`);
  await shoppers.done();
  // Purchases resume on the new master (a sale of their own: a 503 meanwhile is no answer to count).
  const next = await newSale(env, { id: `${id}-next`, stock: 100 });
  await waitFor(
    'a purchase accepted on the new master',
    async () => {
      const r = await http(c.apiPort, 'POST', `/api/sales/${next.id}/purchases`, {
        body: { qty: 1 },
        user: `after-${Date.now()}`,
      });
      return r.status === 202;
    },
    30_000,
    200,
  );
  await written(env, sale.id);
  assert.deepEqual(await answersHold(env, sale.id, shoppers), []);
  const report = await checkSale(
    env,
    sale.id,
    shoppers.accepted.map((w) => w.orderId),
  );
  assert.deepEqual(report.violations, []);
  const left = await env.redis.hgetall(saleKeys(sale.id).variantsLeft);
  console.log(
    `[redis-sentinel] ${scenario}: purchases ${JSON.stringify(shoppers.purchases)}; units left by size ${JSON.stringify(left)}`,
  );
  assert.equal(Object.keys(left).length, 4, 'units left kept for each size');
  return { seed, shoppers, report, answers };
}

test('sentinel: a graceful failover under purchases with orders pending loses no 202 and no expiry', async () => {
  const pendingSale = await newSale(env, { id: `expire-${Date.now()}`, stock: 1000, paymentWindowSeconds: 6 });
  const before = await closedBy();
  const pending = await buy(c.apiPort, pendingSale.id, 100, 'p');
  const { seed, shoppers, report, answers } = await underPurchases('failover', 'SENTINEL FAILOVER', () =>
    topo.failover(),
  );
  await allClosed(env, pending);
  // A close is counted once its restore is confirmed, a moment after Postgres has it.
  let closes = 0;
  await waitFor(
    'the daemons to count their closes',
    async () => (closes = (await closedBy()) - before) >= pending.length,
    10_000,
    100,
  ).catch(() => {});
  const late = await lateness(env, pending);
  console.log(
    `[redis-sentinel] failover: ${pending.length} pending orders closed by the daemons ${closes}; lateness p50 ${late.p50} ms, p99 ${late.p99} ms, max ${late.max} ms`,
  );
  assert.equal(late.expired, pending.length);
  assert.equal(closes, pending.length, 'no expiry lost: every order closed by the daemons (no replay runs)');
  const expiring = await checkSale(env, pendingSale.id, pending);
  assert.deepEqual(expiring.violations, []);
  const check = await cli(env, ['check']);
  assert.equal(check.code, 0, check.out);
  assert.deepEqual(c.unexpectedExits, []);
  const statuses = answers();
  summarize({
    scenario: 'redis-sentinel/failover',
    seed,
    buyers: shoppers.buyers.size,
    orders: shoppers.accepted.length + pending.length,
    faults: 1,
    faultKinds: '1 SENTINEL FAILOVER',
    ...tally(report, expiring),
    answers: statuses,
  });
  assertNo500('redis-sentinel/failover', statuses);
});

for (const { concurrency, scenario, title } of killMasterRuns('redis-sentinel'))
  test(`sentinel: a master SIGKILLed under purchases ${title} (REDIS_MIN_REPLICAS_ACK=1) loses no 202 and doubles nothing`, async () => {
    // A replica replaces the killed master, so the next run has two again, one to promote and one to confirm.
    const { seed, shoppers, report, answers } = await underPurchases(
      scenario.slice('redis-sentinel/'.length),
      'SIGKILL',
      async () => {
        const promoted = await topo.killMaster();
        await topo.addReplica();
        return promoted;
      },
      concurrency,
    );
    const check = await cli(env, ['check']);
    assert.equal(check.code, 0, check.out);
    const replay = await cli(env, ['replay', '--once']);
    assert.equal(replay.code, 0, replay.out);
    assert.deepEqual(c.unexpectedExits, []);
    const statuses = answers();
    summarize({
      scenario,
      seed,
      buyers: shoppers.buyers.size,
      orders: shoppers.accepted.length,
      faults: 1,
      faultKinds: `1 SIGKILL master (then a replica added), buyers at concurrency ${concurrency}`,
      ...tally(report),
      answers: statuses,
    });
    assertNo500(scenario, statuses);
  });
