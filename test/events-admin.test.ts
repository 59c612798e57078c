// Outbound events for the operator: the admin routes that match `flashsale events list|show|replay`
// (bad input refused with nothing changed), and the pruning of delivery attempts past
// EVENTS_ATTEMPTS_RETENTION_DAYS. No delivery process runs unless a test starts one: deliveries are
// claimed and settled here with the daemon's own steps, so each test knows what they hold.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { EventDelivery } from '../shared/events/delivery.js';
import { CLAIM, claimDeliveries, delivered } from '../shared/events/deliveries.js';
import { dispatchAll } from '../shared/events/dispatch.js';
import { addEndpoint, disableEndpoint } from '../shared/events/endpoints.js';
import { pruneAttempts } from '../shared/events/prune.js';
import { ORDERS_CREATED } from '../shared/events/record.js';
import { createPool, type Pool } from '../shared/runtime/db.js';
import { apiSuite } from './support/api.js';
import type { TestEnv } from './support/env.js';
import { drainWriter, newSale, waitFor } from './support/fixtures.js';
import type { Inject } from './support/http.js';
import { ADMIN_TOKEN, auth } from './support/tokens.js';

let env: TestEnv;
let call: Inject;
apiSuite((s) => ({ env, call } = s));

const headers = { authorization: `Bearer ${ADMIN_TOKEN}` };

/** A sale of `n` pending orders written by the writer, its events dispatched: their sequences, oldest first.
 * A unit is left, so it records no sale.sold_out. */
async function saleOf(n: number): Promise<{ saleId: string; sequences: number[] }> {
  const sale = await newSale(env, { stock: n + 1, paymentWindowSeconds: 3600 });
  for (let i = 0; i < n; i++)
    assert.equal(
      (await call('POST', `/api/sales/${sale.id}/purchases`, { body: { qty: 1 }, user: `b${i}` })).status,
      202,
    );
  await drainWriter(env, `w-${sale.id}`);
  await dispatchAll(env.pool);
  const res = await env.pool.query<{ id: string }>(
    'select id from events where sale_id = $1 and type <> $2 order by id',
    [sale.id, ORDERS_CREATED],
  );
  return { saleId: sale.id, sequences: res.rows.map((r) => Number(r.id)) };
}

/** Every delivery row, as they stand: what a refused request must leave alone. */
const deliveryRows = async () =>
  (
    await env.pool.query(
      'select event_id, endpoint_id, status, attempts, next_at, done_at from deliveries order by event_id, endpoint_id',
    )
  ).rows;

/** Delivers the oldest delivery due to `endpointId` as the daemon would on a 204; returns its event. */
async function deliverOne(endpointId: string): Promise<number> {
  const [c] = await claimDeliveries(env.pool, endpointId, 1, 60_000);
  assert.ok(c, 'a delivery was due');
  await delivered(env.pool, endpointId, c, { status: 204, latencyMs: 12, error: null });
  return c.eventId;
}

