// Variants: one sale, many sizes, each with its own stock, against the real API, Redis and
// Postgres. Sizes sell out on their own and a sold-out answer names the sizes left; the per-buyer
// limit counts across sizes and perVariantLimit within one; a closed order gives its unit back to
// its own size, once; conservation holds per size and for the sale; a sale made without variants,
// and bad definitions, behave as before.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, test } from 'node:test';
import { checkInvariants } from '../shared/checks/invariants.js';
import { reconcile } from '../shared/checks/reconcile.js';
import { closeOrders, restore } from '../shared/orders/close.js';
import { PAYMENT_SUCCEEDED, signPayload } from '../shared/payments/providers/signed-webhook.js';
import { saleKeys } from '../shared/redis/keys.js';
import { createPool } from '../shared/runtime/db.js';
import { migrate } from '../shared/runtime/migrate.js';
import { getSale, type Sale } from '../shared/sales/sale.js';
import { MAX_VARIANTS } from '../shared/sales/variants.js';
import { apiSuite } from './support/api.js';
import { assertConserved, type TestEnv } from './support/env.js';
import { newSale, SALE_PRICE, drainWriter } from './support/fixtures.js';
import type { Inject } from './support/http.js';
import { stateSnapshot } from './support/snapshot.js';
import { ADMIN_TOKEN, PAYMENT_WEBHOOK_SECRET } from './support/tokens.js';

let env: TestEnv;
let call: Inject;

apiSuite((s) => ({ env, call } = s));

const ADMIN = { authorization: `Bearer ${ADMIN_TOKEN}` };
const buy = (saleId: string, user: string, body: Record<string, unknown> = {}) =>
  call('POST', `/api/sales/${saleId}/purchases`, { body, user });
const outcome = (r: { status: number; body: { error?: string; status?: string } }) =>
  `${r.status} ${r.body.error ?? r.body.status}`;

/** Twelve sizes, 36 to 47: `stock(size)` units each. */
const sizes = (stock: (size: number) => number) =>
  Array.from({ length: 12 }, (_, i) => ({ sku: `EU${36 + i}`, label: `EU ${36 + i}`, stock: stock(36 + i) }));

/** Variants of these skus (labelled so), `stock` units each. */
const each = (stock: number, ...skus: string[]) => skus.map((sku) => ({ sku, label: sku, stock }));

async function writeAll(): Promise<void> {
  await drainWriter(env, `w-${randomBytes(4).toString('hex')}`, env.config.writerLeaseMs);
}

async function left(sale: Sale): Promise<Record<string, number>> {
  const view = (await call('GET', `/api/sales/${sale.id}`)).body as { variants: { sku: string; available: number }[] };
  return Object.fromEntries(view.variants.map((v) => [v.sku, v.available]));
}

const orderSkus = async (saleId: string) =>
  (
    await env.pool.query<{ sku: string; n: number }>(
      'select sku, sum(qty)::int as n from orders where sale_id = $1 group by sku order by sku',
      [saleId],
    )
  ).rows.map((r) => `${r.sku} ${r.n}`);

