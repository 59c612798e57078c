// Process crashes: the order writer, the expiry listener and the replay are SIGKILLed at seeded
// random moments while buyers buy, pay and let orders expire, and each is restarted. Nothing
// accepted is lost, nothing is paid and expired, no stock is restored twice. The sale is a drop of
// 12 sizes of equal stock under skewed demand: the most wanted sizes sell out within a second
// while the least wanted never do, and conservation is checked for each size at every check. The
// shop's receiver, verifying with the standardwebhooks package, hears one event per change
// Postgres holds, through the kills of `flashsale events` too.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { delay } from '../../shared/runtime/daemon.js';
import { addEndpoint } from '../../shared/events/endpoints.js';
import { saleKeys } from '../../shared/redis/keys.js';
import { cliHere } from '../support/cli-here.js';
import { fileEnv } from '../support/cluster.js';
import type { TestEnv } from '../support/env.js';
import { newSale, orderCount, seededRandom, waitFor } from '../support/fixtures.js';
import { duplicates, Receiver } from '../support/receiver.js';
import { beginScenario, LiveChecks, summarize, tally } from '../support/scenario.js';
import { answersHold, Shoppers, sizes, skewedDemand, windDown } from '../support/shoppers.js';

const file = fileEnv();
const receiver = new Receiver([]);
after(() => receiver.stop());

test('crashes: SIGKILL the writer, the listener, the replay and the events delivery at seeded moments mid-sale; every invariant holds and every change is one event', async () => {
  const { env } = file;
  await receiver.start();
  const { secret } = await addEndpoint(env.pool, { url: receiver.url, allowPrivate: true });
  receiver.secrets = [secret];
  const { seed, log, rand } = beginScenario('crashes');
  const sale = await newSale(env, { ...sizes(12, 25), perUserLimit: 2, maxPerOrder: 2, paymentWindowSeconds: 2 });
  const demand = skewedDemand(
    sale.variants.map((v) => v.sku),
    seededRandom(seed + 2),
  );
  // Small batches, so a kill often lands while the writer holds one.
  const c = file.cluster(log, { WRITER_BATCH_SIZE: '50' });
  await Promise.all([
    c.start('api', 'api'),
    c.start('writer', 'order-writer', { WRITER_ID: 'writer-0' }),
    c.start('listener', 'expiry-listener'),
    c.start('replay', 'replay'),
    // A short timeout: a kill's claims come due again after its lease (twice the timeout and 5 s);
    // an answer slower than it is a failure, and its event sent again.
    c.start('events', 'events', {
      EVENTS_POLL_MS: '20',
      EVENTS_RETRY_BASE_MS: '50',
      EVENTS_CONCURRENCY: '16',
      EVENTS_TIMEOUT_MS: '1000',
      EVENTS_ALLOW_PRIVATE_ENDPOINTS: 'true',
    }),
  ]);

  const shoppers = new Shoppers({
    port: c.apiPort,
    saleId: sale.id,
    rand: seededRandom(seed + 1),
    users: 500,
    prefix: 'buyer-',
    maxQty: 2,
    payRatio: 0.5,
    payDelayMs: [0, 2600],
    concurrency: 16,
    demand,
  });
  // An order whose key fires while the listener is down waits for the replay, and if the replay is
  // killed next, for its restart too: the grace is the longest outage of each, as measured (a
  // restart takes one second on a quiet machine, four on a loaded one), plus a second of slack.
  const outage: Record<string, number> = { listener: 1000, replay: 1000 };
  const downSince: Record<string, number | undefined> = {};
  const longest = (name: string) => Math.max(outage[name]!, Date.now() - (downSince[name] ?? Date.now()));
  const live = new LiveChecks(env, [sale.id], () => shoppers.accepted.map((w) => w.orderId), {
    everyMs: 500,
    graceMs: () => longest('listener') + longest('replay') + 1000,
  });
  shoppers.run();

  const kills: Record<string, number> = { writer: 0, listener: 0, replay: 0, events: 0 };
  let freshWriters = 0;
  const until = Date.now() + 12_000;
  while (Date.now() < until) {
    // Each round kills all four once, in a seeded order, at seeded moments, down for a seeded while.
    const round = ['writer', 'listener', 'replay', 'events']
      .map((v) => [v, rand()] as const)
      .sort((a, b) => a[1] - b[1])
      .map(([v]) => v);
    for (const victim of round) {
      await delay(150 + rand() * 650);
      const downMs = rand() * 500;
      // Mostly back under its own id (it takes its own batch back); sometimes under a new one, so
      // the dead id's batch waits for its lease to run out and is re-driven by someone else.
      const fresh = victim === 'writer' && rand() < 0.3;
      const killedAt = Date.now();
      downSince[victim] = killedAt;
      await c.signal(victim, 'SIGKILL');
      kills[victim]!++;
      await delay(downMs);
      await c.restart(victim, fresh ? { WRITER_ID: `writer-${++freshWriters}` } : {});
      if (victim in outage) outage[victim] = Math.max(outage[victim]!, Date.now() - killedAt);
      downSince[victim] = undefined;
    }
  }
  const { accepted, final, orders } = await windDown(env, sale.id, shoppers, live);
  const [paid, expired] = [await orderCount(env, sale.id, 'paid'), await orderCount(env, sale.id, 'expired')];
  log.note(
    `purchases ${JSON.stringify(shoppers.purchases)}; orders ${orders}: ${paid} paid, ${expired} expired; live checks skipped ${live.skipped}`,
  );
  const events = await eventsHeld(env, sale.id, receiver);
  log.note(`events received by type ${JSON.stringify(events.received)}; sent again ${events.again}`);
  const left = await env.redis.hgetall(saleKeys(sale.id).variantsLeft);
  log.note(
    `sizes, most wanted first: ${demand.skus.map((sku) => `${sku} ${shoppers.soldOutAt.has(sku) ? `sold out at t+${shoppers.soldOutAt.get(sku)}ms` : 'never sold out'}, ${left[sku]} left`).join('; ')}`,
  );
  summarize({
    scenario: 'crashes',
    seed,
    buyers: shoppers.buyers.size,
    orders,
    faults: log.faults,
    faultKinds: `SIGKILL writer ${kills.writer} (${freshWriters} back under a new WRITER_ID), listener ${kills.listener}, replay ${kills.replay}, events ${kills.events}`,
    ...tally(live, final),
    events: { ...events.received, again: events.again },
  });

  assert.deepEqual(live.violations, [], 'invariants while processes were being killed');
  assert.deepEqual(final.violations, [], 'invariants at rest');
  assert.deepEqual(await answersHold(env, sale.id, shoppers), [], 'what buyers were told is what happened');
  assert.equal(receiver.rejected, 0, 'every delivery verified');
  assert.deepEqual(events.received, events.changes, 'one event per change Postgres holds, by type');
  assert.deepEqual(events.missing, [], 'no change without its event');
  assert.deepEqual(events.twoIds, [], 'a change sent again always carries its one webhook-id');
  assert.equal(orders, accepted.length, 'one order per 202, and none without one (the API was never killed)');
  assert.ok(paid > 0 && expired > 0, `buying, paying and expiring all happened: ${paid} paid, ${expired} expired`);
  assert.ok(shoppers.soldOutWithOthersLeft > 0, 'a size sold out while others were still on sale');
  const k = saleKeys(sale.id);
  assert.equal(await env.redis.llen(k.winners), 0);
  assert.deepEqual(
    await env.redis.keys(k.processing('*')),
    [],
    "no batch left in any writer's hands, the dead ids' included",
  );
  assert.deepEqual(c.unexpectedExits, []);
  assert.deepEqual(
    c.errors('replay').filter((l) => l.includes('CONSERVATION_VIOLATED')),
    [],
  );
  // In this process: the check's verdict is the point here, test/cli.test.ts holds its process's exit.
  const check = await cliHere(env, ['check', '--sale', sale.id, '--interval', '1']);
  assert.equal(check.code, 0, check.stdout);
  assert.equal(check.stdout, '9 checks, 0 violations\n');
  assert.deepEqual(
    await c.stopAll(),
    { api: 0, writer: 0, listener: 0, replay: 0, events: 0 },
    'every process stops cleanly on SIGTERM',
  );
});

