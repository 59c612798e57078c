// Sales administration: the admin lists sales and ends one early. An early end stops purchases at
// once (the purchase script reads the end from Redis), leaves pending orders payable until their
// deadline, and lets the replay settle the sale like any other once its orders are final.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../shared/http/app.js';
import { SALES_REGISTRY, saleKeys } from '../shared/redis/keys.js';
import { Purchaser } from '../shared/purchase/purchaser.js';
import { replayOnce } from '../shared/pipeline/replay.js';
import type { Sale } from '../shared/sales/sale.js';
import { cli } from './support/cli.js';
import { assertConserved, testEnv, type TestEnv } from './support/env.js';
import { newSale, drainWriter } from './support/fixtures.js';
import { stateSnapshot } from './support/snapshot.js';
import { ADMIN_TOKEN, auth } from './support/tokens.js';

let env: TestEnv;
let app: FastifyInstance;

before(async () => {
  env = await testEnv();
  app = buildApp({
    config: env.config,
    pool: env.pool,
    redis: env.redis,
    purchaser: new Purchaser(env.redis, env.config),
    logger: env.logger,
  });
  await app.ready();
});
after(async () => {
  await app.close();
  await env.close();
});

const ADMIN = { authorization: `Bearer ${ADMIN_TOKEN}` };
const HOUR = 3_600_000;
const iso = (ms: number) => new Date(ms).toISOString();

const buy = (sale: Sale, user: string) =>
  app.inject({ method: 'POST', url: `/api/sales/${sale.id}/purchases`, headers: auth(user), payload: { qty: 1 } });
const end = (id: string, headers: Record<string, string> = ADMIN) =>
  app.inject({ method: 'POST', url: `/api/sales/${id}/end`, headers });
const list = (query = '', headers: Record<string, string> = ADMIN) =>
  app.inject({ method: 'GET', url: `/api/sales${query}`, headers });

async function drain(): Promise<void> {
  await drainWriter(env, 'w-admin');
}

const pgEnd = async (id: string) =>
  (await env.pool.query<{ ends_at: Date | null }>('select ends_at from sales where id = $1', [id])).rows[0]!.ends_at;
const redisEnd = async (id: string) => Number(await env.redis.hget(saleKeys(id).meta, 'endsAt'));

