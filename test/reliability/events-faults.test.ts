// Outbound events (docs/events.md) through faults, to a real receiver verifying each request with
// the standardwebhooks package: the receiver down, hanging, closing the connection and redirecting;
// the delivery process (`flashsale events`) SIGKILLed with a batch in flight; Postgres crashed while
// the writer drains and events go out. Every event arrives at least once, a duplicate carries the
// same webhook-id and body, and a change that rolled back has no event. The Postgres here is this
// file's own: crashing the run's shared one would break the others.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Config } from '../../shared/config/index.js';
import { EventDelivery } from '../../shared/events/delivery.js';
import { dispatchAll } from '../../shared/events/dispatch.js';
import { addEndpoint } from '../../shared/events/endpoints.js';
import { ORDERS_CREATED } from '../../shared/events/record.js';
import { writeOrders } from '../../shared/orders/queries.js';
import { saleKeys } from '../../shared/redis/keys.js';
import { createPool } from '../../shared/runtime/db.js';
import { delay } from '../../shared/runtime/daemon.js';
import { newOrderId } from '../../shared/runtime/ids.js';
import { purchaseScript } from '../../shared/sales/scripts.js';
import type { Vars } from '../support/cli.js';
import { Cluster } from '../support/cluster.js';
import { testEnv, type TestEnv } from '../support/env.js';
import { drainWriter, newSale, orderCount, seededRandom, waitFor } from '../support/fixtures.js';
import { type Answer, duplicates, Receiver } from '../support/receiver.js';
import { beginScenario, FaultLog } from '../support/scenario.js';

let env: TestEnv;
let cluster: Cluster;
const receivers: Receiver[] = [];

before(async () => {
  env = await testEnv({}, { ownPostgres: true });
  cluster = new Cluster(env, new FaultLog('events-faults'));
});
after(async () => {
  cluster?.killAll();
  for (const r of receivers) await r.stop();
  await env?.close();
});

/** A receiver on a new endpoint, the only one enabled: it hears only what this test makes. */
async function soleReceiver(answer?: (n: number) => Answer): Promise<{ r: Receiver; endpointId: string }> {
  await dispatchAll(env.pool);
  await env.pool.query("update endpoints set enabled = false, disabled_reason = 'an earlier test'");
  const r = new Receiver([], answer);
  receivers.push(r);
  await r.start();
  const { secret, endpoint } = await addEndpoint(env.pool, { url: r.url, allowPrivate: true });
  r.secrets = [secret];
  return { r, endpointId: endpoint.id };
}

/** A sale of `n` pending orders, bought through the purchase script and written by a writer; a unit is
 * left, so it records no sale.sold_out and each order is one event. */
async function saleOf(n: number): Promise<string> {
  const sale = await newSale(env, { stock: n + 1, paymentWindowSeconds: 3600 });
  for (let i = 0; i < n; i++) {
    const [code] = await purchaseScript(env.redis, {
      saleId: sale.id,
      userId: `b${i}`,
      qty: 1,
      orderId: newOrderId(sale.id),
      buyCountTtlSeconds: 3600,
    });
    assert.equal(code, 1);
  }
  await drainWriter(env, `w-${sale.id}`);
  return sale.id;
}

/** The webhook-ids of a sale's deliverable events (the writer's batch rows fanned out), sorted as strings. */
async function idsOf(saleId: string): Promise<string[]> {
  await dispatchAll(env.pool);
  const res = await env.pool.query<{ id: string }>(
    'select id from events where sale_id = $1 and type <> $2 order by id',
    [saleId, ORDERS_CREATED],
  );
  return res.rows.map((r) => `msg_${r.id}`).sort();
}

const pendingTo = async (endpointId: string) =>
  (
    await env.pool.query<{ n: number }>(
      "select count(*)::int as n from deliveries where endpoint_id = $1 and status = 'pending'",
      [endpointId],
    )
  ).rows[0]!.n;

const unique = (ids: string[]) => [...new Set(ids)].sort();

/** `flashsale events` polling and retrying fast, as a process. */
// The receiver is on loopback, which delivery refuses unless allowed.
const EVENTS_VARS: Vars = {
  EVENTS_POLL_MS: '20',
  EVENTS_RETRY_BASE_MS: '50',
  EVENTS_CONCURRENCY: '4',
  EVENTS_ALLOW_PRIVATE_ENDPOINTS: 'true',
};

