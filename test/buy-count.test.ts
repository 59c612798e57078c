// The buyer's count is the per-user limit: it must never lapse while the sale can still sell or
// give quota back. Time is not waited for: the key's expiry is read, and the purchase script is
// driven with the clock it is given. A sale's counts are one hash with one TTL; a sale loaded by the
// previous release (or with LEGACY_BUY_COUNTS) keeps a key per buyer, and both are read and given back.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { ConfigError, loadConfig } from '../shared/config/index.js';
import { HttpError } from '../shared/runtime/errors.js';
import { Purchaser, Refusal } from '../shared/purchase/purchaser.js';
import { saleKeys, STOCK_CHANNEL } from '../shared/redis/keys.js';
import { duplicateRedis } from '../shared/redis/connect.js';
import { loadSale, purchaseScript } from '../shared/sales/scripts.js';
import { RESTORE_CHUNK, restoreStock, restoreStocks } from '../shared/orders/scripts.js';
import { apiSuite, buildTestApp } from './support/api.js';
import type { TestEnv } from './support/env.js';
import { buyCount, newSale } from './support/fixtures.js';
import { injector, type Inject } from './support/http.js';
import { ADMIN_TOKEN } from './support/tokens.js';

// The smallest margin the config takes: the probe that found the lapse ran with it.
const MARGIN_S = 60;

let env: TestEnv;
let call: Inject;

apiSuite((s) => ({ env, call } = s), { buyCountTtlSeconds: MARGIN_S });

const buy = (saleId: string, user: string, qty = 1) =>
  call('POST', `/api/sales/${saleId}/purchases`, { body: { qty }, user });
const script = (saleId: string, userId: string, qty: number) =>
  purchaseScript(env.redis, {
    saleId,
    userId,
    qty,
    orderId: `${saleId}.${randomUUID()}`,
    buyCountTtlSeconds: MARGIN_S,
  });