describe('ending a sale early', () => {
  test('purchases stop at once; a pending order stays payable; ending again changes nothing', async () => {
    // No end: without an early end this sale would sell, and never settle, for ever.
    const sale = await newSale(env, { stock: 10, paymentWindowSeconds: 3600 });
    const won = await buy(sale, 'alice');
    assert.equal(won.statusCode, 202);
    await drain();

    const before = Date.now();
    const ended = await end(sale.id);
    assert.equal(ended.statusCode, 200, ended.body);
    const view = ended.json();
    assert.equal(view.state, 'ended');
    assert.equal(view.available, 9);
    const endsAt = await pgEnd(sale.id);
    assert.ok(endsAt && endsAt.getTime() >= before - 1000, `ends_at set to now: ${endsAt?.toISOString()}`);
    assert.equal(view.endsAt, endsAt.toISOString());
    assert.equal(await redisEnd(sale.id), endsAt.getTime(), 'Redis has the same end');

    const refused = await buy(sale, 'bob');
    assert.equal(refused.statusCode, 403);
    assert.equal(refused.json().error, 'ended');
    assert.equal(await env.redis.get(saleKeys(sale.id).available), '9', 'no stock taken after the end');
    assert.equal((await app.inject({ method: 'GET', url: `/api/sales/${sale.id}` })).json().state, 'ended');

    // Alice's order keeps its deadline and is paid after the end.
    const orderId = won.json().orderId as string;
    const deadline = (
      await env.pool.query<{ expires_at: Date }>('select expires_at from orders where id = $1', [orderId])
    ).rows[0]!.expires_at;
    assert.ok(deadline.getTime() > Date.now() + HOUR / 2, 'the deadline was not brought forward');
    const paid = await app.inject({ method: 'POST', url: `/api/orders/${orderId}/pay`, headers: auth('alice') });
    assert.equal(paid.statusCode, 200, paid.body);
    assert.equal(paid.json().status, 'paid');

    const again = await end(sale.id);
    assert.equal(again.statusCode, 200);
    assert.equal(again.json().endsAt, endsAt.toISOString(), 'the end stays where it was');
    assert.equal((await pgEnd(sale.id))!.getTime(), endsAt.getTime());
    assert.equal(await redisEnd(sale.id), endsAt.getTime());
    await assertConserved(env, [sale]);
  });

  test('an upcoming sale ended before its start reads ended, and refuses as ended', async () => {
    const sale = await newSale(env, { startsAt: iso(Date.now() + HOUR), endsAt: iso(Date.now() + 2 * HOUR) });
    const ended = await end(sale.id);
    assert.equal(ended.statusCode, 200);
    assert.equal(ended.json().state, 'ended');
    assert.equal(ended.json().startsAt, ended.json().endsAt);
    const refused = await buy(sale, 'carol');
    assert.equal(refused.statusCode, 403);
    assert.equal(refused.json().error, 'ended');
  });

  test('a sale ended early settles once its orders are final and the grace has passed', async () => {
    const sale = await newSale(env, { stock: 5, paymentWindowSeconds: 3600 });
    const orderId = (await buy(sale, 'dave')).json().orderId as string;
    await drain();
    await app.inject({ method: 'POST', url: `/api/orders/${orderId}/pay`, headers: auth('dave') });
    // Every order final, but no end: the replay leaves it in every per-tick loop.
    await replayOnce({ pool: env.pool, redis: env.redis, logger: env.logger });
    assert.equal(await env.redis.sismember(SALES_REGISTRY, sale.id), 1);

    assert.equal((await end(sale.id)).statusCode, 200);
    // The replay waits a minute past the end (SETTLE_AFTER_END_SECONDS): backdate the end instead.
    await env.pool.query(
      `update sales set ends_at = ends_at - interval '2 minutes', starts_at = starts_at - interval '2 minutes' where id = $1`,
      [sale.id],
    );
    const report = await replayOnce({ pool: env.pool, redis: env.redis, logger: env.logger });
    assert.equal(report.settled, 1);
    assert.ok(
      (await env.pool.query('select 1 from sales where id = $1 and settled_at is not null', [sale.id])).rowCount === 1,
    );
    assert.equal(await env.redis.sismember(SALES_REGISTRY, sale.id), 0, 'out of the registry');
    // Ending a settled sale changes nothing either.
    const again = await end(sale.id);
    assert.equal(again.statusCode, 200);
  });

  test('refusals change nothing: no token 401, a buyer 403, a malformed id 400, no such sale 404', async () => {
    const sale = await newSale(env);
    const snapshot = await stateSnapshot(env);
    const cases: [string, Record<string, string>, number, string][] = [
      [sale.id, {}, 401, 'unauthorized'],
      [sale.id, auth('mallory'), 403, 'forbidden'],
      [sale.id, { authorization: 'Bearer not-the-admin-token' }, 403, 'forbidden'],
      ['bad%20id', ADMIN, 400, 'invalid_id'],
      ['no-such-sale', ADMIN, 404, 'sale_not_found'],
      ['bad%20id', {}, 401, 'unauthorized'],
    ];
    for (const [id, headers, status, code] of cases) {
      const res = await end(id, headers);
      assert.equal(res.statusCode, status, `${id} ${JSON.stringify(headers)}: ${res.body}`);
      assert.deepEqual(Object.keys(res.json()).sort(), ['error', 'message']);
      assert.equal(res.json().error, code);
    }
    assert.deepEqual(await stateSnapshot(env), snapshot);
    assert.equal(await pgEnd(sale.id), null);
  });
});

