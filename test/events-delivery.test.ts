// Delivery of outbound events (docs/events.md) to a real HTTP receiver on 127.0.0.1 that checks
// each request with the standardwebhooks package, as a shop would: every event arrives, an order's
// events in sequence order, failures are retried, a rotation signs with both secrets, two delivery
// processes share the work without losing an event, and an endpoint failing past the horizon is
// disabled.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import type { Config } from '../shared/config/index.js';
import { isPrivateAddress, type Resolve, systemResolve } from '../shared/events/address.js';
import { EventDelivery } from '../shared/events/delivery.js';
import { dispatchAll } from '../shared/events/dispatch.js';
import { addEndpoint, checkEndpointUrl, rotateSecret } from '../shared/events/endpoints.js';
import { listEvents, replayEvents, showEvent } from '../shared/events/inspect.js';
import { ORDERS_CREATED } from '../shared/events/record.js';
import { refreshGauges } from '../shared/events/stats.js';
import { closeDue } from '../shared/orders/queries.js';
import { createPool, type Pool } from '../shared/runtime/db.js';
import { metrics } from '../shared/runtime/metrics.js';
import { apiSuite } from './support/api.js';
import type { TestEnv } from './support/env.js';
import { drainWriter, newSale, waitFor } from './support/fixtures.js';
import type { Inject } from './support/http.js';
import { paySigned } from './support/payments.js';
import { Receiver } from './support/receiver.js';
import { ADMIN_TOKEN } from './support/tokens.js';

let env: TestEnv;
let call: Inject;
apiSuite((s) => ({ env, call } = s));

type Metric = { values: { labels: Record<string, unknown>; value: number }[] };
const gauge = (m: Metric, endpoint: string) => m.values.find((v) => v.labels.endpoint === endpoint)?.value ?? -1;
const count = (m: Metric, outcome: string) => m.values.find((v) => v.labels.outcome === outcome)?.value ?? 0;

/** Quick retries; the receivers are on loopback, which delivery refuses unless allowed. */
const fast = (c: Config): Config => ({
  ...c,
  eventsPollMs: 20,
  eventsRetryBaseMs: 20,
  eventsTimeoutMs: 2000,
  eventsAllowPrivateEndpoints: true,
});

/** Stops every earlier test's endpoint, so a test's receiver hears only its own sale. */
async function onlyNewEndpoints(): Promise<void> {
  await dispatchAll(env.pool);
  await env.pool.query("update endpoints set enabled = false, disabled_reason = 'an earlier test'");
}

/** A sale of `n` buyers' pending orders, written by the writer; a unit is left, so it records no sale.sold_out. */
async function saleOf(n: number): Promise<{ saleId: string; ids: string[] }> {
  const sale = await newSale(env, { stock: n + 1, paymentWindowSeconds: 3600 });
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const r = await call('POST', `/api/sales/${sale.id}/purchases`, { body: { qty: 1 }, user: `b${i}` });
    assert.equal(r.status, 202);
    ids.push(r.body.orderId as string);
  }
  await drainWriter(env, `w-${sale.id}`);
  return { saleId: sale.id, ids };
}

/** The sequences of the sale's deliverable events (the writer's batch rows fanned out). */
async function sequencesOf(saleId: string): Promise<number[]> {
  await dispatchAll(env.pool);
  const res = await env.pool.query<{ id: string }>(
    'select id from events where sale_id = $1 and type <> $2 order by id',
    [saleId, ORDERS_CREATED],
  );
  return res.rows.map((r) => Number(r.id));
}