test('events: a receiver down, hanging, closing the connection and redirecting gets every event once it answers, never the redirect', async () => {
  const { r, endpointId } = await soleReceiver((n) => (['hang', 'close', 302] as Answer[])[n] ?? 204);
  // Down from the start: the port is kept, nothing listens.
  await r.stop();
  const saleId = await saleOf(2);
  const ids = await idsOf(saleId);
  const config: Config = {
    ...env.config,
    eventsPollMs: 20,
    eventsRetryBaseMs: 20,
    eventsTimeoutMs: 1000,
    eventsConcurrency: 1,
    eventsAllowPrivateEndpoints: true,
  };
  const d = new EventDelivery(env.pool, config, env.logger);
  d.start();
  const attempts = async () =>
    (
      await env.pool.query<{ status: number | null; error: string | null }>(
        'select status, error from delivery_attempts where endpoint_id = $1 order by id',
        [endpointId],
      )
    ).rows;
  await waitFor('two attempts refused while the receiver is down', async () => {
    const a = await attempts();
    return a.filter((x) => x.error === 'ECONNREFUSED').length >= 2;
  });
  await r.start();
  await waitFor('both events delivered', async () => r.got.length >= 2 && (await pendingTo(endpointId)) === 0);
  await d.stop();

  assert.equal(r.rejected, 0);
  assert.deepEqual(r.got.map((g) => g.id).sort(), ids);
  // The three faulted requests each carried one of the two events, and came again with the same body.
  assert.deepEqual(unique(r.got.map((g) => g.id)), ids);
  assert.deepEqual(unique(r.seen.map((s) => s.id)), ids);
  duplicates(r.seen);
  assert.ok(!r.paths.includes('/elsewhere'), 'a redirect is never followed');
  const tried = await attempts();
  const refused = tried.filter((a) => a.error === 'ECONNREFUSED').length;
  assert.ok(refused >= 2);
  // After the refusals, one attempt per request the receiver heard, in order: the hang timed out,
  // the closed connection (ECONNRESET), the redirect, then both delivered (a 204 slower than the timeout, on a
  // loaded machine, is one more timeout and its event sent again).
  const reached = tried.slice(refused);
  assert.equal(reached.length, r.requests);
  assert.deepEqual(reached.slice(0, 3), [
    { status: null, error: 'TimeoutError' },
    { status: null, error: 'ECONNRESET' },
    { status: 302, error: 'HTTP 302' },
  ]);
  assert.deepEqual(
    reached.slice(3).filter((a) => a.error !== 'TimeoutError'),
    [
      { status: 204, error: null },
      { status: 204, error: null },
    ],
  );
  const ep = await env.pool.query('select failing_since, enabled from endpoints where id = $1', [endpointId]);
  assert.deepEqual(ep.rows[0], { failing_since: null, enabled: true });
});

test('events: `flashsale events` SIGKILLed with a batch in flight; after a restart every event arrives, the batch again with the same webhook-ids and bodies', async () => {
  // Every request hangs: the process's first batch stays in flight until it is killed.
  const { r, endpointId } = await soleReceiver(() => 'hang');
  const saleId = await saleOf(24);
  const ids = await idsOf(saleId);
  // A long timeout: the batch is still in flight when the kill lands, however slow the machine.
  await cluster.start('events', 'events', { ...EVENTS_VARS, EVENTS_TIMEOUT_MS: '30000' });
  await waitFor('a batch of four in flight', async () => r.hanging.size === 4);
  const inFlight = unique(r.seen.map((s) => s.id));
  assert.equal(inFlight.length, 4);
  await cluster.signal('events', 'SIGKILL');
  r.answer = () => 204;
  // The killed process's claims wait out their lease (twice the timeout and 5 s): brought forward
  // here, as when the lease runs out.
  const leased = await env.pool.query<{ event_id: string }>(
    `update deliveries set next_at = now() where endpoint_id = $1 and status = 'pending' and next_at > now()
     returning event_id`,
    [endpointId],
  );
  assert.deepEqual(unique(leased.rows.map((l) => `msg_${l.event_id}`)), inFlight, 'the batch in flight was leased');
  await cluster.restart('events');
  await waitFor('every event delivered', async () => r.got.length >= ids.length && (await pendingTo(endpointId)) === 0);
  assert.equal(await cluster.signal('events', 'SIGTERM', true), 0);

  assert.equal(r.rejected, 0);
  assert.deepEqual(r.got.map((g) => g.id).sort(), ids, 'each event answered 2xx once');
  assert.deepEqual(duplicates(r.seen), inFlight, 'only the batch in flight came twice, with the same body');
  const states = await env.pool.query<{ status: string; n: number }>(
    'select status, count(*)::int as n from deliveries where endpoint_id = $1 group by status',
    [endpointId],
  );
  assert.deepEqual(states.rows, [{ status: 'delivered', n: ids.length }]);
  assert.deepEqual(cluster.unexpectedExits, []);
});