describe('listing sales', () => {
  test('newest first, filtered by state, paged by `before`, with orders by status', async () => {
    await env.pool.query('truncate payments, orders, draw_entries, sale_variants, sales');
    const now = Date.now();
    const upcoming = await newSale(env, { startsAt: iso(now + HOUR) });
    const past = await newSale(env, { startsAt: iso(now - 2 * HOUR), endsAt: iso(now - HOUR) });
    const soldOut = await newSale(env, { stock: 1 });
    const open = await newSale(env, { stock: 5, perUserLimit: 2, maxPerOrder: 2, paymentWindowSeconds: 3600 });
    assert.equal((await buy(soldOut, 'erin')).statusCode, 202);
    const paidOrder = (await buy(open, 'frank')).json().orderId as string;
    assert.equal(
      (
        await app.inject({
          method: 'POST',
          url: `/api/sales/${open.id}/purchases`,
          headers: auth('grace'),
          payload: { qty: 2 },
        })
      ).statusCode,
      202,
    );
    const cancelledOrder = (await buy(open, 'hank')).json().orderId as string;
    await drain();
    await app.inject({ method: 'POST', url: `/api/orders/${paidOrder}/pay`, headers: auth('frank') });
    assert.equal(
      (await app.inject({ method: 'POST', url: `/api/orders/${cancelledOrder}/cancel`, headers: auth('hank') }))
        .statusCode,
      200,
    );

    const all = await list();
    assert.equal(all.statusCode, 200, all.body);
    const page = all.json();
    assert.deepEqual(
      page.sales.map((s: { id: string }) => s.id),
      [open.id, soldOut.id, past.id, upcoming.id],
    );
    assert.equal(page.next, null);
    const first = page.sales[0];
    assert.deepEqual(
      {
        state: first.state,
        available: first.available,
        pending: first.pending,
        paid: first.paid,
        expired: first.expired,
        cancelled: first.cancelled,
      },
      { state: 'open', available: 2, pending: 1, paid: 1, expired: 0, cancelled: 1 },
    );
    assert.deepEqual(Object.keys(first).sort(), [
      'admission',
      'admitOverbook',
      'admitRatePerSecond',
      'available',
      'backfillUntil',
      'buyers',
      'cancelled',
      'challenge',
      'challengeComplexity',
      'currency',
      'endsAt',
      'entriesCloseAt',
      'entriesOpenAt',
      'expired',
      'id',
      'maxPerOrder',
      'name',
      'paid',
      'passSeconds',
      'paymentWindowSeconds',
      'pending',
      'perUserLimit',
      'perVariantLimit',
      'price',
      'seed',
      'seedSha256',
      'startsAt',
      'state',
      'stock',
      'variants',
    ]);
    assert.deepEqual([first.price, first.currency], [1999, 'EUR'], 'the admin list shows the price');
    assert.deepEqual(
      page.sales.map((s: { state: string }) => s.state),
      ['open', 'sold_out', 'ended', 'upcoming'],
    );

    for (const [state, id] of [
      ['upcoming', upcoming.id],
      ['ended', past.id],
      ['sold_out', soldOut.id],
      ['open', open.id],
    ]) {
      const res = (await list(`?state=${state}`)).json();
      assert.deepEqual(
        res.sales.map((s: { id: string }) => s.id),
        [id],
        state,
      );
    }

    const one = (await list('?limit=1')).json();
    assert.deepEqual(
      one.sales.map((s: { id: string }) => s.id),
      [open.id],
    );
    assert.equal(one.next, open.id);
    const two = (await list(`?limit=2&before=${one.next}`)).json();
    assert.deepEqual(
      two.sales.map((s: { id: string }) => s.id),
      [soldOut.id, past.id],
    );
    const last = (await list(`?limit=2&before=${two.next}`)).json();
    assert.deepEqual(
      last.sales.map((s: { id: string }) => s.id),
      [upcoming.id],
    );
    assert.equal(last.next, null);
  });

  test('bad queries are 400 bad_request, strangers 401 or 403, and change nothing', async () => {
    const snapshot = await stateSnapshot(env);
    const cases: [string, Record<string, string>, number, string][] = [
      ['?state=closed', ADMIN, 400, 'bad_request'],
      ['?limit=0', ADMIN, 400, 'bad_request'],
      ['?limit=101', ADMIN, 400, 'bad_request'],
      ['?limit=abc', ADMIN, 400, 'bad_request'],
      ['?limit=1&limit=2', ADMIN, 400, 'bad_request'],
      ['?before=bad%20id', ADMIN, 400, 'bad_request'],
      ['?before=no-such-sale', ADMIN, 400, 'bad_request'],
      ['?sort=asc', ADMIN, 400, 'bad_request'],
      ['', {}, 401, 'unauthorized'],
      ['', auth('mallory'), 403, 'forbidden'],
      ['?state=closed', {}, 401, 'unauthorized'],
    ];
    for (const [query, headers, status, code] of cases) {
      const res = await list(query, headers);
      assert.equal(res.statusCode, status, `${query}: ${res.body}`);
      assert.deepEqual(Object.keys(res.json()).sort(), ['error', 'message']);
      assert.equal(res.json().error, code, query);
    }
    assert.deepEqual(await stateSnapshot(env), snapshot);
  });
});

describe('the CLI', () => {
  test('sale list and sale end, as an operator types them; no such sale exits 2', async () => {
    const sale = await newSale(env, { name: 'CLI end' });
    const listed = await cli(env, ['sale', 'list', '--state', 'open', '--json']);
    assert.equal(listed.code, 0, listed.stderr);
    assert.ok((JSON.parse(listed.stdout) as { id: string }[]).some((s) => s.id === sale.id));

    const ended = await cli(env, ['sale', 'end', sale.id, '--json']);
    assert.equal(ended.code, 0, ended.stderr);
    assert.equal(JSON.parse(ended.stdout).state, 'ended');
    assert.ok(await pgEnd(sale.id));
    const again = await cli(env, ['sale', 'end', sale.id]);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, new RegExp(`^sale ${sale.id} had ended already, at `, 'm'));

    const table = await cli(env, ['sale', 'list', '--state', 'ended']);
    assert.equal(table.code, 0, table.stderr);
    assert.match(
      table.stdout,
      /^id +state +price +stock +available +pending +paid +expired +cancelled +starts +ends +name$/m,
    );
    assert.match(table.stdout, new RegExp(`^${sale.id} +ended +1999 EUR +10 +10 +0 +0 +0 +0 .* CLI end$`, 'm'));

    const missing = await cli(env, ['sale', 'end', 'no-such-sale']);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /No sale with id "no-such-sale"/);
  });
});