describe('variants', () => {
  test('a 12-size sale: each size sells from its own stock, sells out on its own, and sold_out names the sizes left', async () => {
    // Skewed: the small sizes have one pair each, the large ones five.
    const sale = await newSale(env, { variants: sizes((s) => (s < 42 ? 1 : 5)), paymentWindowSeconds: 3600 });
    assert.equal(sale.stock, 6 + 30, "the sale's stock is the sum of its sizes'");
    assert.equal((await getSale(env.pool, sale.id))!.variants.length, 12);

    for (let s = 36; s < 42; s++)
      assert.equal(outcome(await buy(sale.id, `small-${s}`, { variant: `EU${s}` })), '202 queued');
    const refused = await buy(sale.id, 'late', { variant: 'EU36' });
    assert.equal(outcome(refused), '409 sold_out');
    assert.equal(
      refused.body.message,
      'Variant EU36 is sold out. Still available: EU42, EU43, EU44, EU45, EU46, EU47.',
    );
    // Answered again from this process's memory of the size, the same way; another size still sells.
    assert.deepEqual((await buy(sale.id, 'late', { variant: 'EU36' })).body, refused.body);
    assert.equal(outcome(await buy(sale.id, 'late', { variant: 'EU47' })), '202 queued');

    const units = await left(sale);
    assert.deepEqual(units, {
      ...Object.fromEntries(sizes((s) => (s < 42 ? 0 : 5)).map((v) => [v.sku, v.stock])),
      EU47: 4,
    });
    assert.equal(await env.redis.get(saleKeys(sale.id).available), '29', '`available` is the sum of the sizes left');
    assert.equal((await call('GET', `/api/sales/${sale.id}`)).body.state, 'open');

    await writeAll();
    assert.deepEqual(await orderSkus(sale.id), ['EU36 1', 'EU37 1', 'EU38 1', 'EU39 1', 'EU40 1', 'EU41 1', 'EU47 1']);
    const r = await reconcile(env.pool, env.redis, sale.id, sale.stock, sale.variants);
    assert.ok(r.holds, JSON.stringify(r));
    assert.deepEqual(
      r.variants!.map((v) => `${v.sku} ${v.available}+${v.pending}`),
      sizes((s) => s).map((v) =>
        v.stock < 42 ? `${v.sku} 0+1` : `${v.sku} ${v.sku === 'EU47' ? 4 : 5}+${v.sku === 'EU47' ? 1 : 0}`,
      ),
    );
    const report = await checkInvariants(env.pool, env.redis, { saleIds: [sale.id], replayIntervalMs: 60_000 });
    assert.deepEqual(report.violations, []);
  });

  test('the per-buyer limit counts across sizes; perVariantLimit bounds one size', async () => {
    const sale = await newSale(env, {
      variants: each(10, 'S', 'M', 'L'),
      perUserLimit: 3,
      perVariantLimit: 2,
      maxPerOrder: 2,
    });
    assert.equal(outcome(await buy(sale.id, 'ann', { variant: 'M', qty: 2 })), '202 queued');
    const one = await buy(sale.id, 'ann', { variant: 'M' });
    assert.equal(outcome(one), '409 limit_reached');
    assert.match(one.body.message, /holds 2 of variant M/);
    assert.equal(outcome(await buy(sale.id, 'ann', { variant: 'L' })), '202 queued');
    const whole = await buy(sale.id, 'ann', { variant: 'S' });
    assert.equal(outcome(whole), '409 limit_reached');
    assert.match(whole.body.message, /holds 3, the most this sale allows/);
    // Another buyer is not bound by ann's counts.
    assert.equal(outcome(await buy(sale.id, 'bob', { variant: 'M', qty: 2 })), '202 queued');
    assert.deepEqual(await left(sale), { S: 10, M: 6, L: 9 });
    await writeAll();
    await assertConserved(env, [sale]);
  });

  test('a cancel and an expiry give the unit back to its own size, exactly once, with the quota of that size', async () => {
    const sale = await newSale(env, {
      variants: each(1, 'red', 'blue', 'green'),
      perUserLimit: 2,
      perVariantLimit: 1,
      paymentWindowSeconds: 3600,
    });
    const red = await buy(sale.id, 'cat', { variant: 'red' });
    const blue = await buy(sale.id, 'dan', { variant: 'blue' });
    assert.equal(outcome(red), '202 queued');
    assert.equal(outcome(blue), '202 queued');
    await writeAll();
    assert.deepEqual(await left(sale), { red: 0, blue: 0, green: 1 });

    assert.equal((await call('POST', `/api/orders/${red.body.orderId}/cancel`, { user: 'cat' })).status, 200);
    assert.deepEqual(await left(sale), { red: 1, blue: 0, green: 1 });
    // Its quota of red is back too: cat may buy red again.
    assert.equal(outcome(await buy(sale.id, 'cat', { variant: 'red' })), '202 queued');

    await env.pool.query('update orders set expires_at = now() where id = $1', [blue.body.orderId]);
    const { closed, restored } = await closeOrders(env.pool, env.redis, [blue.body.orderId], 'replay');
    assert.equal(restored, 1);
    assert.deepEqual(
      closed.map((o) => o.sku),
      ['blue'],
    );
    assert.deepEqual(await left(sale), { red: 0, blue: 1, green: 1 });
    // A second restore of the same orders (a duplicate event, a sweep) gives nothing back.
    const before = await stateSnapshot(env);
    assert.equal(await restore(env.pool, env.redis, closed), 0);
    assert.deepEqual((await stateSnapshot(env)).redis, before.redis);
    assert.deepEqual(await left(sale), { red: 0, blue: 1, green: 1 });
    await writeAll();
    await assertConserved(env, [sale]);
    const report = await checkInvariants(env.pool, env.redis, { saleIds: [sale.id], replayIntervalMs: 60_000 });
    assert.deepEqual(report.violations, []);
  });

  test('conservation per size: a unit moved between sizes in Redis is caught, though the sale still adds up', async () => {
    const sale = await newSale(env, {
      variants: [
        { sku: 'A', label: 'A', stock: 2 },
        { sku: 'B', label: 'B', stock: 2 },
      ],
    });
    assert.equal(outcome(await buy(sale.id, 'eve', { variant: 'A' })), '202 queued');
    await writeAll();
    await env.redis.hincrby(saleKeys(sale.id).variantsLeft, 'A', 1);
    await env.redis.hincrby(saleKeys(sale.id).variantsLeft, 'B', -1);
    const report = await checkInvariants(env.pool, env.redis, { saleIds: [sale.id], replayIntervalMs: 60_000 });
    assert.deepEqual(
      report.violations.map((v) => v.invariant),
      ['conservation'],
    );
    assert.match(
      report.violations[0]!.detail,
      /variant A: available 2 \+ queued 0 \+ pending 1 \+ paid 0 \+ restoring 0 != stock 2/,
    );
    assert.match(report.violations[0]!.detail, /variant B: available 1 .* != stock 2/);
  });

  test('a purchase without a variant: on a sale of one as before, on a sale of several a 400 naming them that changes nothing', async () => {
    const plain = await newSale(env, { stock: 2 });
    assert.deepEqual(plain.variants, [{ sku: 'default', label: 'Test sale', stock: 2, priceCents: null }]);
    assert.equal(outcome(await buy(plain.id, 'fay')), '202 queued');
    assert.equal(outcome(await buy(plain.id, 'gus', { variant: 'default' })), '202 queued');
    assert.equal(outcome(await buy(plain.id, 'hal')), '409 sold_out');
    const view = (await call('GET', `/api/sales/${plain.id}`)).body;
    assert.deepEqual(view.variants, [{ sku: 'default', label: 'Test sale', stock: 2, priceCents: null, available: 0 }]);
    assert.equal(view.perVariantLimit, null);
    await writeAll();
    assert.deepEqual(await orderSkus(plain.id), ['default 2']);
    // A sale of one named variant: its sku or none.
    const single = await newSale(env, { variants: [{ sku: 'one', label: 'One size', stock: 3 }] });
    assert.equal(outcome(await buy(single.id, 'ivy')), '202 queued');
    assert.equal(outcome(await buy(single.id, 'jon', { variant: 'one' })), '202 queued');
    await writeAll();
    assert.deepEqual(await orderSkus(single.id), ['one 2']);
    await assertConserved(env, [plain, single]);

    const many = await newSale(env, {
      variants: [
        { sku: 'M', label: 'Medium', stock: 1 },
        { sku: 'L', label: 'Large', stock: 1, priceCents: 2499 },
      ],
    });
    const state = await stateSnapshot(env);
    const none = await buy(many.id, 'kim');
    assert.equal(outcome(none), '400 variant_required');
    assert.match(none.body.message, /one of L, M\.$/);
    assert.deepEqual(Object.keys(none.body).sort(), ['error', 'message']);
    const unknown = await buy(many.id, 'kim', { variant: 'XL' });
    assert.equal(outcome(unknown), '400 unknown_variant');
    assert.match(unknown.body.message, /no variant "XL": its variants are L, M\./);
    assert.equal(outcome(await buy(many.id, 'kim', { variant: 'no such' })), '400 unknown_variant');
    assert.equal(outcome(await buy(single.id, 'kim', { variant: 'default' })), '400 unknown_variant');
    assert.deepEqual(await stateSnapshot(env), state, 'a refused purchase changes nothing');
    assert.equal((await call('GET', `/api/sales/${many.id}`)).body.variants[1].priceCents, 2499);
  });

  test("a variant with its own price is paid at that price, the others at the sale's", async () => {
    const sale = await newSale(env, {
      variants: [
        { sku: 'plain', label: 'Plain', stock: 2 },
        { sku: 'gold', label: 'Gold', stock: 2, priceCents: 4999 },
      ],
      paymentWindowSeconds: 3600,
    });
    const gold = (await buy(sale.id, 'lea', { variant: 'gold' })).body.orderId as string;
    const plain = (await buy(sale.id, 'max', { variant: 'plain' })).body.orderId as string;
    await writeAll();
    const pay = (id: string, orderId: string, amount: number) => {
      const raw = JSON.stringify({ id, type: PAYMENT_SUCCEEDED, orderId, amount, currency: 'EUR' });
      return call('POST', '/api/payments/webhook', {
        body: raw,
        headers: { 'flashsale-signature': signPayload(PAYMENT_WEBHOOK_SECRET, raw) },
      });
    };
    assert.equal((await pay('evt-gold-cheap', gold, SALE_PRICE.price)).body.reason, 'amount_mismatch');
    assert.equal((await pay('evt-gold', gold, 4999)).body.outcome, 'applied');
    assert.equal((await pay('evt-plain-dear', plain, 4999)).body.reason, 'amount_mismatch');
    assert.equal((await pay('evt-plain', plain, SALE_PRICE.price)).body.outcome, 'applied');
    const paid = await env.pool.query<{ sku: string }>(
      "select sku from orders where sale_id = $1 and status = 'paid' order by sku",
      [sale.id],
    );
    assert.deepEqual(
      paid.rows.map((r) => r.sku),
      ['gold', 'plain'],
    );
    await assertConserved(env, [sale]);
  });

  test('a bad definition of variants is a 400 invalid_sale naming the fault, and creates nothing', async () => {
    const base = { id: `bad-${process.pid}`, name: 'Sneaker', ...SALE_PRICE };
    const v = (sku: string, stock = 1) => ({ sku, label: sku, stock });
    const cases: [unknown, RegExp][] = [
      [[], /variants must be a list of 1 to 100/],
      [Array.from({ length: MAX_VARIANTS + 1 }, (_, i) => v(`s${i}`)), /variants must be a list of 1 to 100/],
      [[v('M'), v('M')], /variants\[1\]\.sku M is given twice/],
      [[v('a b')], /variants\[0\]\.sku must be/],
      [[{ sku: 'M', stock: 1 }], /variants\[0\]\.label must be/],
      [[v('M', -1)], /variants\[0\]\.stock must be/],
      [[{ ...v('M'), priceCents: 0 }], /variants\[0\]\.priceCents must be/],
      [[{ ...v('M'), colour: 'red' }], /variants\[0\]: unknown field\(s\): colour/],
      [[v('M', 0)], /stock must be an integer from 1/],
      ['M', /variants must be a list/],
    ];
    const state = await stateSnapshot(env);
    for (const [variants, message] of cases) {
      const r = await call('POST', '/api/sales', { body: { ...base, variants }, headers: ADMIN });
      assert.equal(outcome(r), '400 invalid_sale', JSON.stringify(variants).slice(0, 80));
      assert.match(r.body.message, message);
      assert.deepEqual(Object.keys(r.body).sort(), ['error', 'message']);
    }
    const mismatch = await call('POST', '/api/sales', {
      body: { ...base, stock: 5, variants: [v('M', 2)] },
      headers: ADMIN,
    });
    assert.equal(outcome(mismatch), '400 invalid_sale');
    assert.match(mismatch.body.message, /stock \(5\) must be the sum of the variants' stock \(2\)/);
    const above = await call('POST', '/api/sales', {
      body: { ...base, perUserLimit: 1, perVariantLimit: 2, variants: [v('M', 2)] },
      headers: ADMIN,
    });
    assert.match(above.body.message, /perVariantLimit \(2\) must not be above perUserLimit \(1\)/);
    assert.deepEqual(await stateSnapshot(env), state, 'nothing was created');

    // A draw's entries name their variant (test/draw-variants.test.ts): its sale may sell several.
    const at = (h: number) => new Date(Date.now() + h * 3_600_000).toISOString();
    const draw = await call('POST', '/api/sales', {
      body: {
        ...base,
        id: `${base.id}-draw`,
        admission: 'draw',
        entriesCloseAt: at(1),
        endsAt: at(3),
        variants: [v('M'), v('L')],
      },
      headers: ADMIN,
    });
    assert.equal(draw.status, 201, JSON.stringify(draw.body));
    assert.deepEqual(
      draw.body.variants.map((x: { sku: string }) => x.sku),
      ['M', 'L'],
    );

    // A hundred variants is the most, and fine.
    const hundred = Array.from({ length: MAX_VARIANTS }, (_, i) => v(`s${i}`));
    const made = await call('POST', '/api/sales', { body: { ...base, variants: hundred }, headers: ADMIN });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.equal(made.body.stock, MAX_VARIANTS);
    assert.equal(made.body.variants.length, MAX_VARIANTS);
    assert.equal(made.body.variants[99].available, 1);
  });

  test('migration 0015: every sale made before is one variant, default, and its orders are of it', async () => {
    const name = `t_old_${randomBytes(6).toString('hex')}`;
    await env.pool.query(`create database ${name}`);
    const db = createPool(env.config.databaseUrl!.replace(/\/[^/]*$/, `/${name}`), 4);
    try {
      await migrate(db, undefined, { through: '0014_admission_modes' });
      await db.query(
        `insert into sales (id, name, stock, price, currency) values ('old-sale', 'Old sale', 7, 1999, 'EUR')`,
      );
      await db.query(
        `insert into orders (id, sale_id, user_id, qty, status, seq, purchased_at, expires_at)
       values ('old-sale.00000000-0000-4000-8000-000000000001', 'old-sale', 'ann', 2, 'pending', 1, now(), now() + interval '5 minutes')`,
      );
      assert.deepEqual(await migrate(db, undefined, { through: '0015_variants' }), ['0015_variants']);
      assert.deepEqual((await db.query('select sale_id, sku, label, stock, price, position from sale_variants')).rows, [
        { sale_id: 'old-sale', sku: 'default', label: 'Old sale', stock: 7, price: null, position: 0 },
      ]);
      assert.deepEqual((await db.query('select sku, qty from orders')).rows, [{ sku: 'default', qty: 2 }]);
      assert.equal((await db.query('select per_variant_limit from sales')).rows[0].per_variant_limit, null);
    } finally {
      await db.end();
      await env.pool.query(`drop database ${name}`);
    }
  });
});
