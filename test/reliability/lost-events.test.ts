// Lost events: expiry events are a hint, the replay's sweep is the guarantee. The listener's
// subscription is killed again and again while keys expire, the listener is paused (SIGSTOP), and
// it is down entirely (SIGKILL); the replay closes every order on time either way, and a listener
// that comes back to a backlog of stale events restores nothing twice.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { delay } from '../../shared/runtime/daemon.js';
import { saleKeys } from '../../shared/redis/keys.js';
import type { Sale } from '../../shared/sales/sale.js';
import { type Cluster, fileCluster } from '../support/cluster.js';
import type { TestEnv } from '../support/env.js';
import { newSale, orderCount, runConcurrently, settle, waitFor } from '../support/fixtures.js';
import { http } from '../support/http.js';
import { beginScenario, checkSale, type FaultLog, LiveChecks, summarize, tally } from '../support/scenario.js';

let env: TestEnv;
let c: Cluster;

fileCluster('lost-events', (started) => ({ env, c } = started));

type Closer = 'listener' | 'replay' | 'writer';

/** Orders closed so far, summed over the given processes' own counters. */
async function closedBy(names: Closer[]): Promise<number> {
  let n = 0;
  for (const name of names) n += await c.metric(name, 'flashsale_orders_closed_total', `by="${name}"`);
  return n;
}

/** The counters only move after the rows do: wait until they reach `expected`, then they must equal it. */
async function assertClosedOnce(names: Closer[], base: number, expected: number, what: string): Promise<void> {
  await waitFor(`${what}: counters`, async () => (await closedBy(names)) - base >= expected);
  assert.equal((await closedBy(names)) - base, expected, what);
}

/** n buyers of one unit each, written, then a seeded share of them pay at once. */
async function trade(
  sale: Sale,
  n: number,
  prefix: string,
  rand: () => number,
): Promise<{ accepted: string[]; unpaid: number }> {
  const won = await runConcurrently(n, 50, (i) =>
    http(c.apiPort, 'POST', `/api/sales/${sale.id}/purchases`, { body: { qty: 1 }, user: `${prefix}${i}` }),
  );
  assert.deepEqual(
    won.map((r) => r.status),
    won.map(() => 202),
  );
  const accepted = won.map((r) => r.body.orderId as string);
  await waitFor('orders written', async () => {
    const res = await env.pool.query<{ n: number }>(
      'select count(*)::int as n from orders where id = any($1::text[])',
      [accepted],
    );
    return res.rows[0]!.n === n;
  });
  const payers = accepted.map((id, i) => [id, `${prefix}${i}`] as const).filter(() => rand() < 0.2);
  const answers = await Promise.all(
    payers.map(([id, user]) => http(c.apiPort, 'POST', `/api/orders/${id}/pay`, { user })),
  );
  // A payment may lose the race to its 1 s deadline; either answer is fine, and the state must match it.
  const paid = answers.filter((r) => r.status === 200).length;
  assert.equal(paid + answers.filter((r) => r.body?.error === 'order_expired').length, payers.length);
  return { accepted, unpaid: n - paid };
}

/** Stock exactly back for every expired order, restored once each. */
async function assertRestoredOnce(sale: Sale): Promise<void> {
  const k = saleKeys(sale.id);
  const expired = await orderCount(env, sale.id, 'expired');
  const held = (await orderCount(env, sale.id)) - expired;
  assert.equal(Number(await env.redis.get(k.available)), sale.stock - held, 'available = stock - orders held');
  assert.equal(Number(await env.redis.get(k.restoredQty)), expired, 'units restored = units expired');
  assert.equal(await env.redis.scard(k.restored), expired, 'one restore per expired order');
}

/** One scenario on its own sale with its own seed; invariants checked throughout and at rest. */
async function scenario(
  name: string,
  stock: number,
  body: (sale: Sale, rand: () => number, log: FaultLog) => Promise<string[]>,
): Promise<void> {
  const { seed, log, rand } = beginScenario(`lost-events/${name}`, c);
  const sale = await newSale(env, { stock, paymentWindowSeconds: 1 });
  let accepted: string[] = [];
  // The replay runs throughout: nothing may stay pending past its deadline longer than its interval.
  const live = new LiveChecks(env, [sale.id], () => accepted, { everyMs: 250, graceMs: 1000 });
  const faults = log.faults;
  try {
    accepted = await body(sale, rand, log);
    await settle(env, sale.id);
  } finally {
    await live.stop();
  }
  const final = await checkSale(env, sale.id, accepted);
  summarize({
    scenario: `lost-events/${name}`,
    seed,
    buyers: accepted.length,
    orders: await orderCount(env, sale.id),
    faults: log.faults - faults,
    faultKinds: log.kinds.join(', '),
    ...tally(live, final),
  });
  assert.deepEqual(live.violations, [], 'invariants while events were lost');
  assert.deepEqual(final.violations, []);
  await assertRestoredOnce(sale);
}