test('events: Postgres crashed while the writer drains and events go out; every written order has its order.created, a rolled-back batch none', async () => {
  const { seed, log, rand } = beginScenario('events-postgres-crash', cluster);
  const PURCHASES = 400;
  const { r, endpointId } = await soleReceiver();
  const sale = await newSale(env, { stock: PURCHASES, paymentWindowSeconds: 3600 });
  await Promise.all([
    cluster.start('writer', 'order-writer', { WRITER_ID: 'writer-0', WRITER_BATCH_SIZE: '100' }),
    cluster.start('events-pg', 'events', { ...EVENTS_VARS, EVENTS_CONCURRENCY: '16', EVENTS_TIMEOUT_MS: '2000' }),
  ]);
  const accepted: string[] = [];
  const refused: number[] = [];
  let next = 0;
  const buying = Promise.all(
    Array.from({ length: 10 }, async (_, b) => {
      const pace = seededRandom(seed + 1 + b);
      while (next < PURCHASES) {
        const orderId = newOrderId(sale.id);
        const [code] = await purchaseScript(env.redis, {
          saleId: sale.id,
          userId: `buyer-${next++}`,
          qty: 1,
          orderId,
          buyCountTtlSeconds: 3600,
        });
        if (code === 1) accepted.push(orderId);
        else refused.push(code);
        // About 200 a second: the writer is still draining when Postgres goes down.
        await delay(pace() * 100);
      }
    }),
  );
  const written = () => orderCount(env, sale.id).catch(() => 0);
  const crashAt = 120 + rand() * 120;
  await waitFor(
    `${Math.round(crashAt)} orders written and their events going out`,
    async () => (await written()) >= crashAt && r.got.length > 0,
    60_000,
    20,
  );
  // A batch whose transaction the crash kills: the writer's own statement (orders and their
  // orders.created row) on a pool of one connection inside a transaction left open.
  const doomedSale = await newSale(env, { stock: 5, paymentWindowSeconds: 3600 });
  const doomed = Array.from({ length: 5 }, () => newOrderId(doomedSale.id));
  const open = createPool(env.config.databaseUrl!, 1);
  await open.query('begin');
  await writeOrders(
    open,
    doomedSale.id,
    doomed.map((orderId, i) => ({ orderId, userId: `d${i}`, qty: 1, seq: i + 1, purchasedAt: Date.now() })),
  );
  const inside = await open.query<{ n: number }>('select count(*)::int as n from events where sale_id = $1', [
    doomedSale.id,
  ]);
  assert.equal(inside.rows[0]!.n, 1, "the open batch's orders.created row, seen inside its transaction");
  const before = await written();
  log.fault(`Postgres immediate stop (SIGQUIT) with ${before} orders written, ${r.got.length} events delivered`);
  await env.crashPostgres();
  await delay(200 + rand() * 600);
  await env.startPostgres();
  await open.end().catch(() => {});
  await buying;
  const k = saleKeys(sale.id);
  await waitFor(
    'every purchase written',
    async () => (await env.redis.hlen(k.queued)) === 0 && (await env.redis.llen(k.winners)) === 0,
    60_000,
    100,
  );
  const orders = await orderCount(env, sale.id);
  await waitFor(
    'every order.created delivered',
    async () =>
      unique(r.got.filter((g) => g.body.sale_id === sale.id).map((g) => g.id)).length >= orders &&
      (await pendingTo(endpointId)) === 0,
    60_000,
    100,
  );
  const codes = await Promise.all([
    cluster.signal('writer', 'SIGTERM', true),
    cluster.signal('events-pg', 'SIGTERM', true),
  ]);

  const ids = await idsOf(sale.id);
  const createdFor = new Map<string, Set<string>>();
  for (const g of r.got) {
    if (g.body.type !== 'order.created') continue;
    const orderId = g.body.data.order_id as string;
    createdFor.set(orderId, (createdFor.get(orderId) ?? new Set()).add(g.id));
  }
  const twice = duplicates(r.seen);
  log.note(`orders ${orders}; events ${ids.length}; received ${r.seen.length}, ${twice.length} of them again`);
  assert.deepEqual({ accepted: accepted.length, refused }, { accepted: PURCHASES, refused: [] });
  assert.equal(orders, PURCHASES, 'every purchase written, through the crash');
  assert.equal(r.rejected, 0);
  assert.deepEqual(unique(r.got.map((g) => g.id)), ids, 'every event delivered');
  const inTable = await env.pool.query<{ id: string }>('select id from orders where sale_id = $1', [sale.id]);
  assert.deepEqual([...createdFor.keys()].sort(), inTable.rows.map((o) => o.id).sort(), 'one order.created per order');
  assert.deepEqual(
    [...createdFor].filter(([, hooks]) => hooks.size > 1),
    [],
    "an order's order.created always carries the one webhook-id",
  );
  const rolledBack = await env.pool.query<{ orders: number; events: number }>(
    `select (select count(*)::int from orders where sale_id = $1) as orders,
            (select count(*)::int from events where sale_id = $1) as events`,
    [doomedSale.id],
  );
  assert.deepEqual(rolledBack.rows[0], { orders: 0, events: 0 }, 'the rolled-back batch left no order and no event');
  assert.deepEqual(
    r.seen.filter((s) => s.body.sale_id === doomedSale.id),
    [],
  );
  assert.deepEqual(codes, [0, 0], 'both processes rode out the crash and stop cleanly');
  assert.deepEqual(cluster.unexpectedExits, []);
});