describe('events admin', () => {
  const pools: Pool[] = [];
  after(async () => {
    for (const p of pools) await p.end();
  });

  test('events (admin API): the newest first with deliveries by status, filtered; one shown with its attempts', async () => {
    const { endpoint } = await addEndpoint(env.pool, { url: 'https://shop.example/list', allowPrivate: false });
    const { saleId, sequences } = await saleOf(3);
    const [first, second, third] = sequences as [number, number, number];
    assert.equal(await deliverOne(endpoint.id), first);

    const listed = await call('GET', `/api/events?saleId=${saleId}`, { headers });
    assert.equal(listed.status, 200, JSON.stringify(listed.body));
    const rows = listed.body.events as Record<string, unknown>[];
    assert.deepEqual(
      rows.map((e) => [e.sequence, e.type, e.saleId, e.delivered, e.pending, e.failed]),
      [
        [third, 'order.created', saleId, 0, 1, 0],
        [second, 'order.created', saleId, 0, 1, 0],
        [first, 'order.created', saleId, 1, 0, 0],
      ],
    );
    const limited = await call('GET', `/api/events?saleId=${saleId}&limit=2`, { headers });
    assert.deepEqual(
      (limited.body.events as { sequence: number }[]).map((e) => e.sequence),
      [third, second],
    );
    const future = new Date(Date.now() + 3_600_000).toISOString();
    const none = await call('GET', `/api/events?saleId=${saleId}&since=${encodeURIComponent(future)}`, { headers });
    assert.deepEqual(none.body, { events: [] });

    const shown = await call('GET', `/api/events/${first}`, { headers });
    assert.equal(shown.status, 200, JSON.stringify(shown.body));
    const body = shown.body.body as { sequence: number; type: string; data: Record<string, unknown> };
    assert.equal(body.sequence, first);
    assert.equal(body.type, 'order.created');
    assert.equal(body.data.status, 'pending');
    assert.equal(body.data.sale_id, saleId);
    assert.deepEqual(
      (shown.body.attempts as Record<string, unknown>[]).map((a) => [a.endpointId, a.attempt, a.status, a.latencyMs]),
      [[endpoint.id, 1, 204, 12]],
    );
    const unknown = await call('GET', '/api/events/1', { headers });
    assert.deepEqual([unknown.status, unknown.body.error], [404, 'event_not_found']);
    const malformed = await call('GET', '/api/events/12abc', { headers });
    assert.deepEqual([malformed.status, malformed.body.error], [400, 'invalid_id']);
    for (const path of ['/api/events', `/api/events/${first}`]) {
      assert.equal((await call('GET', path)).status, 401, path);
      assert.equal((await call('GET', path, { headers: auth('mallory') })).status, 403, path);
    }
    await disableEndpoint(env.pool, endpoint.id);
  });

  test('events (admin API): a replay makes delivered events due again to one endpoint; bad input changes nothing', async () => {
    const start = new Date(Date.now() - 1000).toISOString();
    const a = await addEndpoint(env.pool, { url: 'https://shop.example/a', allowPrivate: false });
    const b = await addEndpoint(env.pool, { url: 'https://shop.example/b', allowPrivate: false });
    const { saleId, sequences } = await saleOf(2);
    const [first] = sequences as [number, number];
    assert.equal(await deliverOne(a.endpoint.id), first);
    assert.equal(await deliverOne(b.endpoint.id), first);

    const before = await deliveryRows();
    const refusals: [string, string, unknown, number, string, RegExp][] = [
      ['GET', `/api/events?limit=0`, undefined, 400, 'bad_request', /limit/],
      ['GET', `/api/events?since=yesterday`, undefined, 400, 'bad_request', /since/],
      ['GET', `/api/events?sale=${saleId}`, undefined, 400, 'bad_request', /sale/],
      ['POST', '/api/events/replay', {}, 400, 'bad_request', /since/],
      ['POST', '/api/events/replay', { since: 'yesterday' }, 400, 'bad_request', /ISO 8601/],
      ['POST', '/api/events/replay', { since: start, endpoint: a.endpoint.id }, 400, 'bad_request', /endpoint/],
      ['POST', '/api/events/replay', { since: start, saleId: 'no such/sale' }, 400, 'bad_request', /saleId/],
      ['POST', '/api/events/replay', { since: start, endpointId: 'ep_nope' }, 404, 'endpoint_not_found', /ep_nope/],
    ];
    for (const [method, path, body, status, error, message] of refusals) {
      const r = await call(method as 'GET' | 'POST', path, { headers, body });
      assert.equal(r.status, status, `${method} ${path} ${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error, error);
      assert.match(r.body.message as string, message);
    }
    assert.equal((await call('POST', '/api/events/replay', { body: { since: start } })).status, 401);
    assert.deepEqual(await deliveryRows(), before, 'a refused request changed no delivery');

    const replayed = await call('POST', '/api/events/replay', {
      headers,
      body: { since: start, saleId, endpointId: a.endpoint.id },
    });
    assert.equal(replayed.status, 200, JSON.stringify(replayed.body));
    // The delivered one is due again; the other was pending already.
    assert.deepEqual(replayed.body, { due: 1 });
    const states = await env.pool.query<{ endpoint_id: string; status: string; attempts: number }>(
      'select endpoint_id, status, attempts from deliveries where event_id = $1 order by endpoint_id',
      [first],
    );
    const byEndpoint = Object.fromEntries(states.rows.map((r) => [r.endpoint_id, [r.status, r.attempts]]));
    assert.deepEqual(byEndpoint, { [a.endpoint.id]: ['pending', 0], [b.endpoint.id]: ['delivered', 1] });
    for (const e of [a, b]) await disableEndpoint(env.pool, e.endpoint.id);
  });

  test('events: attempts past the retention are pruned in batches, recent ones and a pending delivery kept', async () => {
    const { endpoint } = await addEndpoint(env.pool, { url: 'https://shop.example/prune', allowPrivate: false });
    const { sequences } = await saleOf(2);
    const done = await deliverOne(endpoint.id);
    const pending = sequences.find((s) => s !== done)!;
    // Nothing is sent to it: the delivery process started below would otherwise try shop.example.
    await disableEndpoint(env.pool, endpoint.id);
    const attempt = (event: number, daysAgo: number) =>
      env.pool.query(
        `insert into delivery_attempts (event_id, endpoint_id, attempt, at, status, latency_ms, error)
         values ($1, $2, 1, now() - make_interval(days => $3), 500, 5, 'HTTP 500')`,
        [event, endpoint.id, daysAgo],
      );
    for (const days of [40, 31, 35]) await attempt(done, days);
    await attempt(done, 29);
    await attempt(pending, 40);
    const kept = async () =>
      (
        await env.pool.query<{ event_id: string; days: number }>(
          `select event_id, round(extract(epoch from now() - at) / 86400)::int as days from delivery_attempts
           where endpoint_id = $1 order by at`,
          [endpoint.id],
        )
      ).rows.map((r) => [Number(r.event_id), r.days]);
    // Two at a time: three old ones take two batches, the second short.
    assert.equal(await pruneAttempts(env.pool, 30, 2), 2);
    assert.equal(await pruneAttempts(env.pool, 30, 2), 1);
    assert.equal(await pruneAttempts(env.pool, 30, 2), 0);
    assert.deepEqual(await kept(), [
      [pending, 40],
      [done, 29],
      [done, 0],
    ]);
    // The pending delivery's old attempt is still shown with its event.
    const shown = await call('GET', `/api/events/${pending}`, { headers });
    assert.deepEqual(
      (shown.body.attempts as { status: number }[]).map((a) => a.status),
      [500],
    );

    // Two pruners at once (two daemons): each old attempt deleted once, none left, no error.
    for (let i = 0; i < 60; i++) await attempt(done, 31 + (i % 5));
    const both = [0, 1].map(() => {
      const pool = createPool(env.config.databaseUrl!, 2);
      pools.push(pool);
      return (async () => {
        let total = 0;
        for (let n = 5; n === 5; total += n) n = await pruneAttempts(pool, 30, 5);
        return total;
      })();
    });
    const counts = await Promise.all(both);
    assert.equal(counts[0]! + counts[1]!, 60);
    assert.equal((await kept()).length, 3);

    // The delivery process prunes at its start.
    await attempt(done, 45);
    const d = new EventDelivery(
      env.pool,
      { ...env.config, eventsPollMs: 20, eventsAllowPrivateEndpoints: true },
      env.logger,
    );
    d.start();
    try {
      await waitFor('the old attempt pruned by the delivery process', async () => (await kept()).length === 3);
    } finally {
      await d.stop();
    }
    assert.deepEqual(await kept(), [
      [pending, 40],
      [done, 29],
      [done, 0],
    ]);
  });
  test('events: a claim reads a handful of rows with 5,000 deliveries pending to its endpoint, and an order waits for its oldest', async () => {
    const { endpoint } = await addEndpoint(env.pool, { url: 'https://shop.example/claim', allowPrivate: false });
    // 2,500 orders with two events each, every first before every second; nothing is delivered.
    for (const type of ['order.created', 'order.paid'])
      await env.pool.query(
        `insert into events (type, sale_id, order_id, payload)
         select $1, 'claim-plan', 'o-' || n, '{}'::jsonb from generate_series(1, 2500) n order by n`,
        [type],
      );
    await dispatchAll(env.pool);
    const due = await env.pool.query<{ id: string; type: string; order_id: string }>(
      `select e.id, e.type, e.order_id from deliveries d join events e on e.id = d.event_id
       where d.endpoint_id = $1 and d.status = 'pending' order by e.id`,
      [endpoint.id],
    );
    assert.equal(due.rows.length, 5000);
    const idOf = (type: string, order: string) =>
      Number(due.rows.find((r) => r.type === type && r.order_id === order)!.id);

    // The plan, run (in a transaction rolled back: a claim locks what it reads): before, a claim
    // sorted every due row and, on a table Postgres had not analyzed, read them all again per row.
    const client = await env.pool.connect();
    let plan: { Plan: Record<string, unknown> };
    try {
      await client.query('begin');
      const res = await client.query(`explain (analyze, buffers, format json) ${CLAIM}`, [endpoint.id, 4]);
      plan = (res.rows[0]['QUERY PLAN'] as { Plan: Record<string, unknown> }[])[0]!;
    } finally {
      await client.query('rollback');
      client.release();
    }
    const blocks = (plan.Plan['Shared Hit Blocks'] as number) + (plan.Plan['Shared Read Blocks'] as number);
    assert.ok(blocks < 100, `a claim of 4 read ${blocks} blocks`);
    assert.doesNotMatch(JSON.stringify(plan), /"Node Type":"Sort"/);

    const first = await claimDeliveries(env.pool, endpoint.id, 4, 60_000);
    assert.deepEqual(
      first.map((c) => c.eventId),
      ['o-1', 'o-2', 'o-3', 'o-4'].map((o) => idOf('order.created', o)),
    );
    // Every first event backing off: no second one is due, though every second one is.
    await env.pool.query(
      `update deliveries d set next_at = now() + interval '1 hour' from events e
       where e.id = d.event_id and d.endpoint_id = $1 and e.type = 'order.created'`,
      [endpoint.id],
    );
    assert.deepEqual(await claimDeliveries(env.pool, endpoint.id, 4, 60_000), []);
    // o-7's first delivered: its second is the one due.
    const [c7] = await env.pool
      .query<{ attempts: number }>('select attempts from deliveries where endpoint_id = $1 and event_id = $2', [
        endpoint.id,
        idOf('order.created', 'o-7'),
      ])
      .then((r) => r.rows);
    await delivered(
      env.pool,
      endpoint.id,
      { eventId: idOf('order.created', 'o-7'), attempt: c7!.attempts },
      { status: 204, latencyMs: 3, error: null },
    );
    assert.deepEqual(
      (await claimDeliveries(env.pool, endpoint.id, 4, 60_000)).map((c) => c.eventId),
      [idOf('order.paid', 'o-7')],
    );
    await disableEndpoint(env.pool, endpoint.id);
  });
});