test("lost events: the listener's subscription killed (CLIENT KILL TYPE pubsub) again and again while 300 keys expire; every order closed once, on time", async () => {
  await scenario('client-kill', 300, async (sale, rand, log) => {
    const base = await closedBy(['listener', 'replay', 'writer']);
    const { accepted, unpaid } = await trade(sale, 300, 'ck-', rand);
    // Through the whole expiry wave (deadlines 1 s out): kill the subscription every 50-250 ms.
    const until = Date.now() + 2500;
    while (Date.now() < until) {
      await delay(50 + rand() * 200);
      log.fault(
        `CLIENT KILL TYPE pubsub: ${String(await env.redis.call('CLIENT', 'KILL', 'TYPE', 'pubsub'))} connection(s)`,
      );
    }
    await settle(env, sale.id);
    await assertClosedOnce(['listener', 'replay', 'writer'], base, unpaid, 'each unpaid order closed exactly once');
    return accepted;
  });
});

test('lost events: the listener paused (SIGSTOP) while 200 keys expire; the replay closes them all, and the resumed listener works through its stale events restoring nothing', async () => {
  await scenario('sigstop', 200, async (sale, rand, log) => {
    // Paused while subscribed (the last test's kills may have it still reconnecting): the events
    // then pile up in its socket instead of going nowhere.
    await waitFor('listener subscribed', async () => Number(await env.redis.call('PUBSUB', 'NUMPAT')) === 1);
    const events = await c.metric('listener', 'flashsale_expiry_events_total');
    const base = await closedBy(['replay', 'writer']);
    await c.signal('listener', 'SIGSTOP');
    const { accepted, unpaid } = await trade(sale, 200, 'ss-', rand);
    await settle(env, sale.id);
    await assertClosedOnce(
      ['replay', 'writer'],
      base,
      unpaid,
      'the sweep closed every unpaid order while the listener was paused',
    );
    await c.signal('listener', 'SIGCONT', true);
    log.note('SIGCONT listener');
    // Each unpaid order's key fired once into the paused listener's socket: it now gets them all.
    // A paid order's key is dropped after its payment commits, so one paid in its last
    // milliseconds may fire too: at most one event per order, at least one per unpaid one.
    await waitFor(
      'stale events received',
      async () => (await c.metric('listener', 'flashsale_expiry_events_total')) - events >= unpaid,
    );
    const received = (await c.metric('listener', 'flashsale_expiry_events_total')) - events;
    assert.ok(
      received >= unpaid && received <= accepted.length,
      `${received} events for ${unpaid} unpaid of ${accepted.length} orders`,
    );
    // A clean stop waits for every close in flight: after it, whatever the listener did is done.
    assert.equal(await c.signal('listener', 'SIGTERM', true), 0);
    await assertRestoredOnce(sale);
    await c.start('listener', 'expiry-listener');
    return accepted;
  });
});

test('lost events: the listener down entirely (SIGKILL); the replay closes every order, and the restarted listener closes new ones with nothing restored twice', async () => {
  await scenario('sigkill', 300, async (sale, rand) => {
    const base = await closedBy(['replay', 'writer']);
    await c.signal('listener', 'SIGKILL');
    const first = await trade(sale, 200, 'sk-', rand);
    await settle(env, sale.id);
    await assertClosedOnce(
      ['replay', 'writer'],
      base,
      first.unpaid,
      'the sweep closed every unpaid order while the listener was down',
    );
    await assertRestoredOnce(sale);
    await c.restart('listener');
    const again = await closedBy(['listener', 'replay', 'writer']);
    const second = await trade(sale, 100, 'sk2-', rand);
    await settle(env, sale.id);
    await assertClosedOnce(
      ['listener', 'replay', 'writer'],
      again,
      second.unpaid,
      'each order of the second wave closed exactly once',
    );
    return [...first.accepted, ...second.accepted];
  });
});
