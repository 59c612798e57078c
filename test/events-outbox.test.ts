// The outbox's writing side (docs/events.md) against real Postgres and Redis: each state change of
// a sale commits exactly one event of the documented shape, in the same transaction or statement,
// and a change that does not commit leaves none.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { eventBodies } from '../shared/events/body.js';
import { dispatchAll } from '../shared/events/dispatch.js';
import { ORDERS_CREATED, recordEvents } from '../shared/events/record.js';
import { closeDue, writeOrders } from '../shared/orders/queries.js';
import { withTransaction } from '../shared/runtime/db.js';
import type { Sale } from '../shared/sales/sale.js';
import { apiSuite } from './support/api.js';
import type { TestEnv } from './support/env.js';
import { drainWriter, newSale } from './support/fixtures.js';
import type { Inject } from './support/http.js';
import { paySigned } from './support/payments.js';
import { ADMIN_TOKEN } from './support/tokens.js';

let env: TestEnv;
let call: Inject;
apiSuite((s) => ({ env, call } = s));

interface EventRow {
  id: number;
  type: string;
  version: number;
  sale_id: string;
  order_id: string | null;
  payload: Record<string, unknown>;
}
/** A sale's events as the delivery side sees them: the writer's batch rows fanned out into one per order. */
async function eventsOf(saleId: string): Promise<EventRow[]> {
  await dispatchAll(env.pool);
  const res = await env.pool.query<EventRow>(
    `select id, type, version, sale_id, order_id, payload from events where sale_id = $1 and type <> '${ORDERS_CREATED}'
     order by id`,
    [saleId],
  );
  return res.rows;
}

/** A sale with one pending order per buyer, written by the writer. */
async function ordersOf(users: string[], fields: Record<string, unknown> = {}): Promise<{ sale: Sale; ids: string[] }> {
  const sale = await newSale(env, { stock: 10, paymentWindowSeconds: 3600, ...fields });
  const ids: string[] = [];
  for (const user of users) {
    const r = await call('POST', `/api/sales/${sale.id}/purchases`, { body: { qty: 1 }, user });
    assert.equal(r.status, 202);
    ids.push(r.body.orderId as string);
  }
  await drainWriter(env, `w-${sale.id}`);
  return { sale, ids };
}

