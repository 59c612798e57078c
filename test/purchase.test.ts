import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startApi } from '../daemons/api.js';
import { DEMO_SALE } from '../daemons/dev.js';
import { saleKeys } from '../shared/redis/keys.js';
import { Purchaser } from '../shared/purchase/purchaser.js';
import { parseSaleInput } from '../shared/sales/sale.js';
import { testEnv, type TestEnv } from './support/env.js';
import { countBy, newSale, runConcurrently } from './support/fixtures.js';
import { http, rawRequest } from './support/http.js';
import { token } from './support/tokens.js';

let env: TestEnv;
let api: Awaited<ReturnType<typeof startApi>>;

before(async () => {
  env = await testEnv();
  api = await startApi(env.config, env.logger);
});
after(async () => {
  await api.stop();
  await env.close();
});

const buy = (saleId: string, user: string, body?: unknown) =>
  http(api.port, 'POST', `/api/sales/${saleId}/purchases`, { body, user });

async function purchaseMetric(outcome: string): Promise<number> {
  const text = (await http(api.port, 'GET', '/metrics')).body as string;
  const m = new RegExp(`^flashsale_purchases_total\\{outcome="${outcome}"\\} (\\d+)$`, 'm').exec(text);
  return m ? Number(m[1]) : 0;
}

