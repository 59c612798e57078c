// The event types beyond the orders' own (docs/events.md): refund.marked, draw.won and draw.lost,
// sale.sold_out, each recorded with the change it reports and delivered to a real receiver that
// verifies it with the standardwebhooks package, with the documented data.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { awardUnits, endBackfill, makeDraw } from '../shared/admission/draw/steps.js';
import { EventDelivery } from '../shared/events/delivery.js';
import { dispatchAll } from '../shared/events/dispatch.js';
import { addEndpoint } from '../shared/events/endpoints.js';
import { deliverable, DRAWS_LOST } from '../shared/events/record.js';
import { closeDue, writeOrders } from '../shared/orders/queries.js';
import { claimBatch } from '../shared/pipeline/writer-scripts.js';
import { parseWinner } from '../shared/runtime/ids.js';
import { apiSuite } from './support/api.js';
import type { TestEnv } from './support/env.js';
import { closeEntries, drainWriter, endBackfillIn, HOUR, newSale, openDraw, waitFor } from './support/fixtures.js';
import type { Inject } from './support/http.js';
import { paySigned } from './support/payments.js';
import { type Received, Receiver } from './support/receiver.js';
import { ADMIN_TOKEN } from './support/tokens.js';

let env: TestEnv;
let call: Inject;
apiSuite((s) => ({ env, call } = s));

const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
const deps = () => ({ pool: env.pool, redis: env.redis, buyCountTtlSeconds: 86_400 });

/** Buys one unit for each buyer; the order ids. */
async function buy(saleId: string, users: string[]): Promise<string[]> {
  const ids: string[] = [];
  for (const user of users) {
    const r = await call('POST', `/api/sales/${saleId}/purchases`, { body: { qty: 1 }, user });
    assert.equal(r.status, 202, JSON.stringify(r.body));
    ids.push(r.body.orderId as string);
  }
  return ids;
}

/** The types of a sale's deliverable events, in sequence order (the batch rows fanned out). */
async function typesOf(saleId: string): Promise<string[]> {
  await dispatchAll(env.pool);
  const res = await env.pool.query<{ type: string }>(
    `select type from events where sale_id = $1 and ${deliverable('type')} order by id`,
    [saleId],
  );
  return res.rows.map((r) => r.type);
}