/**
 * Once every delivery is done: the changes Postgres holds (orders written, paid, expired,
 * cancelled; refunds due) by type, the distinct events the receiver got by type, each change's
 * event missing, and any change that came under two webhook-ids. A duplicate's body must match.
 */
async function eventsHeld(env: TestEnv, saleId: string, receiver: Receiver) {
  await waitFor(
    'every event delivered',
    async () => {
      const left = await env.pool.query<{ n: number }>(
        `select (select count(*) from events where dispatched_at is null)
              + (select count(*) from deliveries where status = 'pending')::int as n`,
      );
      return left.rows[0]!.n === 0;
    },
    60_000,
    100,
  );
  const again = duplicates(receiver.seen).length;
  const rows = await env.pool.query<{ type: string; key: string }>(
    `select 'order.created' as type, id as key from orders where sale_id = $1
     union all select 'order.' || status, id from orders where sale_id = $1 and status <> 'pending'
     union all select 'payment.refund_due', p.order_id || '/' || p.id from payments p join orders o on o.id = p.order_id
       where o.sale_id = $1 and p.outcome = 'refund_due'`,
    [saleId],
  );
  const changes: Record<string, number> = {};
  for (const r of rows.rows) changes[r.type] = (changes[r.type] ?? 0) + 1;
  // A change is its type and order (a refund: and its payment); the receiver sees it by webhook-id.
  const idsOf = new Map<string, Set<string>>();
  for (const g of receiver.got) {
    if (g.body.sale_id !== saleId) continue;
    const payment = (g.body.data.payment as { id: string } | undefined)?.id;
    const key = `${g.body.type} ${g.body.data.order_id}${payment ? `/${payment}` : ''}`;
    idsOf.set(key, (idsOf.get(key) ?? new Set()).add(g.id));
  }
  const received: Record<string, number> = {};
  for (const key of idsOf.keys()) {
    const type = key.split(' ')[0]!;
    received[type] = (received[type] ?? 0) + 1;
  }
  return {
    changes,
    received,
    again,
    missing: rows.rows.map((r) => `${r.type} ${r.key}`).filter((k) => !idsOf.has(k)),
    twoIds: [...idsOf].filter(([, ids]) => ids.size > 1).map(([key]) => key),
  };
}