describe('events outbox', () => {
  test('events: a sale of paid, expired, cancelled and refund_due orders records one event per change, as documented', async () => {
    const { sale, ids } = await ordersOf(['alice', 'bob', 'carol']);
    const [paid, cancelled, expired] = ids as [string, string, string];
    // An order's fields are read at delivery (never updated in production): carol's deadline, moved
    // back by this test, reads moved back in her order.created too.
    const deadline = async (id: string) =>
      (
        await env.pool.query<{ d: Date }>('select expires_at as d from orders where id = $1', [id])
      ).rows[0]!.d.toISOString();
    const order = async (id: string, user: string, status: string) => ({
      order_id: id,
      sale_id: sale.id,
      buyer: user,
      qty: 1,
      status,
      amount: 1999,
      currency: 'EUR',
      deadline: await deadline(id),
    });
    await paySigned(call, paid);
    const c = await call('POST', `/api/orders/${cancelled}/cancel`, { user: 'bob' });
    assert.equal(c.status, 200, JSON.stringify(c.body));
    await env.pool.query("update orders set expires_at = now() - interval '1 second' where id = $1", [expired]);
    assert.equal((await closeDue(env.pool, [expired])).length, 1);
    // Money for the expired order: recorded as refund due, with its reason.
    await paySigned(call, expired);
    const end = await call('POST', `/api/sales/${sale.id}/end`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    assert.equal(end.status, 200, JSON.stringify(end.body));

    const events = await eventsOf(sale.id);
    const bodies = await eventBodies(
      env.pool,
      events.map((e) => e.id),
    );
    // What a receiver gets: the envelope, its sequence the row's id, its time the commit's.
    const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
    for (const [i, b] of bodies.entries()) {
      assert.equal(b.sequence, events[i]!.id);
      assert.equal(b.sale_id, sale.id);
      assert.match(b.timestamp, ISO);
    }
    const seen = bodies.map((b, i) => ({
      type: b.type,
      version: b.version,
      order_id: events[i]!.order_id,
      payload: b.data,
    }));
    const refund = events.find((e) => e.type === 'payment.refund_due')!;
    const endedAt = (events.find((e) => e.type === 'sale.ended')?.payload.ended_at ?? '') as string;
    assert.match(endedAt, ISO);
    assert.deepEqual(seen, [
      { type: 'order.created', version: 1, order_id: paid, payload: await order(paid, 'alice', 'pending') },
      { type: 'order.created', version: 1, order_id: cancelled, payload: await order(cancelled, 'bob', 'pending') },
      { type: 'order.created', version: 1, order_id: expired, payload: await order(expired, 'carol', 'pending') },
      { type: 'order.paid', version: 1, order_id: paid, payload: await order(paid, 'alice', 'paid') },
      { type: 'order.cancelled', version: 1, order_id: cancelled, payload: await order(cancelled, 'bob', 'cancelled') },
      { type: 'order.expired', version: 1, order_id: expired, payload: await order(expired, 'carol', 'expired') },
      {
        type: 'payment.refund_due',
        version: 1,
        order_id: expired,
        payload: {
          ...(await order(expired, 'carol', 'expired')),
          reason: 'order_expired',
          payment: { id: (refund.payload.payment as { id: string }).id, amount: 1999, currency: 'EUR' },
        },
      },
      {
        type: 'sale.ended',
        version: 1,
        order_id: null,
        payload: { sale_id: sale.id, name: sale.name, ended_at: endedAt },
      },
    ]);
    assert.match((refund.payload.payment as { id: string }).id, /^signed:evt_/);
    // Ending it again changes nothing, and records nothing.
    assert.equal(
      (await call('POST', `/api/sales/${sale.id}/end`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).status,
      200,
    );
    assert.equal((await eventsOf(sale.id)).length, events.length);
  });

  test('events: a batch that fails on an order already written records nothing; its retry records only the fresh orders', async () => {
    const sale = await newSale(env, { stock: 10, paymentWindowSeconds: 3600 });
    const winner = (n: number) => ({
      orderId: `${sale.id}.o${n}`,
      userId: `u${n}`,
      qty: 1,
      seq: n,
      purchasedAt: Date.now(),
    });
    await writeOrders(env.pool, sale.id, [winner(1)]);
    // The plain insert fails on o1 (its events with it); the retry skips o1.
    const rows = await writeOrders(env.pool, sale.id, [winner(1), winner(2), winner(3)]);
    assert.equal(rows.length, 3);
    const created = (await eventsOf(sale.id)).map((e) => [e.type, e.order_id]);
    assert.deepEqual(created, [
      ['order.created', winner(1).orderId],
      ['order.created', winner(2).orderId],
      ['order.created', winner(3).orderId],
    ]);
  });

  test('events: a writer batch records one orders.created row per 9,999 orders, fanned out into one order.created each, in order of purchase', async () => {
    const sale = await newSale(env, { stock: 10000, paymentWindowSeconds: 3600 });
    const winners = Array.from({ length: 10000 }, (_, n) => ({
      orderId: `${sale.id}.o${n}`,
      userId: `u${n}`,
      qty: 1,
      seq: n + 1,
      purchasedAt: Date.now(),
    }));
    assert.equal((await writeOrders(env.pool, sale.id, winners)).length, 10000);
    const rows = (
      await env.pool.query<{ id: string; n: number }>(
        'select id, cardinality(order_ids) as n from events where sale_id = $1 and type = $2 order by id',
        [sale.id, ORDERS_CREATED],
      )
    ).rows;
    assert.deepEqual(
      rows.map((r) => r.n),
      [9999, 1],
    );
    const created = await eventsOf(sale.id);
    assert.deepEqual(
      created.map((e) => [e.type, e.order_id]),
      winners.map((w) => ['order.created', w.orderId]),
    );
    // Numbered from their row's id up: the first row's 9,999, then the second's one.
    const first = Number(rows[0]!.id);
    const second = Number(rows[1]!.id);
    assert.deepEqual(
      created.map((e) => Number(e.id)),
      [...Array.from({ length: 9999 }, (_, i) => first + 1 + i), second + 1],
    );
  });

  test('events: a transaction that rolls back leaves no event', async () => {
    const sale = await newSale(env, { stock: 10 });
    await assert.rejects(
      withTransaction(env.pool, async (client) => {
        await client.query('update sales set ends_at = now() where id = $1', [sale.id]);
        await recordEvents(client, [{ type: 'sale.ended', saleId: sale.id, data: { sale_id: sale.id } }]);
        assert.equal((await client.query('select 1 from events where sale_id = $1', [sale.id])).rowCount, 1);
        throw new Error('the change fails after its event');
      }),
      /the change fails/,
    );
    assert.deepEqual(await eventsOf(sale.id), []);
  });

  test('events: sequences only increase, and a cancel refused at the limit records nothing', async () => {
    const { sale, ids } = await ordersOf(['dora', 'dora', 'dora', 'dora'], { perUserLimit: 4 });
    for (const id of ids) await call('POST', `/api/orders/${id}/cancel`, { user: 'dora' });
    const events = await eventsOf(sale.id);
    const cancelledRows = (
      await env.pool.query<{ id: string }>("select id from orders where sale_id = $1 and status = 'cancelled'", [
        sale.id,
      ])
    ).rows.map((r) => r.id);
    assert.equal(cancelledRows.length, env.config.maxCancelsPerSale);
    assert.deepEqual(
      events
        .filter((e) => e.type === 'order.cancelled')
        .map((e) => e.order_id)
        .sort(),
      cancelledRows.sort(),
    );
    const seqs = events.map((e) => e.id);
    assert.deepEqual(
      seqs,
      [...seqs].sort((a, b) => a - b),
    );
  });
});