describe('event types', () => {
  const receivers: Receiver[] = [];
  const deliveries: EventDelivery[] = [];
  after(async () => {
    for (const d of deliveries) await d.stop();
    for (const r of receivers) await r.stop();
  });

  /** A receiver subscribed to `types` alone (each test's own: earlier sales' events are other types or already sent). */
  async function hear(types: string[]): Promise<Receiver> {
    const r = new Receiver([]);
    receivers.push(r);
    const url = await r.start();
    await dispatchAll(env.pool);
    await env.pool.query("update endpoints set enabled = false, disabled_reason = 'an earlier test'");
    const { secret } = await addEndpoint(env.pool, { url, allowPrivate: true, eventTypes: types });
    r.secrets = [secret];
    return r;
  }
  /** Delivers until the receiver holds `n` events of the sale; those, in sequence order. */
  async function delivered(r: Receiver, saleId: string, n: number): Promise<Received['body'][]> {
    const d = new EventDelivery(
      env.pool,
      { ...env.config, eventsPollMs: 20, eventsRetryBaseMs: 20, eventsAllowPrivateEndpoints: true },
      env.logger,
    );
    deliveries.push(d);
    d.start();
    const mine = () => r.got.filter((g) => g.body.sale_id === saleId);
    await waitFor(`${n} events of ${saleId} delivered`, async () => mine().length >= n);
    await d.stop();
    assert.equal(r.rejected, 0);
    return mine()
      .map((g) => g.body)
      .sort((a, b) => a.sequence - b.sequence);
  }

  test('refund.marked: an operator marking a refund done sends it once, with the payment, the reference and the order', async () => {
    const r = await hear(['payment.refund_due', 'refund.marked']);
    const sale = await newSale(env, { stock: 5, paymentWindowSeconds: 3600 });
    const [id] = (await buy(sale.id, ['rita'])) as [string];
    await drainWriter(env, `w-${sale.id}`);
    await env.pool.query("update orders set expires_at = now() - interval '1 second' where id = $1", [id]);
    assert.equal((await closeDue(env.pool, [id])).length, 1);
    await paySigned(call, id);
    const payment = (
      await env.pool.query<{ id: string }>("select id from payments where order_id = $1 and outcome = 'refund_due'", [
        id,
      ])
    ).rows[0]!.id;
    const mark = () =>
      call('POST', `/api/payments/${encodeURIComponent(payment)}/refund`, {
        body: { reference: 're_123' },
        headers: admin,
      });
    const first = await mark();
    assert.equal(first.status, 200, JSON.stringify(first.body));
    // Marked again: the first record answered, nothing recorded.
    assert.equal((await mark()).status, 200);
    assert.deepEqual((await typesOf(sale.id)).slice(-2), ['payment.refund_due', 'refund.marked']);
    const [due, marked] = await delivered(r, sale.id, 2);
    assert.equal(due!.type, 'payment.refund_due');
    const deadline = (
      await env.pool.query<{ d: Date }>('select expires_at as d from orders where id = $1', [id])
    ).rows[0]!.d.toISOString();
    assert.deepEqual(marked, {
      type: 'refund.marked',
      version: 1,
      sequence: marked!.sequence,
      sale_id: sale.id,
      timestamp: marked!.timestamp,
      data: {
        order_id: id,
        sale_id: sale.id,
        buyer: 'rita',
        qty: 1,
        status: 'expired',
        amount: 1999,
        currency: 'EUR',
        deadline,
        reason: 'order_expired',
        payment: { id: payment, amount: 1999, currency: 'EUR' },
        refund: { reference: 're_123', refunded_at: first.body.refundedAt },
      },
    });
    assert.ok(marked!.sequence > due!.sequence);
  });

  test('draw.won and draw.lost: one per entrant, winners with their order and variant, losers with their choice; the award that sells out sends sale.sold_out', async () => {
    const r = await hear(['draw.won', 'draw.lost', 'sale.sold_out']);
    let s = await newSale(env, { ...openDraw(), stock: 2, paymentWindowSeconds: 3600 });
    const buyers = ['d1', 'd2', 'd3', 'd4', 'd5'];
    for (const user of buyers)
      assert.equal((await call('POST', `/api/sales/${s.id}/entries`, { user })).status, 200, user);
    s = await closeEntries(env, s);
    assert.equal(await makeDraw(env.pool, s, Date.now()), 5);
    assert.equal(await awardUnits(deps(), s, Date.now()), 2);
    // Recorded again after a failure: no second award, no second event.
    assert.equal(await awardUnits(deps(), s, Date.now()), 0);
    await drainWriter(env, `w-${s.id}`);
    s = await endBackfillIn(env, s);
    assert.equal(await endBackfill(deps(), s, s.backfillUntil!.getTime()), 3);
    const entries = (
      await env.pool.query<{ buyer: string; draw_rank: number; status: string; order_id: string | null; sku: string }>(
        'select buyer, draw_rank, status, order_id, variant as sku from draw_entries where sale_id = $1 order by draw_rank',
        [s.id],
      )
    ).rows;
    const sku = entries[0]!.sku;
    const bodies = await delivered(r, s.id, 6);
    assert.deepEqual(
      bodies.map((b) => [b.type, b.data]),
      [
        ...entries
          .filter((e) => e.status === 'won')
          .map((e) => [
            'draw.won',
            { sale_id: s.id, buyer: e.buyer, rank: e.draw_rank, order_id: e.order_id, variant: sku },
          ]),
        ['sale.sold_out', { sale_id: s.id, name: s.name }],
        ...entries
          .filter((e) => e.status === 'lost')
          .map((e) => [
            'draw.lost',
            { sale_id: s.id, buyer: e.buyer, rank: e.draw_rank, variant: sku, second_choice: null },
          ]),
      ],
    );
    assert.deepEqual(
      entries.map((e) => e.status),
      ['won', 'won', 'lost', 'lost', 'lost'],
    );
    // Each winner's order exists, as its event says.
    const orders = await env.pool.query('select id from orders where sale_id = $1 order by id', [s.id]);
    assert.deepEqual(
      orders.rows.map((o) => o.id).sort(),
      entries
        .slice(0, 2)
        .map((e) => e.order_id)
        .sort(),
    );
  });

  test('draw.lost: a draw of 10,000 losers records two rows, fanned out into one draw.lost each, in rank order', async () => {
    let s = await newSale(env, { ...openDraw(), stock: 1, paymentWindowSeconds: 3600 });
    await env.pool.query(
      `insert into draw_entries (sale_id, buyer, ticket, secret)
       select $1, 'l' || n, encode(sha256(($1 || n)::bytea), 'hex'), encode(sha256(('s' || n)::bytea), 'hex')
       from generate_series(1, 10001) as n`,
      [s.id],
    );
    s = await closeEntries(env, s);
    assert.equal(await makeDraw(env.pool, s, Date.now()), 10001);
    assert.equal(await awardUnits(deps(), s, Date.now()), 1);
    s = await endBackfillIn(env, s);
    assert.equal(await endBackfill(deps(), s, s.backfillUntil!.getTime()), 10000);
    const rows = (
      await env.pool.query<{ id: string; n: number }>(
        "select id, jsonb_array_length(payload->'entrants') as n from events where sale_id = $1 and type = $2 order by id",
        [s.id, DRAWS_LOST],
      )
    ).rows;
    assert.deepEqual(
      rows.map((x) => x.n),
      [9999, 1],
    );
    await dispatchAll(env.pool);
    const lost = (
      await env.pool.query<{ id: string; buyer: string; rank: number }>(
        "select id, payload->>'buyer' as buyer, (payload->>'rank')::int as rank from events where sale_id = $1 and type = 'draw.lost' order by id",
        [s.id],
      )
    ).rows;
    const losers = (
      await env.pool.query<{ buyer: string; draw_rank: number }>(
        "select buyer, draw_rank from draw_entries where sale_id = $1 and status = 'lost' order by draw_rank",
        [s.id],
      )
    ).rows;
    assert.deepEqual(
      lost.map((l) => [l.buyer, l.rank]),
      losers.map((l) => [l.buyer, l.draw_rank]),
    );
    const [first, second] = rows.map((x) => Number(x.id)) as [number, number];
    assert.deepEqual(
      lost.map((l) => Number(l.id)),
      [...Array.from({ length: 9999 }, (_, i) => first + 1 + i), second + 1],
    );
  });

  test("order events: an order of a variant with its own price carry that price, the others the sale's", async () => {
    const r = await hear(['order.created']);
    const sale = await newSale(env, {
      variants: [
        { sku: 'plain', label: 'Plain', stock: 2 },
        { sku: 'gold', label: 'Gold', stock: 2, priceCents: 4999 },
      ],
      maxPerOrder: 2,
      perUserLimit: 2,
      paymentWindowSeconds: 3600,
    });
    const ids: string[] = [];
    for (const [user, variant] of [
      ['vi', 'gold'],
      ['vo', 'plain'],
    ]) {
      const b = await call('POST', `/api/sales/${sale.id}/purchases`, { body: { qty: 2, variant }, user });
      assert.equal(b.status, 202, JSON.stringify(b.body));
      ids.push(b.body.orderId as string);
    }
    await drainWriter(env, `w-${sale.id}`);
    const bodies = await delivered(r, sale.id, 2);
    const amounts = new Map(bodies.map((b) => [b.data.order_id, b.data.amount]));
    assert.deepEqual(
      ids.map((id) => amounts.get(id)),
      [2 * 4999, 2 * 1999],
    );
  });

  test('sale.sold_out: once when the last unit is written, again only after a unit came back and sold', async () => {
    const r = await hear(['sale.sold_out']);
    const sale = await newSale(env, { stock: 3, paymentWindowSeconds: 3600 });
    const ids = await buy(sale.id, ['s1', 's2']);
    await drainWriter(env, `w-${sale.id}`);
    assert.deepEqual(await typesOf(sale.id), ['order.created', 'order.created'], 'a unit left: not sold out');
    ids.push(...(await buy(sale.id, ['s3'])));
    await drainWriter(env, `w-${sale.id}`);
    // A pass with nothing to write records nothing more.
    await drainWriter(env, `w-${sale.id}`);
    assert.deepEqual((await typesOf(sale.id)).slice(2), ['order.created', 'sale.sold_out']);
    // A unit back (a cancel), bought again: sold out again.
    assert.equal((await call('POST', `/api/orders/${ids[0]}/cancel`, { user: 's1' })).status, 200);
    await buy(sale.id, ['s4']);
    await drainWriter(env, `w-${sale.id}`);
    assert.deepEqual((await typesOf(sale.id)).slice(4), ['order.cancelled', 'order.created', 'sale.sold_out']);
    const bodies = await delivered(r, sale.id, 2);
    assert.deepEqual(
      bodies.map((b) => [b.type, b.data]),
      [
        ['sale.sold_out', { sale_id: sale.id, name: sale.name }],
        ['sale.sold_out', { sale_id: sale.id, name: sale.name }],
      ],
    );
  });

  test('sale.sold_out: only the batch with no winner queued behind it reports it, and a batch written again records none', async () => {
    const sale = await newSale(env, { stock: 3, paymentWindowSeconds: 3600 });
    await buy(sale.id, ['t1', 't2', 't3']);
    // Each claim by a writer of its own: a writer's next claim would hand back the batch it holds.
    const first = await claimBatch(env.redis, sale.id, 'w-first', 2, HOUR);
    assert.deepEqual([first.entries.length, first.soldOut], [2, false], 'a winner still queued behind it');
    await writeOrders(env.pool, sale.id, first.entries.map(parseWinner), first.soldOut);
    const last = await claimBatch(env.redis, sale.id, 'w-last', 2, HOUR);
    assert.deepEqual([last.entries.length, last.soldOut], [1, true]);
    const winners = last.entries.map(parseWinner);
    await writeOrders(env.pool, sale.id, winners, true);
    // Re-driven after its commit (the writer died before its acknowledgement): nothing new.
    await writeOrders(env.pool, sale.id, winners, true);
    assert.deepEqual(await typesOf(sale.id), ['order.created', 'order.created', 'order.created', 'sale.sold_out']);
    // Nothing queued, nothing left: an empty claim reports nothing.
    assert.deepEqual(await claimBatch(env.redis, sale.id, 'w-empty', 2, HOUR), { entries: [], soldOut: false });
  });
});
