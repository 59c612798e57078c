// One clock per decision: processes whose own clocks are wrong (libfaketime shifts them) still
// judge a sale's window, a challenge's or a token's expiry, an order's deadline and a writer's lease
// by Redis's TIME, and a draw's backfill by Postgres's now(). Each sale's times are placed
// relative to that clock, minutes away from every edge, so how fast the machine runs changes
// nothing.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { ADMISSION_CHANNEL, CHALLENGE_KEY, SALES_REGISTRY, saleKeys } from '../shared/redis/keys.js';
import { PURCHASE_TOKEN_SECONDS } from '../shared/purchase/challenge.js';
import { newSecret, ticketOf } from '../shared/admission/draw/draw.js';
import { insertEntry } from '../shared/admission/draw/queries.js';
import { awardUnits, endBackfill, makeDraw } from '../shared/admission/draw/steps.js';
import { PURCHASE_TOKEN_HEADER } from '../shared/http/routes/purchase.js';
import { exchangeScript, purchaseScript, spendTokenScript } from '../shared/sales/scripts.js';
import type { Sale } from '../shared/sales/sale.js';
import { freePort } from '../tools/local-stack.js';
import { cli, exited, ready, spawnCli } from './support/cli.js';
import { testEnv, type TestEnv } from './support/env.js';
import { ADMIN_TOKEN } from './support/tokens.js';
import {
  closeEntries,
  deadlineNow,
  drainWriter,
  endBackfillIn,
  newSale,
  openDraw,
  orderCount,
  startedAgo,
  waitFor,
  written,
} from './support/fixtures.js';
import { http, outcome } from './support/http.js';
import { exchange, solvedPayload } from './support/pow.js';
import type { RoomTick } from '../shared/admission/loop.js';
import { admitStep, joinQueue, Phase } from '../shared/admission/room/room.js';
import { duplicateRedis } from '../shared/redis/connect.js';

const FAKETIME_LIB = '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';
const MINUTE = 60_000;

let env: TestEnv;
const children: ChildProcess[] = [];

before(async () => {
  // DEBUG: the listener's test stops Redis's active expiry.
  env = await testEnv({}, { redisArgs: ['--enable-debug-command', 'local'] });
});
after(async () => {
  for (const child of children) child.kill('SIGTERM');
  await Promise.all(children.map((c) => exited(c)));
  await env?.close();
});

/** `flashsale <kind>` whose clock is `offset` off (libfaketime: '-600s', '+30s'), ready. */
async function shifted(kind: string, offset: string, vars: Record<string, string> = {}): Promise<ChildProcess> {
  const child = spawnCli(env, [kind], {
    LD_PRELOAD: FAKETIME_LIB,
    FAKETIME: offset,
    FAKETIME_DONT_FAKE_MONOTONIC: '1',
    OPS_PORT: '0',
    ...vars,
  });
  children.push(child);
  await ready(child, `${kind} at ${offset}`);
  return child;
}