describe('purchase', () => {
  test('/metrics counts purchases by outcome', async () => {
    const sale = await newSale(env, { stock: 3 });
    const before = {
      queued: await purchaseMetric('queued'),
      sold_out: await purchaseMetric('sold_out'),
      limit: await purchaseMetric('limit_reached'),
    };
    await buy(sale.id, 'metric-0');
    await buy(sale.id, 'metric-0');
    await runConcurrently(4, 4, (i) => buy(sale.id, `metric-${i + 1}`));
    assert.equal(await purchaseMetric('queued'), before.queued + 3);
    assert.equal(await purchaseMetric('sold_out'), before.sold_out + 2);
    assert.equal(await purchaseMetric('limit_reached'), before.limit + 1);
    const text = (await http(api.port, 'GET', '/metrics')).body as string;
    assert.match(
      text,
      /flashsale_http_request_duration_seconds_count\{route="\/api\/sales\/:saleId\/purchases",method="POST",status="202"\} \d+/,
    );
  });

  test('stock 1000, 10,000 distinct buyers at concurrency 500: exactly 1000 win, 9000 sold out, available 0', async () => {
    const sale = await newSale(env, { stock: 1000 });
    // One process is both the 500 clients and the server: at a tenth of a core, a request may wait
    // behind the others for longer than any fixed client timeout. Every answer is awaited; a request
    // that never got one would hold the file until the runner's timeout.
    const results = await runConcurrently(10_000, 500, (i) =>
      http(api.port, 'POST', `/api/sales/${sale.id}/purchases`, { user: `buyer-${i}`, timeoutMs: 0 }),
    );
    const ms = results.map((r) => r.ms).sort((a, b) => a - b);
    console.log(`# 10,000 purchases: median answer ${Math.round(ms[5000]!)} ms, slowest ${Math.round(ms.at(-1)!)} ms`);
    const outcomes = countBy(results, (r) => `${r.status} ${r.body.status ?? r.body.error}`);
    assert.deepEqual(outcomes, { '202 queued': 1000, '409 sold_out': 9000 });
    const k = saleKeys(sale.id);
    assert.equal(await env.redis.get(k.available), '0');
    assert.equal(await env.redis.llen(k.winners), 1000);
    const orderIds = new Set(results.filter((r) => r.status === 202).map((r) => r.body.orderId));
    assert.equal(orderIds.size, 1000);
    const view = await http(api.port, 'GET', `/api/sales/${sale.id}`);
    assert.equal(view.body.available, 0);
    assert.equal(view.body.state, 'sold_out');
  });

  test('a repeat click never burns stock: 200 concurrent purchases by one user with limit 1 give one 202', async () => {
    const sale = await newSale(env, { stock: 50 });
    const results = await runConcurrently(200, 200, () => buy(sale.id, 'eager'));
    assert.deepEqual(
      countBy(results, (r) => `${r.status} ${r.body.status ?? r.body.error}`),
      { '202 queued': 1, '409 limit_reached': 199 },
    );
    assert.equal(await env.redis.get(saleKeys(sale.id).available), '49');
    assert.equal(await env.redis.llen(saleKeys(sale.id).winners), 1);
  });

  test('qty > 1 and per-user limits > 1 are honoured exactly', async () => {
    const sale = await newSale(env, { stock: 10, perUserLimit: 3, maxPerOrder: 2 });
    assert.equal((await buy(sale.id, 'u1', { qty: 2 })).status, 202);
    const over = await buy(sale.id, 'u1', { qty: 2 });
    assert.equal(over.status, 409);
    assert.equal(over.body.error, 'limit_reached');
    assert.equal((await buy(sale.id, 'u1', { qty: 1 })).status, 202);
    assert.equal((await buy(sale.id, 'u1', { qty: 1 })).body.error, 'limit_reached');
    const tooMany = await buy(sale.id, 'u2', { qty: 3 });
    assert.equal(tooMany.status, 400);
    assert.equal(tooMany.body.error, 'qty_above_max');
    // 7 left; u2..u4 take 2 each, leaving 1: a qty-2 order must not take it.
    for (const u of ['u2', 'u3', 'u4']) assert.equal((await buy(sale.id, u, { qty: 2 })).status, 202);
    const short = await buy(sale.id, 'u5', { qty: 2 });
    assert.equal(short.status, 409);
    assert.equal(short.body.error, 'not_enough_stock');
    assert.equal((await buy(sale.id, 'u5', { qty: 1 })).status, 202);
    assert.equal((await buy(sale.id, 'u6', { qty: 1 })).body.error, 'sold_out');
    assert.equal(await env.redis.get(saleKeys(sale.id).available), '0');
    assert.equal(await env.redis.llen(saleKeys(sale.id).winners), 6);
  });

  test('concurrent multi-unit buyers never oversell: stock 100, 300 buyers of qty 1-3 at concurrency 100', async () => {
    const sale = await newSale(env, { stock: 100, perUserLimit: 3, maxPerOrder: 3 });
    const results = await runConcurrently(300, 100, (i) => buy(sale.id, `m-${i}`, { qty: (i % 3) + 1 }));
    const won = results.map((r, i) => (r.status === 202 ? (i % 3) + 1 : 0)).reduce((a, b) => a + b, 0);
    const left = Number(await env.redis.get(saleKeys(sale.id).available));
    assert.ok(left >= 0);
    assert.equal(won + left, 100);
    assert.equal(left, 0, 'with buyers of qty 1 still arriving, the last unit is sold');
  });

  test('a sale that has not started or has ended refuses', async () => {
    const later = await newSale(env, { startsAt: new Date(Date.now() + 60_000).toISOString() });
    const early = await buy(later.id, 'u');
    assert.equal(early.status, 403);
    assert.equal(early.body.error, 'not_started');
    assert.equal((await http(api.port, 'GET', `/api/sales/${later.id}`)).body.state, 'upcoming');
    const past = await newSale(env, {
      startsAt: new Date(Date.now() - 60_000).toISOString(),
      endsAt: new Date(Date.now() - 1000).toISOString(),
    });
    const late = await buy(past.id, 'u');
    assert.equal(late.status, 403);
    assert.equal(late.body.error, 'ended');
    assert.equal((await http(api.port, 'GET', `/api/sales/${past.id}`)).body.state, 'ended');
    for (const s of [later, past]) assert.equal(await env.redis.get(saleKeys(s.id).available), '10');
  });

  test('sale input: an offset is honoured, the years 2000 and 9999 and maxPerOrder = perUserLimit are accepted', () => {
    const sale = parseSaleInput({
      name: 'edges',
      stock: 1,
      price: 1,
      currency: 'EUR',
      perUserLimit: 2,
      maxPerOrder: 2,
      startsAt: '2000-01-01T01:30:00+01:30',
      endsAt: '9999-12-31T23:59:59.999Z',
    });
    assert.equal(sale.startsAt.toISOString(), '2000-01-01T00:00:00.000Z');
    assert.equal(sale.endsAt!.toISOString(), '9999-12-31T23:59:59.999Z');
    assert.equal(sale.maxPerOrder, 2);
    // The demo sale (defaults: start now, no end) still passes.
    const demo = parseSaleInput(DEMO_SALE);
    assert.deepEqual([demo.perUserLimit, demo.maxPerOrder, demo.endsAt], [1, 1, null]);
  });

  test('sold out is answered from memory, and restored stock is buyable again at once', async () => {
    const sale = await newSale(env, { stock: 1 });
    assert.equal((await buy(sale.id, 'a')).status, 202);
    assert.equal((await buy(sale.id, 'b')).body.error, 'sold_out');
    // Put a unit back as the restore path does; the API hears it on the stock channel.
    const { restoreStock } = await import('../shared/orders/scripts.js');
    const [entry] = await env.redis.lrange(saleKeys(sale.id).winners, 0, 0);
    const orderId = entry!.split('|')[0]!;
    assert.equal(await restoreStock(env.redis, { saleId: sale.id, orderId, userId: 'a', qty: 1 }), true);
    assert.equal(
      await restoreStock(env.redis, { saleId: sale.id, orderId, userId: 'a', qty: 1 }),
      false,
      'a second restore of the same order is refused',
    );
    assert.equal(await env.redis.get(saleKeys(sale.id).available), '1');
    let again: Awaited<ReturnType<typeof buy>> | undefined;
    for (let i = 0; i < 50; i++) {
      again = await buy(sale.id, 'b');
      if (again.status === 202) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.equal(again!.status, 202);
  });

  test('a sale known sold out answers a buyer 409 sold_out before reading the body; no buyer is still 401', async () => {
    const sale = await newSale(env, { stock: 1 });
    assert.equal((await buy(sale.id, 'a')).status, 202);
    assert.equal((await buy(sale.id, 'b')).body.error, 'sold_out');
    const malformed = await buy(sale.id, 'c', '{"qty": "many"');
    assert.deepEqual([malformed.status, malformed.body.error], [409, 'sold_out'], 'the body is never read');
    const anonymous = await http(api.port, 'POST', `/api/sales/${sale.id}/purchases`, { body: { qty: 1 } });
    assert.deepEqual([anonymous.status, anonymous.body.error], [401, 'unauthorized']);
    // A body still arriving after that answer must arrive within BODY_TIMEOUT_MS, as any body must:
    // the server closes the connection then, instead of waiting REQUEST_TIMEOUT_MS for it.
    const headers =
      `POST /api/sales/${sale.id}/purchases HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token('d')}\r\n` +
      'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"q';
    // So must one refused before its body for want of a buyer.
    const [trickled, unknown] = await Promise.all(
      [headers, headers.replace(/Authorization: [^\r]*\r\n/, '')].map((text) =>
        rawRequest(api.port, text, { timeoutMs: 30_000 }),
      ),
    );
    for (const [r, status, error] of [
      [trickled!, 409, 'sold_out'],
      [unknown!, 401, 'unauthorized'],
    ] as const) {
      assert.deepEqual(
        [r.status, (r.body as { error?: string }).error, r.closed],
        [status, error, true],
        JSON.stringify(r),
      );
      assert.ok(
        r.ms >= env.config.bodyTimeoutMs && r.ms < env.config.requestTimeoutMs,
        `${status}: closed after ${r.ms} ms: at the body deadline (${env.config.bodyTimeoutMs} ms), not the request timeout (${env.config.requestTimeoutMs} ms)`,
      );
    }
    // Another sale, not sold out, still refuses the same body.
    const open = await newSale(env, { stock: 5 });
    assert.deepEqual([(await buy(open.id, 'c', '{"qty": "many"')).status], [400]);
    // The connection that carried the unread body serves its next request.
    assert.equal((await buy(open.id, 'c')).status, 202);
  });

  test('once the sold-out memory runs out, one purchase asks Redis while the rest are still answered from memory; its answer decides', async () => {
    const purchaser = new Purchaser(env.redis, { soldOutCacheMs: 50, buyCountTtlSeconds: 3600 });
    const sale = await newSale(env, { stock: 1 });
    await purchaser.purchase(sale.id, 'first', 1);
    await assert.rejects(purchaser.purchase(sale.id, 'second', 1), { code: 'sold_out' });
    assert.equal(purchaser.soldOut(sale.id), true);
    const ran = Date.now() + 60;
    assert.equal(purchaser.soldOut(sale.id, ran), false, 'the memory has run out');
    assert.deepEqual(
      Array.from({ length: 5 }, () => purchaser.answerSoldOut(sale.id, ran)),
      [false, true, true, true, true],
      'one asks, the others wait for its answer',
    );
    // The one that asks learns the sale is still sold out: remembered again.
    await assert.rejects(purchaser.purchase(sale.id, 'third', 1), { code: 'sold_out' });
    assert.equal(purchaser.soldOut(sale.id), true);
    // A unit comes back without the stock channel's news: the next one to ask wins, and the memory is gone.
    await env.redis.incr(saleKeys(sale.id).available);
    assert.equal(purchaser.answerSoldOut(sale.id, Date.now() + 60), false);
    await purchaser.purchase(sale.id, 'fourth', 1);
    assert.equal(purchaser.soldOut(sale.id), false, 'a win forgets the sold-out memory');
  });
});