describe('events delivery', () => {
  const receivers: Receiver[] = [];
  const deliveries: EventDelivery[] = [];
  const pools: Pool[] = [];
  after(async () => {
    for (const d of deliveries) await d.stop();
    for (const p of pools) await p.end();
    for (const r of receivers) await r.stop();
  });
  const receiver = async (secrets: string[], answer?: (n: number) => number, headers?: Record<string, string>) => {
    const r = new Receiver(secrets, answer, headers);
    receivers.push(r);
    return { r, url: await r.start() };
  };
  const deliver = (config = fast(env.config), pool = env.pool, resolve?: Resolve) => {
    const d = new EventDelivery(pool, config, env.logger, resolve);
    deliveries.push(d);
    d.start();
    return d;
  };

  test('delivery: every event of a sale arrives signed, each order in sequence order, once', async () => {
    await onlyNewEndpoints();
    const { r, url } = await receiver([]);
    const { secret } = await addEndpoint(env.pool, { url, allowPrivate: true });
    r.secrets = [secret];
    const { saleId, ids } = await saleOf(3);
    const [paid, cancelled, expired] = ids as [string, string, string];
    await paySigned(call, paid);
    const c = await call('POST', `/api/orders/${cancelled}/cancel`, { user: 'b1' });
    assert.equal(c.status, 200, JSON.stringify(c.body));
    await env.pool.query("update orders set expires_at = now() - interval '1 second' where id = $1", [expired]);
    assert.equal((await closeDue(env.pool, [expired])).length, 1);
    const sequences = await sequencesOf(saleId);
    assert.equal(sequences.length, 6);
    const d = deliver();
    await waitFor('every event delivered', async () => r.got.length >= sequences.length);
    await d.stop();
    assert.equal(r.rejected, 0);
    assert.deepEqual(
      r.got.map((g) => g.body.sequence).sort((a, b) => a - b),
      sequences,
    );
    assert.deepEqual(r.got.map((g) => g.id).sort(), sequences.map((s) => `msg_${s}`).sort());
    for (const id of ids) {
      const mine = r.got.filter((g) => g.body.data.order_id === id).map((g) => g.body.sequence);
      assert.deepEqual(
        mine,
        [...mine].sort((a, b) => a - b),
        `order ${id}'s events arrived out of order`,
      );
    }
    const types = (id: string) => r.got.filter((g) => g.body.data.order_id === id).map((g) => g.body.type);
    assert.deepEqual(types(paid), ['order.created', 'order.paid']);
    assert.deepEqual(types(cancelled), ['order.created', 'order.cancelled']);
    assert.deepEqual(types(expired), ['order.created', 'order.expired']);
    const states = await env.pool.query<{ status: string; n: number }>(
      `select d.status, count(*)::int as n from deliveries d join events e on e.id = d.event_id
       where e.sale_id = $1 group by d.status`,
      [saleId],
    );
    assert.deepEqual(states.rows, [{ status: 'delivered', n: 6 }]);
  });

  test('delivery: a receiver answering 500, then recovering, gets every event retried', async () => {
    await onlyNewEndpoints();
    // The first five requests fail.
    const { r, url } = await receiver([], (n) => (n < 5 ? 500 : 200));
    const { secret, endpoint } = await addEndpoint(env.pool, { url, allowPrivate: true });
    r.secrets = [secret];
    const { saleId } = await saleOf(4);
    const sequences = await sequencesOf(saleId);
    // The gauges before: all four due to it; the counters from here on.
    await refreshGauges(env.pool);
    assert.equal(gauge(await metrics.eventsPending.get(), endpoint.id), 4);
    assert.ok(gauge(await metrics.eventsOldestPending.get(), endpoint.id) >= 0);
    // Read into numbers now: get() hands out the counter's own value objects, which go on counting.
    const counted = async () => {
      const m = await metrics.eventDeliveries.get();
      return ['retry', 'delivered', 'failed'].map((outcome) => count(m, outcome));
    };
    const before = await counted();
    const d = deliver();
    await waitFor('every event delivered after the failures', async () => r.got.length >= sequences.length);
    await d.stop();
    const rose = (await counted()).map((n, i) => n - before[i]!);
    assert.deepEqual(rose, [5, sequences.length, 0]);
    await refreshGauges(env.pool);
    assert.equal(gauge(await metrics.eventsPending.get(), endpoint.id), 0);
    assert.deepEqual(
      r.got.map((g) => g.body.sequence).sort((a, b) => a - b),
      sequences,
    );
    const attempts = await env.pool.query<{ failed: number; ok: number }>(
      `select count(*) filter (where status = 500)::int as failed, count(*) filter (where status = 200)::int as ok
       from delivery_attempts where endpoint_id = $1`,
      [endpoint.id],
    );
    assert.deepEqual(attempts.rows[0], { failed: 5, ok: sequences.length });
    const ep = await env.pool.query('select failing_since, enabled from endpoints where id = $1', [endpoint.id]);
    assert.deepEqual(ep.rows[0], { failing_since: null, enabled: true });
  });

  test('delivery: after a rotation both secrets sign, so a receiver on either verifies', async () => {
    await onlyNewEndpoints();
    const { r: onOld, url } = await receiver([]);
    const { secret: old, endpoint } = await addEndpoint(env.pool, { url, allowPrivate: true });
    const { secret: fresh } = await rotateSecret(env.pool, endpoint.id, 3600);
    assert.notEqual(fresh, old);
    // Verified by each secret on its own: a receiver still on the old one and one on the new.
    onOld.secrets = [old, fresh];
    const { saleId } = await saleOf(2);
    const sequences = await sequencesOf(saleId);
    const d = deliver();
    await waitFor('both events delivered', async () => onOld.got.length >= sequences.length);
    await d.stop();
    assert.equal(onOld.rejected, 0);
    assert.equal(onOld.got.length, sequences.length);
  });

  test('delivery: two delivery processes deliver each event to each endpoint, none missing, none twice', async () => {
    await onlyNewEndpoints();
    const a = await receiver([]);
    const b = await receiver([]);
    const ea = await addEndpoint(env.pool, { url: a.url, allowPrivate: true });
    const eb = await addEndpoint(env.pool, { url: b.url, allowPrivate: true });
    a.r.secrets = [ea.secret];
    b.r.secrets = [eb.secret];
    const { saleId } = await saleOf(60);
    const sequences = await sequencesOf(saleId);
    const both = [0, 1].map(() => {
      const pool = createPool(env.config.databaseUrl!, 4);
      pools.push(pool);
      return deliver({ ...fast(env.config), eventsConcurrency: 3 }, pool);
    });
    await waitFor('every event at both receivers', async () =>
      a.r.got.length >= sequences.length && b.r.got.length >= sequences.length ? true : undefined,
    );
    // Two processes poll the same table: wait for nothing left pending, then look for doubles.
    await waitFor('nothing pending', async () => {
      const n = await env.pool.query<{ n: number }>(
        "select count(*)::int as n from deliveries where status = 'pending' and endpoint_id = any($1)",
        [[ea.endpoint.id, eb.endpoint.id]],
      );
      return n.rows[0]!.n === 0;
    });
    // Stopped here, not after the file: the next tests count what their own delivery dispatches.
    for (const d of both) await d.stop();
    for (const { r } of [a, b]) {
      assert.equal(r.rejected, 0);
      assert.deepEqual(
        r.got.map((g) => g.body.sequence).sort((x, y) => x - y),
        sequences,
      );
    }
  });

  test('delivery: an endpoint failing for the whole horizon is disabled, and an event older than it fails', async () => {
    await onlyNewEndpoints();
    const { r, url } = await receiver([], () => 503);
    const { secret, endpoint } = await addEndpoint(env.pool, { url, allowPrivate: true });
    r.secrets = [secret];
    const { saleId } = await saleOf(1);
    await dispatchAll(env.pool);
    // Its run of failures and the event began two hours ago, with a horizon of one.
    await env.pool.query("update endpoints set failing_since = now() - interval '2 hours' where id = $1", [
      endpoint.id,
    ]);
    await env.pool.query("update events set created_at = now() - interval '2 hours' where sale_id = $1", [saleId]);
    const d = deliver({ ...fast(env.config), eventsRetryHorizonSeconds: 3600 });
    const ep = await waitFor('the endpoint disabled', async () => {
      const res = await env.pool.query<{ enabled: boolean; disabled_reason: string | null }>(
        'select enabled, disabled_reason from endpoints where id = $1',
        [endpoint.id],
      );
      return res.rows[0]!.enabled ? undefined : res.rows[0]!;
    });
    await d.stop();
    assert.match(ep.disabled_reason ?? '', /retry horizon/);
    const states = await env.pool.query<{ status: string }>('select status from deliveries where endpoint_id = $1', [
      endpoint.id,
    ]);
    assert.deepEqual(states.rows, [{ status: 'failed' }]);
    assert.equal(r.got.length, 0);
  });

  test('events list, show and replay: a replay sends delivered events again, with the same webhook-id', async () => {
    await onlyNewEndpoints();
    const { r, url } = await receiver([]);
    const { secret, endpoint } = await addEndpoint(env.pool, { url, allowPrivate: true });
    r.secrets = [secret];
    const start = new Date(Date.now() - 1000);
    const { saleId, ids } = await saleOf(2);
    const sequences = await sequencesOf(saleId);
    const d = deliver();
    // The receiver has a body before the delivery process records its answer: wait for the record.
    await waitFor(
      'both delivered',
      async () => r.got.length >= 2 && (await listEvents(env.pool, { saleId })).every((e) => e.delivered === 1),
    );
    const listed = await listEvents(env.pool, { saleId });
    assert.deepEqual(
      listed.map((e) => [e.sequence, e.type, e.orderId, e.delivered, e.pending, e.failed]),
      [...sequences].reverse().map((s, i) => [s, 'order.created', ids[1 - i], 1, 0, 0]),
    );
    const shown = await showEvent(env.pool, sequences[0]!);
    assert.equal(shown.body.sequence, sequences[0]);
    assert.deepEqual(
      shown.attempts.map((a) => [a.endpointId, a.attempt, a.status]),
      [[endpoint.id, 1, 204]],
    );
    await assert.rejects(showEvent(env.pool, 1), /No event 1/);
    // Sent again: the same two ids arrive a second time.
    assert.equal(await replayEvents(env.pool, { since: start, saleId, endpointId: endpoint.id }), 2);
    await waitFor('both delivered again', async () => r.got.length >= 4);
    await d.stop();
    const ids2 = r.got.map((g) => g.id);
    assert.deepEqual(ids2.slice(2).sort(), ids2.slice(0, 2).sort());
    assert.equal((await listEvents(env.pool, { saleId }))[0]!.delivered, 1);
  });

  test('endpoints: a loopback, private or link-local address is refused unless allowed', () => {
    for (const url of [
      'http://127.0.0.1/x',
      'http://localhost:8080/',
      'https://10.1.2.3/',
      'https://192.168.0.1/',
      'https://169.254.169.254/latest',
      'http://[::1]/',
    ])
      assert.throws(() => checkEndpointUrl(url, false), /EVENTS_ALLOW_PRIVATE_ENDPOINTS/, url);
    assert.throws(() => checkEndpointUrl('ftp://shop.example/', false), /http/);
    assert.equal(checkEndpointUrl('https://shop.example/hooks', false), 'https://shop.example/hooks');
    assert.equal(checkEndpointUrl('http://127.0.0.1:9/x', true), 'http://127.0.0.1:9/x');
  });

  /** Every earlier test's delivery stopped (one that failed left its own running): the attempts counted are this test's. */
  const stopEarlier = async () => {
    for (const d of deliveries) await d.stop();
  };

  /** The attempts made to `endpointId` once there are `n`, oldest first. */
  const attemptsTo = (endpointId: string, n = 1) =>
    waitFor(`${n} attempt(s) to ${endpointId}`, async () => {
      const res = await env.pool.query<{ status: number | null; error: string | null }>(
        'select status, error from delivery_attempts where endpoint_id = $1 order by id',
        [endpointId],
      );
      return res.rows.length >= n ? res.rows : undefined;
    });

  test('delivery: a name that resolves to a private address is refused, no request sent, unless allowed', async () => {
    await onlyNewEndpoints();
    await stopEarlier();
    const { r, url } = await receiver([]);
    const port = new URL(url).port;
    // localhost through the system resolver; a public-looking name whose second answer is private.
    const local = await addEndpoint(env.pool, { url: `http://localhost:${port}/hooks`, allowPrivate: true });
    const mixed = await addEndpoint(env.pool, { url: `http://shop.example:${port}/hooks`, allowPrivate: false });
    r.secrets = [local.secret];
    const resolved: string[] = [];
    const resolve: Resolve = async (host) => {
      resolved.push(host);
      if (host === 'shop.example')
        return [
          { address: '93.184.216.34', family: 4 },
          { address: '10.0.0.5', family: 4 },
        ];
      return systemResolve(host);
    };
    await saleOf(1);
    const d = deliver({ ...fast(env.config), eventsAllowPrivateEndpoints: false }, env.pool, resolve);
    const [toLocal] = await attemptsTo(local.endpoint.id);
    const [toMixed] = await attemptsTo(mixed.endpoint.id);
    await d.stop();
    assert.equal(toLocal!.status, null);
    assert.match(
      toLocal!.error ?? '',
      /^refused: localhost resolves to (127\.0\.0\.1|::1), .*EVENTS_ALLOW_PRIVATE_ENDPOINTS=true/,
    );
    assert.equal(toMixed!.status, null);
    assert.match(toMixed!.error ?? '', /^refused: shop\.example resolves to 10\.0\.0\.5, /);
    assert.equal(r.requests, 0, 'no request reached the receiver');
    assert.ok(resolved.includes('shop.example') && resolved.includes('localhost'));
    const last = await env.pool.query<{ endpoint_id: string; status: string; last_error: string }>(
      'select endpoint_id, status, last_error from deliveries where endpoint_id = any($1) order by endpoint_id',
      [[local.endpoint.id, mixed.endpoint.id]],
    );
    assert.equal(last.rows.length, 2);
    for (const row of last.rows) {
      assert.equal(row.status, 'pending', 'a refusal is a failed attempt, retried');
      assert.match(row.last_error, /^refused: /);
    }
    // Allowed (development): the same localhost endpoint is delivered to.
    await env.pool.query("update endpoints set enabled = false, disabled_reason = 'done' where id = $1", [
      mixed.endpoint.id,
    ]);
    await env.pool.query('update deliveries set next_at = now() where endpoint_id = $1', [local.endpoint.id]);
    const allowed = deliver();
    await waitFor('delivered once allowed', async () => r.got.length >= 1);
    await allowed.stop();
    assert.equal(r.rejected, 0);
  });

  test('delivery: connects to the address the name was checked to resolve to, and sends the name as Host', async () => {
    await onlyNewEndpoints();
    await stopEarlier();
    const { r, url } = await receiver([]);
    const port = new URL(url).port;
    // .invalid never resolves (RFC 6761): only the checked answer can lead the connection to the receiver.
    const { secret, endpoint } = await addEndpoint(env.pool, {
      url: `http://hooks.invalid:${port}/x`,
      allowPrivate: true,
    });
    r.secrets = [secret];
    let lookups = 0;
    const resolve: Resolve = async (host) => {
      assert.equal(host, 'hooks.invalid');
      lookups++;
      return [{ address: '127.0.0.1', family: 4 }];
    };
    await assert.rejects(systemResolve('hooks.invalid'), /ENOTFOUND|EAI_AGAIN/);
    const { saleId } = await saleOf(2);
    const sequences = await sequencesOf(saleId);
    const d = deliver(fast(env.config), env.pool, resolve);
    await waitFor('both delivered', async () => r.got.length >= sequences.length);
    await d.stop();
    assert.deepEqual(new Set(r.hosts), new Set([`hooks.invalid:${port}`]));
    const attempts = await attemptsTo(endpoint.id, sequences.length);
    assert.equal(attempts.filter((a) => a.status === 204).length, sequences.length);
    assert.equal(lookups, attempts.length, 'one check per attempt');
  });

  test('delivery: a redirect is never followed: a failure, retried, and its target gets nothing', async () => {
    await onlyNewEndpoints();
    await stopEarlier();
    const target = await receiver([]);
    const { r, url } = await receiver([], () => 307, { location: target.url });
    const { secret, endpoint } = await addEndpoint(env.pool, { url, allowPrivate: true });
    r.secrets = [secret];
    target.r.secrets = [secret];
    await saleOf(1);
    const d = deliver();
    const attempts = await attemptsTo(endpoint.id, 2);
    await d.stop();
    assert.deepEqual(attempts.slice(0, 2), [
      { status: 307, error: 'HTTP 307' },
      { status: 307, error: 'HTTP 307' },
    ]);
    assert.equal(target.r.requests, 0);
  });

  test('endpoints: loopback, private, link-local, shared and unspecified addresses are private, IPv4-mapped ones included', () => {
    for (const ip of [
      '127.0.0.1',
      '127.8.9.10',
      '0.0.0.0',
      '10.1.2.3',
      '172.16.0.1',
      '172.31.255.255',
      '192.168.1.1',
      '169.254.169.254',
      '100.64.0.1',
      '100.127.255.254',
      '::',
      '::1',
      '::ffff:127.0.0.1',
      '::ffff:7f00:1',
      '::ffff:10.0.0.1',
      '::ffff:169.254.169.254',
      'fc00::1',
      'fd12:3456::1',
      'fe80::1',
      'febf::1',
      '224.0.0.1',
    ])
      assert.equal(isPrivateAddress(ip), true, ip);
    for (const ip of ['93.184.216.34', '8.8.8.8', '172.32.0.1', '100.128.0.1', '::ffff:8.8.8.8', '2606:4700::1111'])
      assert.equal(isPrivateAddress(ip), false, ip);
    for (const url of [
      'http://0.0.0.0/',
      'http://100.64.0.1/',
      'http://[::ffff:127.0.0.1]/',
      'http://[fd00::1]/',
      'http://[fe80::1]/',
    ])
      assert.throws(() => checkEndpointUrl(url, false), /EVENTS_ALLOW_PRIVATE_ENDPOINTS/, url);
  });

  test('endpoints (admin API): add, list, rotate, disable and enable; a private address and an unknown id are refused', async () => {
    const headers = { authorization: `Bearer ${ADMIN_TOKEN}` };
    const refused = await call('POST', '/api/events/endpoints', { body: { url: 'http://10.0.0.7/hooks' }, headers });
    assert.equal(refused.status, 400);
    assert.equal(refused.body.error, 'invalid_endpoint');
    const added = await call('POST', '/api/events/endpoints', {
      body: { url: 'https://shop.example/hooks', id: 'shop-admin', eventTypes: ['order.paid'] },
      headers,
    });
    assert.equal(added.status, 201, JSON.stringify(added.body));
    assert.equal(added.body.id, 'shop-admin');
    assert.deepEqual(added.body.eventTypes, ['order.paid']);
    assert.match(added.body.secret as string, /^whsec_/);
    const again = await call('POST', '/api/events/endpoints', {
      body: { url: 'https://shop.example/x', id: 'shop-admin' },
      headers,
    });
    assert.equal(again.status, 409);
    assert.equal(again.body.error, 'endpoint_exists');
    const listed = await call('GET', '/api/events/endpoints', { headers });
    const mine = (listed.body.endpoints as { id: string; secret?: string }[]).find((e) => e.id === 'shop-admin');
    assert.ok(mine);
    assert.equal(mine.secret, undefined, 'a listing never shows a secret');
    const rotated = await call('POST', '/api/events/endpoints/shop-admin/rotate', { headers });
    assert.equal(rotated.status, 200);
    assert.notEqual(rotated.body.secret, added.body.secret);
    assert.ok(Date.parse(rotated.body.previousUntil as string) > Date.now());
    const row = await env.pool.query('select secret, previous_secret from endpoints where id = $1', ['shop-admin']);
    assert.deepEqual(row.rows[0], { secret: rotated.body.secret, previous_secret: added.body.secret });
    const disabled = await call('POST', '/api/events/endpoints/shop-admin/disable', { headers });
    assert.equal(disabled.body.enabled, false);
    const enabled = await call('POST', '/api/events/endpoints/shop-admin/enable', { headers });
    assert.equal(enabled.body.enabled, true);
    const unknown = await call('POST', '/api/events/endpoints/nope/disable', { headers });
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.error, 'endpoint_not_found');
    assert.equal((await call('GET', '/api/events/endpoints')).status, 401);
  });
});