describe('buy count', () => {
  test('a sale without end: the count never expires, and the buyer stays refused long after the margin', async () => {
    const sale = await newSale(env, { stock: 10 });
    assert.equal((await buy(sale.id, 'once')).status, 202);
    const key = saleKeys(sale.id).buyCounts;
    assert.equal(await env.redis.hget(key, 'once'), '1');
    assert.equal(await env.redis.pttl(key), -1, 'the counts of a sale without end have no TTL');

    const refused = await buy(sale.id, 'once');
    assert.equal(refused.status, 409);
    assert.equal(refused.body.error, 'limit_reached');
    // Refused by the script itself too (no sold-out memory), nothing taken; the count has no TTL, so a day later as well.
    const purchaser = new Purchaser(env.redis, { soldOutCacheMs: 0, buyCountTtlSeconds: MARGIN_S });
    await assert.rejects(
      purchaser.purchase(sale.id, 'once', 1),
      (err: unknown) => err instanceof HttpError && err.status === 409 && err.code === 'limit_reached',
    );
    assert.equal(await env.redis.get(saleKeys(sale.id).available), '9');
    assert.equal(await env.redis.llen(saleKeys(sale.id).winners), 1);
    assert.equal(await env.redis.pttl(key), -1);
  });

  test('a sale with an end: the count lives past end + payment window + margin', async () => {
    const paymentWindowSeconds = 900;
    const endsAt = Date.now() + 3_600_000;
    const sale = await newSale(env, {
      stock: 10,
      perUserLimit: 2,
      paymentWindowSeconds,
      endsAt: new Date(endsAt).toISOString(),
    });
    const key = saleKeys(sale.id).buyCounts;
    const lastRestore = endsAt + (paymentWindowSeconds + MARGIN_S) * 1000;
    assert.equal((await script(sale.id, 'timed', 1))[0], 1);
    const first = await env.redis.pexpiretime(key);
    assert.ok(first >= lastRestore, `count expires at ${first}, before end + payment window + margin ${lastRestore}`);
    // Bounded too: the count of an ended sale does not linger for ever.
    assert.ok(first <= lastRestore + 60_000, `count expires at ${first}, long after ${lastRestore}`);
    assert.equal((await buy(sale.id, 'timed')).status, 202);
    assert.equal(await env.redis.hget(key, 'timed'), '2');
    assert.ok(
      (await env.redis.pexpiretime(key)) >= lastRestore,
      'a second purchase keeps the count past the last restore',
    );
    assert.equal((await buy(sale.id, 'timed')).body.error, 'limit_reached');
  });

  test("a restore gives quota back and leaves the counts' lifetime as it was; the limit holds across it", async () => {
    const timed = await newSale(env, {
      stock: 10,
      perUserLimit: 3,
      maxPerOrder: 2,
      endsAt: new Date(Date.now() + 3_600_000).toISOString(),
    });
    const endless = await newSale(env, { stock: 10, perUserLimit: 3, maxPerOrder: 2 });
    for (const sale of [timed, endless]) {
      const k = saleKeys(sale.id);
      const key = k.buyCounts;
      const a = await buy(sale.id, 'r', 2);
      const b = await buy(sale.id, 'r', 1);
      assert.deepEqual([a.status, b.status], [202, 202]);
      assert.equal(await env.redis.hget(key, 'r'), '3');
      const expiry = await env.redis.pexpiretime(key);
      assert.equal(expiry > 0, sale === timed, `${sale.id}: TTL only for a sale with an end`);

      assert.equal(
        await restoreStock(env.redis, { saleId: sale.id, orderId: a.body.orderId, userId: 'r', qty: 2 }),
        true,
      );
      assert.equal(await env.redis.hget(key, 'r'), '1');
      assert.equal(await env.redis.pexpiretime(key), expiry, `${sale.id}: a restore keeps the count's expiry`);
      assert.equal(await env.redis.get(k.available), '9');
      // The quota came back, exactly: 2 more fit, a third does not.
      assert.equal((await buy(sale.id, 'r', 2)).status, 202);
      assert.equal((await buy(sale.id, 'r', 1)).body.error, 'limit_reached');
      assert.equal(await env.redis.hget(key, 'r'), '3');
      if (sale === endless)
        assert.equal(await env.redis.pttl(key), -1, 'a purchase after a restore sets no TTL on an endless sale');

      assert.equal(
        await restoreStock(env.redis, { saleId: sale.id, orderId: b.body.orderId, userId: 'r', qty: 1 }),
        true,
      );
      assert.equal(await env.redis.hget(key, 'r'), '2');
      assert.equal(
        await restoreStock(env.redis, { saleId: sale.id, orderId: b.body.orderId, userId: 'r', qty: 1 }),
        false,
        'restored once',
      );
      assert.equal(await env.redis.hget(key, 'r'), '2');
      const all = (await env.redis.lrange(k.winners, 0, -1)).map((e) => e.split('|')[0]!);
      const c = all.find((id) => id !== a.body.orderId && id !== b.body.orderId)!;
      assert.equal(await restoreStock(env.redis, { saleId: sale.id, orderId: c, userId: 'r', qty: 2 }), true);
      assert.equal(
        await env.redis.exists(key),
        0,
        `${sale.id}: a count back at zero is deleted (the hash with its last field)`,
      );
      assert.equal(await env.redis.exists(k.buys('r')), 0, `${sale.id}: no count in the older format`);
      assert.equal(await env.redis.get(k.available), '10');
    }
  });

  test("a batch restore gives each order back once (a repeat in the batch, one restored before, the call resent), each buyer's quota, one announcement", async () => {
    const sale = await newSale(env, { stock: 10, perUserLimit: 3, maxPerOrder: 2 });
    const k = saleKeys(sale.id);
    const [x1, x2, y1] = [await buy(sale.id, 'x', 1), await buy(sale.id, 'x', 2), await buy(sale.id, 'y', 1)].map(
      (r) => r.body.orderId as string,
    );
    assert.equal(await env.redis.get(k.available), '6');
    assert.equal(await restoreStock(env.redis, { saleId: sale.id, orderId: y1!, userId: 'y', qty: 1 }), true);

    const sub = duplicateRedis(env.redis);
    let announced = 0;
    let marked: () => void;
    const marker = new Promise<void>((resolve) => (marked = resolve));
    sub.on('message', (_channel: string, saleId: string) => {
      if (saleId === sale.id) announced++;
      if (saleId === `${sale.id}-marker`) marked();
    });
    await sub.subscribe(STOCK_CHANNEL);
    try {
      const batch = [
        { orderId: x1!, userId: 'x', qty: 1 },
        { orderId: x2!, userId: 'x', qty: 2 },
        { orderId: y1!, userId: 'y', qty: 1 },
        { orderId: x1!, userId: 'x', qty: 1 },
      ];
      assert.deepEqual(await restoreStocks(env.redis, sale.id, batch), [true, true, false, false]);
      assert.deepEqual(
        await restoreStocks(env.redis, sale.id, batch),
        [false, false, false, false],
        'a resent call changes nothing',
      );
      assert.equal(await env.redis.get(k.available), '10');
      assert.equal(await env.redis.get(k.restoredQty), '4');
      assert.deepEqual(
        [await buyCount(env.redis, sale.id, 'x'), await buyCount(env.redis, sale.id, 'y')],
        [0, 0],
        "both buyers' quota back in full",
      );
      assert.equal(await env.redis.exists(k.buyCounts), 0);
      // Published on the connection the restores ran on, so it arrives after every announcement they made.
      await env.redis.publish(STOCK_CHANNEL, `${sale.id}-marker`);
      await marker;
      assert.equal(announced, 1, 'one announcement for the batch, none for the resent call');
    } finally {
      await sub.quit();
    }

    // A batch past one call's size is split, and still gives each order back once.
    const many = Array.from({ length: RESTORE_CHUNK + 1 }, (_, i) => ({
      orderId: `${sale.id}.chunk-${i}`,
      userId: `c${i}`,
      qty: 1,
    }));
    assert.deepEqual(await restoreStocks(env.redis, sale.id, [...many, many[0]!]), [...many.map(() => true), false]);
    assert.equal(await env.redis.get(k.restoredQty), String(4 + RESTORE_CHUNK + 1));
  });

  test('only endsAt 0 means "no end": an end at or before 1970 closes the sale', async () => {
    // Input validation refuses such dates; this loads them past it, as an old or hand-made meta would.
    const rules = {
      stock: 5,
      startsAt: Date.parse('2020-01-01T00:00:00Z'),
      perUserLimit: 1,
      maxPerOrder: 1,
      paymentWindowSeconds: 60,
    };
    for (const [id, endsAt] of [
      ['end-0026', Date.parse('0026-01-01T00:00:00Z')],
      ['end-1969', -1],
    ] as const) {
      assert.equal(await loadSale(env.redis, id, { ...rules, endsAt }), true);
      const [code] = await script(id, 'u', 1);
      assert.equal(code, Refusal.Ended, `${id}: an end of ${endsAt} must mean ended`);
      assert.equal(await env.redis.get(saleKeys(id).available), '5');
      assert.equal(await buyCount(env.redis, id, 'u'), 0);
    }
    assert.equal(await loadSale(env.redis, 'end-none', { ...rules, endsAt: null }), true);
    assert.equal((await script('end-none', 'u', 1))[0], 1);
  });

  test('a new sale keeps its counts in one hash: no key per buyer, one TTL with an end (never shortened), none without', async () => {
    const endsAt = Date.now() + 3_600_000;
    const timed = await newSale(env, {
      stock: 10,
      paymentWindowSeconds: 300,
      startsAt: new Date(Date.now() - 60_000).toISOString(),
      endsAt: new Date(endsAt).toISOString(),
    });
    const endless = await newSale(env, { stock: 10 });
    for (const sale of [timed, endless]) {
      const k = saleKeys(sale.id);
      assert.equal(await env.redis.hget(k.meta, 'buyCounts'), 'hash', `${sale.id}: loaded with the counts hash`);
      for (const u of ['a', 'b', 'c']) assert.equal((await buy(sale.id, u)).status, 202);
      assert.deepEqual(await env.redis.hgetall(k.buyCounts), { a: '1', b: '1', c: '1' });
      assert.deepEqual(await env.redis.keys(`${k.buysPrefix}*`), [], `${sale.id}: no key per buyer`);
      assert.equal((await env.redis.pttl(k.buyCounts)) > 0, sale === timed, `${sale.id}: a TTL only with an end`);
    }
    const k = saleKeys(timed.id);
    const expiry = await env.redis.pexpiretime(k.buyCounts);
    assert.ok(expiry >= endsAt + (300 + MARGIN_S) * 1000, 'the counts outlive end + payment window + margin');
    // A TTL set by a master whose clock ran 30 s behind (before a failover) is longer: a shorter one is not set over it.
    await env.redis.pexpireat(k.buyCounts, expiry + 30_000);
    assert.equal((await script(timed.id, 'd', 1))[0], 1);
    assert.equal(await env.redis.pexpiretime(k.buyCounts), expiry + 30_000, 'a shorter TTL is not set');
    // One set by a master 30 s ahead is pushed later.
    await env.redis.pexpireat(k.buyCounts, expiry - 30_000);
    assert.equal((await script(timed.id, 'e', 1))[0], 1);
    assert.ok((await env.redis.pexpiretime(k.buyCounts)) >= expiry, 'a longer TTL is set');
  });

  test("LEGACY_BUY_COUNTS: sales created with it keep a key per buyer's count, as the previous release does", async () => {
    assert.equal(loadConfig({}).legacyBuyCounts, false);
    assert.equal(loadConfig({ legacyBuyCounts: 'true' }).legacyBuyCounts, true);
    assert.throws(
      () => loadConfig({ legacyBuyCounts: 'yes please' }),
      (err: unknown) => err instanceof ConfigError && /LEGACY_BUY_COUNTS must be true or false/.test(err.message),
    );
    const legacyApi = await buildTestApp(env, { legacyBuyCounts: true });
    try {
      const endsAt = new Date(Date.now() + 3_600_000).toISOString();
      const created = await injector(legacyApi.app)('POST', '/api/sales', {
        body: { name: 'legacy', stock: 5, price: 100, currency: 'EUR', perUserLimit: 2, endsAt },
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      });
      assert.equal(created.status, 201);
      const k = saleKeys(created.body.id);
      assert.equal(
        await env.redis.hexists(k.meta, 'buyCounts'),
        0,
        "the meta says nothing, as the previous release's does",
      );
      assert.equal((await buy(created.body.id, 'l')).status, 202);
      assert.equal(await env.redis.get(k.buys('l')), '1');
      assert.ok((await env.redis.pttl(k.buys('l'))) > 0, 'with its own TTL, as before');
      assert.equal(await env.redis.exists(k.buyCounts), 0);
    } finally {
      await legacyApi.close();
    }
  });

  test('a sale of the previous release (a key per buyer, no `buyCounts` in its meta): the limit holds, restores give back, purchases keep its format', async () => {
    const sale = await newSale(
      env,
      { stock: 10, perUserLimit: 3, maxPerOrder: 3, endsAt: new Date(Date.now() + 3_600_000).toISOString() },
      { legacyBuyCounts: true },
    );
    const k = saleKeys(sale.id);
    assert.equal(await env.redis.hexists(k.meta, 'buyCounts'), 0);
    // Two units the previous release sold: its count and stock, written as it wrote them (its order is pending).
    await env.redis.set(k.buys('old'), '2', 'EX', 7200);
    await env.redis.decrby(k.available, 2);
    const refused = await buy(sale.id, 'old', 2);
    assert.equal(refused.body.error, 'limit_reached', 'the older count counts');
    assert.equal((await script(sale.id, 'old', 2))[0], Refusal.LimitReached);
    assert.equal((await buy(sale.id, 'old', 1)).status, 202);
    assert.equal(await env.redis.get(k.buys('old')), '3', 'a purchase adds to the key of its own');
    assert.equal(await env.redis.exists(k.buyCounts), 0);
    assert.equal((await buy(sale.id, 'old', 1)).body.error, 'limit_reached');

    // The previous release's order closes: its two units come back to the buyer, once.
    const previous = { saleId: sale.id, orderId: `${sale.id}.previous`, userId: 'old', qty: 2 };
    assert.equal(await restoreStock(env.redis, previous), true);
    assert.equal(await restoreStock(env.redis, previous), false);
    assert.equal(await env.redis.get(k.buys('old')), '1');
    assert.equal((await buy(sale.id, 'old', 2)).status, 202);
    assert.equal((await buy(sale.id, 'old', 1)).body.error, 'limit_reached');
    assert.equal(await env.redis.get(k.buys('old')), '3');
    assert.equal(await env.redis.get(k.available), '7', 'ten, less the three units `old` holds');
  });

  test('a buyer with a count in both formats: the limit is their sum; a restore takes from the own key first, then the hash', async () => {
    const sale = await newSale(env, { stock: 10, perUserLimit: 4, maxPerOrder: 3 });
    const k = saleKeys(sale.id);
    // The previous release's API sold `mix` one unit of this sale during the upgrade.
    await env.redis.set(k.buys('mix'), '1');
    await env.redis.decr(k.available);
    const first = await buy(sale.id, 'mix', 2);
    assert.equal(first.status, 202);
    assert.deepEqual([await env.redis.get(k.buys('mix')), await env.redis.hget(k.buyCounts, 'mix')], ['1', '2']);
    assert.deepEqual(await script(sale.id, 'mix', 2), [Refusal.LimitReached, 3], 'refused, with the sum as the count');
    assert.equal((await buy(sale.id, 'mix', 1)).status, 202);
    assert.equal(await buyCount(env.redis, sale.id, 'mix'), 4);
    assert.equal((await buy(sale.id, 'mix', 1)).body.error, 'limit_reached');

    // Two units back: the own key's one first (deleted at zero), then one from the hash.
    assert.equal(
      await restoreStock(env.redis, { saleId: sale.id, orderId: first.body.orderId, userId: 'mix', qty: 2 }),
      true,
    );
    assert.deepEqual([await env.redis.exists(k.buys('mix')), await env.redis.hget(k.buyCounts, 'mix')], [0, '2']);
    assert.equal((await buy(sale.id, 'mix', 2)).status, 202);
    assert.equal((await buy(sale.id, 'mix', 1)).body.error, 'limit_reached');
    assert.equal(await buyCount(env.redis, sale.id, 'mix'), 4);
    assert.equal(await env.redis.get(k.available), '6');
  });
});