async function redisNow(): Promise<number> {
  const [s, us] = await env.redis.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

const iso = (ms: number) => new Date(ms).toISOString();

test("clock: an API 10 min slow or 10 min fast judges a sale's window by Redis's clock, not its own", async () => {
  const [slowPort, fastPort] = [await freePort(), await freePort()];
  await Promise.all([
    shifted('api', '-600s', { PORT: String(slowPort) }),
    shifted('api', '+600s', { PORT: String(fastPort) }),
  ]);
  const now = await redisNow();
  // By Redis: open since 2 s, ended 2 s ago, starting in 5 min, ending in 5 min.
  const open = await newSale(env, { startsAt: iso(now - 2000), endsAt: iso(now + 30 * MINUTE) });
  const ended = await newSale(env, { startsAt: iso(now - 30 * MINUTE), endsAt: iso(now - 2000) });
  const upcoming = await newSale(env, { startsAt: iso(now + 5 * MINUTE), endsAt: iso(now + 30 * MINUTE) });
  const ending = await newSale(env, { startsAt: iso(now - 2000), endsAt: iso(now + 5 * MINUTE) });
  const buy = (port: number, saleId: string) =>
    http(port, 'POST', `/api/sales/${saleId}/purchases`, { body: { qty: 1 }, user: `buyer-${randomUUID()}` });
  const available = async (saleId: string) => Number(await env.redis.get(saleKeys(saleId).available));

  // The slow API's clock says `open` starts in 10 min and `ended` is open for another 10.
  const [a, b] = [await buy(slowPort, open.id), await buy(slowPort, ended.id)];
  assert.equal(a.status, 202, JSON.stringify(a.body));
  assert.equal(b.status, 403);
  assert.equal(b.body.error, 'ended');
  // The fast API's clock says `upcoming` started 5 min ago and `ending` ended 5 min ago.
  const [c, d] = [await buy(fastPort, upcoming.id), await buy(fastPort, ending.id)];
  assert.equal(c.status, 403);
  assert.equal(c.body.error, 'not_started');
  assert.equal(d.status, 202, JSON.stringify(d.body));
  assert.deepEqual(
    [await available(open.id), await available(ended.id), await available(upcoming.id), await available(ending.id)],
    [9, 10, 10, 9],
    'a unit taken for each purchase accepted, none for a refusal',
  );
});

test("clock: a sale created with no start by an API or a CLI 10 min fast starts at Postgres's now, not 10 min later", async () => {
  const port = await freePort();
  await shifted('api', '+600s', { PORT: String(port) });
  const made = await http(port, 'POST', '/api/sales', {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    body: { id: `clock-start-${randomUUID()}`, name: 'No start', stock: 10, price: 1999, currency: 'EUR' },
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const id = `clock-start-cli-${randomUUID()}`;
  const faked = { LD_PRELOAD: FAKETIME_LIB, FAKETIME: '+600s', FAKETIME_DONT_FAKE_MONOTONIC: '1' };
  const cliArgs = [
    'sale',
    'create',
    '--id',
    id,
    '--name',
    'No start',
    '--stock',
    '10',
    '--price',
    '1999',
    '--currency',
    'EUR',
  ];
  const created = await cli(env, cliArgs, faked);
  assert.equal(created.code, 0, created.out);
  for (const saleId of [made.body.id as string, id]) {
    const row = (
      await env.pool.query<{ started: boolean }>('select starts_at <= now() as started from sales where id = $1', [
        saleId,
      ])
    ).rows[0];
    assert.equal(row?.started, true, `${saleId}: started by Postgres's clock`);
    // Open by Redis's clock too: a purchase through that API is taken at once.
    const bought = await http(port, 'POST', `/api/sales/${saleId}/purchases`, {
      body: { qty: 1 },
      user: `b-${saleId}`,
    });
    assert.equal(bought.status, 202, JSON.stringify(bought.body));
  }
});

test("clock: a writer 10 min fast still sets each order's expiry key at its deadline (ack.lua judges by Redis's clock)", async () => {
  // A payment window of 5 min: by the writer's clock every deadline it writes is past.
  const sale = await newSale(env, { stock: 5, paymentWindowSeconds: 300 });
  const orderIds: string[] = [];
  for (let i = 0; i < 3; i++) {
    const orderId = `${sale.id}.${randomUUID()}`;
    const [code] = await purchaseScript(env.redis, {
      saleId: sale.id,
      userId: `w${i}`,
      qty: 1,
      orderId,
      buyCountTtlSeconds: 3600,
    });
    assert.equal(code, 1);
    orderIds.push(orderId);
  }
  await shifted('order-writer', '+600s');
  const k = saleKeys(sale.id);
  // Written and acknowledged: every id has left the purchased set (ack.lua) or stayed in it for a close.
  await waitFor(
    'the writer to acknowledge the batch',
    async () => (await env.redis.hlen(k.queued)) === 0 && (await env.redis.llen(k.winners)) === 0,
  );
  const rows = (
    await env.pool.query<{ id: string; status: string; ms: string }>(
      `select id, status, (extract(epoch from expires_at) * 1000)::int8 as ms from orders where sale_id = $1 order by id`,
      [sale.id],
    )
  ).rows;
  assert.deepEqual(
    rows.map((r) => r.status),
    ['pending', 'pending', 'pending'],
    'no order closed early',
  );
  for (const r of rows) {
    assert.equal(
      Number(await env.redis.pexpiretime(k.expiry(r.id))),
      Number(r.ms),
      `${r.id}: its key fires at its deadline`,
    );
    assert.equal(Number(await env.redis.zscore(k.deadlines, r.id)), Number(r.ms), `${r.id}: indexed by its deadline`);
    assert.equal(await env.redis.sismember(k.purchased, r.id), 0);
  }
});

test("clock: a challenge is exchanged by Redis's clock: an API 30 s fast refuses a sale not started by Redis, one 30 s slow gives a token for a sale open by Redis, the token lasting from Redis's now", async () => {
  const [slowPort, fastPort] = [await freePort(), await freePort()];
  await Promise.all([
    shifted('api', '-30s', { PORT: String(slowPort) }),
    shifted('api', '+30s', { PORT: String(fastPort) }),
  ]);
  const now = await redisNow();
  const pow = { challenge: 'pow', challengeComplexity: 1000, endsAt: iso(now + 30 * MINUTE) };
  // By Redis: `open` opened 2 s ago (the slow API's clock says in 28 s), `upcoming` opens in 10 s (the fast API's says 20 s ago).
  const open = await newSale(env, { ...pow, startsAt: iso(now - 2000) });
  const upcoming = await newSale(env, { ...pow, startsAt: iso(now + 10_000) });
  const early = await exchange(fastPort, upcoming, 'eve', await solvedPayload(fastPort, upcoming, 'eve'));
  assert.equal(early.status, 403, JSON.stringify(early.body));
  assert.equal(early.body.error, 'not_started');
  const payload = await solvedPayload(slowPort, open, 'sam');
  const before = await redisNow();
  const t = await exchange(slowPort, open, 'sam', payload);
  const after = await redisNow();
  assert.equal(t.status, 200, JSON.stringify(t.body));
  const expiresAt = Date.parse(t.body.expiresAt);
  assert.ok(
    expiresAt >= before + PURCHASE_TOKEN_SECONDS * 1000 && expiresAt <= after + PURCHASE_TOKEN_SECONDS * 1000,
    `the token expires ${PURCHASE_TOKEN_SECONDS} s after Redis's now (${before}..${after}), not the API's: ${expiresAt}`,
  );
});

test("clock: exchange.lua refuses a challenge past its expiry by Redis's clock and spends a live one once", async () => {
  const sale = await newSale(env, { challenge: 'pow', challengeComplexity: 1000 });
  const now = await redisNow();
  assert.equal((await exchangeScript(env.redis, sale.id, 'sig-old', now - 1))[0], -14, "expired by Redis's clock");
  assert.equal(
    await env.redis.exists(saleKeys(sale.id).challengeUsed('sig-old')),
    0,
    'an expired challenge is not spent',
  );
  assert.equal((await exchangeScript(env.redis, sale.id, 'sig-live', now + MINUTE))[0], 1);
  assert.equal((await exchangeScript(env.redis, sale.id, 'sig-live', now + MINUTE))[0], -9, 'one solution, one token');
});

/** A purchase token as exchange gives one, signed with the key the APIs share, expiring at `expiresAt` (ms). */
async function purchaseToken(
  saleId: string,
  userId: string,
  expiresAt: number,
): Promise<{ token: string; id: string }> {
  await env.redis.set(CHALLENGE_KEY, randomBytes(32).toString('hex'), 'NX');
  const key = (await env.redis.get(CHALLENGE_KEY))!;
  const id = randomBytes(12).toString('base64url');
  const body = Buffer.from(JSON.stringify({ s: saleId, u: userId, n: id, e: expiresAt })).toString('base64url');
  return { token: `${body}.${createHmac('sha256', key).update(body).digest('base64url')}`, id };
}

const entryCount = async (saleId: string) =>
  (await env.pool.query<{ n: number }>('select count(*)::int as n from draw_entries where sale_id = $1', [saleId]))
    .rows[0]!.n;

test("clock: a pow draw's entry judges its purchase token by Redis's clock: an API 10 min slow refuses a token expired by Redis, one 10 min fast takes a token live by Redis", async () => {
  const [slowPort, fastPort] = [await freePort(), await freePort()];
  await Promise.all([
    shifted('api', '-600s', { PORT: String(slowPort) }),
    shifted('api', '+600s', { PORT: String(fastPort) }),
  ]);
  const sale = await newSale(env, { ...openDraw(), challenge: 'pow', challengeComplexity: 1000 });
  const now = await redisNow();
  const enter = (port: number, user: string, token: string) =>
    http(port, 'POST', `/api/sales/${sale.id}/entries`, { user, headers: { [PURCHASE_TOKEN_HEADER]: token } });
  // Expired a minute ago by Redis: the slow API's clock says it has 9 min left.
  const old = await purchaseToken(sale.id, 'sid', now - MINUTE);
  assert.equal(outcome(await enter(slowPort, 'sid', old.token)), '403 invalid_purchase_token');
  assert.equal(await env.redis.exists(saleKeys(sale.id).tokenUsed(old.id)), 0, 'a refused token is not spent');
  assert.equal(await entryCount(sale.id), 0, 'no entry for a refused token');
  // Live for 5 min by Redis: the fast API's clock says it expired 5 min ago.
  const live = await purchaseToken(sale.id, 'fay', now + 5 * MINUTE);
  const r = await enter(fastPort, 'fay', live.token);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.state, 'entered');
  assert.equal(await env.redis.get(saleKeys(sale.id).tokenUsed(live.id)), 'entry', 'the token is spent by the entry');
  assert.equal(await entryCount(sale.id), 1);
  assert.equal(outcome(await enter(fastPort, 'fay', live.token)), '200', 'the buyer gets their entry back');
  const again = await purchaseToken(sale.id, 'fay', now + 5 * MINUTE);
  assert.equal(
    outcome(await enter(slowPort, 'gus', again.token)),
    '403 invalid_purchase_token',
    'a token is bound to its buyer',
  );
});

test("clock: spend_token.lua refuses a token past its expiry by Redis's clock and spends a live one once", async () => {
  const sale = await newSale(env, { ...openDraw(), challenge: 'pow', challengeComplexity: 1000 });
  const now = await redisNow();
  assert.equal(await spendTokenScript(env.redis, sale.id, 'tok-old', now - 1), -14, "expired by Redis's clock");
  assert.equal(await env.redis.exists(saleKeys(sale.id).tokenUsed('tok-old')), 0, 'an expired token is not spent');
  assert.equal(await spendTokenScript(env.redis, sale.id, 'tok-live', now + MINUTE), 1);
  assert.equal(await spendTokenScript(env.redis, sale.id, 'tok-live', now + MINUTE), -9, 'one token, one entry');
});

const deps = () => ({ pool: env.pool, redis: env.redis, buyCountTtlSeconds: 86_400 });

/** A drawn draw of one unit and two entrants, rank 1 holding the unit, rank 2 waiting, backfill open for an hour. */
async function drawnDraw(): Promise<Sale> {
  let sale = await newSale(env, { ...openDraw(), stock: 1 });
  for (const b of ['d1', 'd2']) {
    const secret = newSecret();
    assert.equal(typeof (await insertEntry(env.pool, sale.id, b, ticketOf(sale.id, b, secret), secret)), 'object');
  }
  sale = await closeEntries(env, sale);
  assert.equal(await makeDraw(env.pool, sale, sale.entriesCloseAt!.getTime()), 2);
  assert.equal(await awardUnits(deps(), sale, sale.entriesCloseAt!.getTime()), 1);
  return sale;
}
const statuses = async (saleId: string) =>
  (
    await env.pool.query<{ status: string }>('select status from draw_entries where sale_id = $1 order by draw_rank', [
      saleId,
    ])
  ).rows.map((r) => r.status);
const backfillUntil = (sale: Sale, interval: string) => endBackfillIn(env, sale, interval);

test("clock: a draw's backfill ends by Postgres's clock: a caller whose clock is 10 min fast ends none early, one 10 min slow awards none late", async () => {
  const early = await backfillUntil(await drawnDraw(), '5 minutes');
  // Backfill runs 5 more minutes by Postgres; the caller's clock says it ended 5 min ago.
  assert.equal(await endBackfill(deps(), early, (await redisNow()) + 10 * MINUTE), 0);
  assert.deepEqual(await statuses(early.id), ['won', 'waiting']);
  const late = await backfillUntil(await drawnDraw(), '-1 second');
  // A unit comes back after backfill by Postgres; the caller's clock says backfill has 10 min left.
  await env.redis.incr(saleKeys(late.id).available);
  assert.equal(await awardUnits(deps(), late, (await redisNow()) - 10 * MINUTE), 0);
  assert.deepEqual(await statuses(late.id), ['won', 'waiting']);
  assert.equal(Number(await env.redis.get(saleKeys(late.id).available)), 1, 'the unit stays unsold');
  assert.equal(await endBackfill(deps(), late, late.backfillUntil!.getTime()), 1);
  assert.deepEqual(await statuses(late.id), ['won', 'lost']);
  // The unit was made up for the test: taken away again, the sale's units add up (the replay checks them).
  await env.redis.decr(saleKeys(late.id).available);
});

test("clock: an admission loop 10 min slow ends a draw's backfill at Postgres's backfillUntil, not its own", async () => {
  const sale = await backfillUntil(await drawnDraw(), '-1 second');
  // By the loop's clock backfill has 10 min left; its next tick ends it all the same.
  const loop = await shifted('admission', '-600s');
  await waitFor(
    'the slow loop to end backfill',
    async () =>
      (await env.pool.query('select 1 from sales where id = $1 and draw_over_at is not null', [sale.id])).rowCount ===
      1,
  );
  assert.deepEqual(await statuses(sale.id), ['won', 'lost']);
  // No loop leads for the tests after this one.
  loop.kill('SIGTERM');
  assert.equal(await exited(loop), 0);
});

test("clock: a replay pass 10 min fast does not settle a sale whose writer lease is live by Redis's clock", async () => {
  const now = await redisNow();
  const ended = { stock: 10, startsAt: iso(now - 2 * 60 * MINUTE), endsAt: iso(now - 60 * MINUTE) };
  const [idle, leased] = [await newSale(env, ended), await newSale(env, ended)];
  // Live for 5 min by Redis: by the pass's clock it ran out 5 min ago.
  await env.redis.zadd(saleKeys(leased.id).writers, now + 5 * MINUTE, 'w-alive');
  const settledAt = async (id: string) =>
    (await env.pool.query<{ settled_at: Date | null }>('select settled_at from sales where id = $1', [id])).rows[0]!
      .settled_at;
  const faked = { LD_PRELOAD: FAKETIME_LIB, FAKETIME: '+600s', FAKETIME_DONT_FAKE_MONOTONIC: '1' };
  const pass = await cli(env, ['replay', '--once'], faked);
  assert.equal(pass.code, 0, pass.out);
  assert.ok(await settledAt(idle.id), 'the idle sale settled in that pass');
  assert.equal(await settledAt(leased.id), null, 'the sale with a live lease did not');
  assert.equal(await env.redis.sismember(SALES_REGISTRY, leased.id), 1);
  // The lease runs out by Redis's clock: the next pass settles it.
  await env.redis.zadd(saleKeys(leased.id).writers, (await redisNow()) - 1, 'w-alive');
  const next = await cli(env, ['replay', '--once'], faked);
  assert.equal(next.code, 0, next.out);
  assert.ok(await settledAt(leased.id));
});

// A waiting room is judged by Redis's TIME too: its opening and its passes (admit.lua).

test("clock: an admission loop 30 s fast opens no room before its start by Redis's clock, and stamps each pass Redis's now plus its lifetime", async () => {
  const ticks: RoomTick[] = [];
  const sub = duplicateRedis(env.redis);
  try {
    await sub.subscribe(ADMISSION_CHANNEL);
    sub.on('message', (_channel: string, message: string) => ticks.push(JSON.parse(message) as RoomTick));
    const before = await redisNow();
    const room = {
      admission: 'queue',
      admitRatePerSecond: 1000,
      admitOverbook: 1,
      passSeconds: 60,
      endsAt: iso(before + 30 * MINUTE),
    };
    // By Redis: `open` opened 2 s ago; `upcoming` opens in 28 s, which the loop's clock says was 2 s ago.
    const open = await newSale(env, { ...room, startsAt: iso(before - 2000) });
    const upcoming = await newSale(env, { ...room, startsAt: iso(before + 28_000) });
    for (const b of ['q1', 'q2', 'q3']) await joinQueue(env.redis, open.id, b);
    await joinQueue(env.redis, upcoming.id, 'q4');
    const loop = await shifted('admission', '+30s');
    const first = await waitFor("the loop's first tick of the upcoming room", async () =>
      ticks.find((t) => t.saleId === upcoming.id),
    );
    const admitting = await waitFor('the tick that admits the open room', async () =>
      ticks.find((t) => t.saleId === open.id && t.admitted === 3),
    );
    const after = await redisNow();
    assert.equal(
      first.phase,
      Phase.NotStarted,
      `a room opening at ${upcoming.startsAt.getTime()} by Redis, stepped at ${first.at}`,
    );
    assert.ok(
      first.at >= before && first.at <= after,
      `the tick's time is Redis's (${before}..${after}), not the loop's: ${first.at}`,
    );
    const k = saleKeys(upcoming.id);
    assert.equal(await env.redis.hget(k.room, 'phase'), null, 'the room is still shut');
    assert.equal(await env.redis.zscore(k.passes, 'q4'), null, 'nobody admitted');
    // Each pass lasts 60 s from the Redis time of its step, which lies between the two readings.
    assert.ok(
      admitting.at >= before && admitting.at <= after,
      `admitted at ${admitting.at}, by Redis ${before}..${after}`,
    );
    assert.equal(admitting.passExpiresAt, admitting.at + 60_000);
    for (const b of ['q1', 'q2', 'q3'])
      assert.equal(Number(await env.redis.zscore(saleKeys(open.id).passes, b)), admitting.passExpiresAt, b);
    // The same loop opens the room once its start has come by Redis's clock.
    await startedAgo(env, upcoming, 1000);
    await waitFor(
      'the upcoming room to open and admit q4',
      async () => (await env.redis.zscore(k.passes, 'q4')) !== null,
    );
    assert.equal(await env.redis.hget(k.room, 'phase'), 'open');
    // No loop admits for the tests after this one.
    loop.kill('SIGTERM');
    assert.equal(await exited(loop), 0);
  } finally {
    sub.disconnect();
  }
});

test("clock: an API 30 s slow tells a buyer their pass has expired once Redis's clock is past it, and the sale ended once Redis's clock is past its end", async () => {
  const port = await freePort();
  await shifted('api', '-30s', { PORT: String(port) });
  const now = await redisNow();
  const s = await newSale(env, {
    admission: 'queue',
    admitRatePerSecond: 1000,
    admitOverbook: 1,
    passSeconds: 60,
    startsAt: iso(now - 2000),
    endsAt: iso(now + 30 * MINUTE),
  });
  for (const b of ['v1', 'v2']) await joinQueue(env.redis, s.id, b);
  // One step of the room (no loop runs here: the previous test stopped its own).
  assert.equal((await admitStep(env.redis, s, 1000)).admitted, 2);
  const k = saleKeys(s.id);
  // v1's pass ran out 10 s ago by Redis (the API's clock says it has 20 s left).
  const [first] = await env.redis.zrange(k.queue, '0', '0');
  await env.redis.zadd(k.passes, (await redisNow()) - 10_000, first!);
  const state = async (user: string) =>
    (await http(port, 'GET', `/api/sales/${s.id}/queue/me`, { user })).body.state as string;
  assert.equal(await state(first!), 'expired');
  const second = first === 'v1' ? 'v2' : 'v1';
  assert.equal(await state(second), 'admitted');
  // The sale ended 10 s ago by Redis (the API's clock says in 20 s): a buyer still in line is told so.
  await joinQueue(env.redis, s.id, 'v3');
  await env.redis.hset(k.meta, 'endsAt', (await redisNow()) - 10_000);
  await env.pool.query('update sales set ends_at = to_timestamp($2::float8 / 1000) where id = $1', [
    s.id,
    (await redisNow()) - 10_000,
  ]);
  await waitFor('the API to see the end', async () => (await state('v3')) === 'ended');
});

// An order's expiry key fires by Redis's clock, and the listener's nudger looks for the due keys by it too (due.lua).

test("clock: a listener 10 min slow touches an expiry key at its deadline by Redis's clock, and closes its order then (or at Postgres's deadline, when the key fired first), not 10 min later", async () => {
  const sale = await newSale(env, { stock: 5, paymentWindowSeconds: 3600 });
  const orderIds: string[] = [];
  for (const userId of ['l1', 'l2', 'l3']) {
    const orderId = `${sale.id}.${randomUUID()}`;
    const [code] = await purchaseScript(env.redis, {
      saleId: sale.id,
      userId,
      qty: 1,
      orderId,
      buyCountTtlSeconds: 3600,
    });
    assert.equal(code, 1);
    orderIds.push(orderId);
  }
  // The writer 10 min fast of an earlier test may write them first.
  await drainWriter(env, 'w-listener-clock');
  await written(env, sale.id);
  const [closing, waiting, early] = orderIds as [string, string, string];
  await shifted('expiry-listener', '-600s');
  const k = saleKeys(sale.id);
  // Redis then deletes an expired key only when it is touched: the nudger's look alone can close the order.
  await env.redis.call('DEBUG', 'SET-ACTIVE-EXPIRE', '0');
  try {
    // Due now by Postgres and Redis; by the listener's clock, in 10 min.
    assert.deepEqual(await deadlineNow(env, sale.id, [closing]), [closing]);
    await waitFor(
      'the slow listener to close the order',
      async () => (await orderCount(env, sale.id, 'expired')) === 1 && (await env.redis.get(k.available)) === '3',
    );
    // Its key fires 3 s before its deadline by Postgres (as when Redis's clock runs ahead): the close
    // is refused, and tried again when Postgres's clock reaches the deadline, not the listener's.
    await env.pool.query(`update orders set expires_at = now() + interval '3 seconds' where id = $1`, [early]);
    await env.redis.zadd(k.deadlines, 'XX', await redisNow(), early);
    await env.redis.pexpire(k.expiry(early), 100);
    await waitFor(
      'the slow listener to close the order whose key fired early',
      async () => (await orderCount(env, sale.id, 'expired')) === 2 && (await env.redis.get(k.available)) === '4',
    );
  } finally {
    await env.redis.call('DEBUG', 'SET-ACTIVE-EXPIRE', '1');
  }
  const rows = (
    await env.pool.query<{ id: string; status: string; on_time: boolean }>(
      'select id, status, closed_at >= expires_at as on_time from orders where sale_id = $1',
      [sale.id],
    )
  ).rows;
  const byId = new Map(rows.map((r) => [r.id, r]));
  for (const id of [closing, early]) {
    assert.equal(byId.get(id)?.status, 'expired');
    assert.equal(byId.get(id)?.on_time, true, 'closed at or after its deadline by Postgres');
  }
  assert.equal(byId.get(waiting)?.status, 'pending', 'the order due in an hour stays open');
  assert.ok(Number(await env.redis.pttl(k.expiry(waiting))) > 0, 'its key is still set');
  assert.equal(await env.redis.zscore(k.deadlines, closing), null, 'the closed order left the deadlines index');
  assert.notEqual(await env.redis.zscore(k.deadlines, waiting), null);
});
