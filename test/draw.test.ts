// A draw (admission 'draw') against the real API, Redis and Postgres, with the admission loop's
// ticks driven by the test's clock: entries in their window (once per buyer, a pow sale's token
// spent by the entry), the ranks the seed's documented order gives, orders for the first `stock`
// through the writer, backfill through expiry until backfillUntil and then `lost`, told by poll
// and stream; a Redis that lost its copy of the entries, and a step that stops half way, change
// nothing; `flashsale draw verify` agrees, and catches a tampered rank.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, test } from 'node:test';
import { admissionSales, AdmissionLoop } from '../shared/admission/loop.js';
import { DrawLoop } from '../shared/admission/draw/loop.js';
import { insertEntry } from '../shared/admission/draw/queries.js';
import { newSecret, ticketOf } from '../shared/admission/draw/draw.js';
import { awardUnits, endBackfill, makeDraw, reserveUnit } from '../shared/admission/draw/steps.js';
import { closeOrders } from '../shared/orders/close.js';
import { checkInvariants } from '../shared/checks/invariants.js';
import { PURCHASE_TOKEN_HEADER } from '../shared/http/routes/purchase.js';
import { saleKeys } from '../shared/redis/keys.js';
import { getSale, type Sale } from '../shared/sales/sale.js';
import { freePort } from '../tools/local-stack.js';
import { apiEnv, type ApiEnv } from './support/api.js';
import { cli, exited, ready, spawnCli } from './support/cli.js';
import type { TestEnv } from './support/env.js';
import {
  closeEntries as closeEntriesOf,
  endBackfillIn,
  HOUR,
  newSale,
  openDraw,
  redisNow,
  waitFor,
  drainWriter,
} from './support/fixtures.js';
import { http, outcome, sseEvents } from './support/http.js';
import * as pow from './support/pow.js';
import { ADMIN_TOKEN, token } from './support/tokens.js';

let env: TestEnv;
let api: ApiEnv['api'];
apiEnv((s) => ({ env, api } = s), { challengeRatePerBuyer: 0, purchaseRatePerBuyer: 0 });

let shared: AdmissionLoop | undefined;
const loop = () => (shared ??= new AdmissionLoop({ pool: env.pool, redis: env.redis, logger: env.logger }));
/** One tick of the loop at `at`, with the sales re-read first. */
async function tick(at = Date.now()) {
  await loop().refreshSales();
  await loop().tick(at);
}
/** libfaketime: FAKETIME shifts the clock of the process it is preloaded into. */
const FAKETIME_LIB = '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';
const deps = () => ({ pool: env.pool, redis: env.redis, buyCountTtlSeconds: 86_400 });

/** A draw whose entries are open (support/fixtures.ts openDraw). */
const drawSale = (fields: Record<string, unknown> = {}) => newSale(env, { ...openDraw(), ...fields });
const closeEntries = (s: Sale) => closeEntriesOf(env, s);

const enter = (s: Sale | string, user: string, headers: Record<string, string> = {}) =>
  http(api.port, 'POST', `/api/sales/${typeof s === 'string' ? s : s.id}/entries`, { user, headers });
const me = (s: Sale, user: string) => http(api.port, 'GET', `/api/sales/${s.id}/entries/me`, { user });
const record = (s: Sale) => http(api.port, 'GET', `/api/sales/${s.id}/draw`);
const entryRows = async (s: Sale) =>
  (
    await env.pool.query<{
      buyer: string;
      ticket: string;
      secret: string | null;
      status: string;
      draw_rank: number | null;
      order_id: string | null;
    }>(
      'select buyer, ticket, secret, status, draw_rank, order_id from draw_entries where sale_id = $1 order by draw_rank nulls last, buyer',
      [s.id],
    )
  ).rows;
/** Enters each buyer (200 each); their secrets, as the entry answers gave them. */
async function enterAll(s: Sale, buyers: string[]): Promise<Map<string, string>> {
  const secrets = new Map<string, string>();
  for (const b of buyers) {
    const r = await enter(s, b);
    assert.equal(outcome(r), '200');
    secrets.set(b, r.body.secret);
  }
  return secrets;
}
const available = async (s: Sale) => Number(await env.redis.get(saleKeys(s.id).available));
const drain = async (s: Sale) => {
  await drainWriter(env, `w-${s.id}`);
};

/** The documented order, computed here from scratch: tickets sha256(saleId:buyer:secret) (no secret: sha256(saleId:buyer)), sorted by sha256(seed:ticket) hex. */
const sha = (text: string) => createHash('sha256').update(text).digest('hex');
function ranksOf(saleId: string, seed: string, secrets: Map<string, string | null>): Map<string, number> {
  const ticket = (b: string, secret: string | null) =>
    sha(secret === null ? `${saleId}:${b}` : `${saleId}:${b}:${secret}`);
  const keyed = [...secrets]
    .map(([b, secret]) => ({ b, key: sha(`${seed}:${ticket(b, secret)}`) }))
    .sort((x, y) => (x.key < y.key ? -1 : 1));
  return new Map(keyed.map((k, i) => [k.b, i + 1]));
}

/** Events of a buyer's entry stream until it ends. */
const stream = (s: Sale, user: string) =>
  sseEvents(api.port, `/api/sales/${s.id}/entries/events?access_token=${token(user)}`);

describe('entries', () => {
  test('outside the window, on a sale that is no draw, an unknown or malformed sale, without a token: 4xx {error, message}, nothing entered', async () => {
    const plain = await newSale(env);
    const early = await drawSale({
      entriesOpenAt: new Date(Date.now() + HOUR).toISOString(),
      entriesCloseAt: new Date(Date.now() + 2 * HOUR).toISOString(),
    });
    const late = await drawSale({
      startsAt: new Date(Date.now() - 2 * HOUR).toISOString(),
      entriesCloseAt: new Date(Date.now() - HOUR).toISOString(),
    });
    const cases: [Sale | string, string | undefined, string][] = [
      [plain, 'ann', '409 not_a_draw'],
      [early, 'ann', '409 entries_not_open'],
      [late, 'ann', '409 entries_closed'],
      ['no-such-sale', 'ann', '404 sale_not_found'],
      ['bad id!', 'ann', '400 invalid_id'],
      [early, undefined, '401 unauthorized'],
    ];
    for (const [s, user, expected] of cases) {
      const r = await http(
        api.port,
        'POST',
        `/api/sales/${encodeURIComponent(typeof s === 'string' ? s : s.id)}/entries`,
        user === undefined ? {} : { user },
      );
      assert.equal(outcome(r), expected);
      assert.deepEqual(Object.keys(r.body).sort(), ['error', 'message']);
    }
    assert.equal(outcome(await me(early, 'ann')), '404 not_entered');
    assert.equal(outcome(await me(plain, 'ann')), '409 not_a_draw');
    const rows = await env.pool.query('select 1 from draw_entries where sale_id = any($1::text[])', [
      [plain.id, early.id, late.id],
    ]);
    assert.equal(rows.rowCount, 0);
    for (const s of [early, late]) assert.equal(await env.redis.exists(saleKeys(s.id).entries), 0);
  });

  test('entering twice keeps one entry; /entries/me shows it, entered, with its ticket and the secret it is made of', async () => {
    const s = await drawSale();
    const first = await enter(s, 'ann');
    assert.equal(outcome(first), '200');
    const secret = first.body.secret;
    assert.match(secret, /^[0-9a-f]{64}$/);
    assert.deepEqual(first.body, {
      saleId: s.id,
      state: 'entered',
      ticket: sha(`${s.id}:ann:${secret}`),
      secret,
      drawRank: null,
      orderId: null,
      variant: 'default',
      secondChoice: null,
      sku: null,
      entries: 1,
    });
    assert.deepEqual((await enter(s, 'ann')).body, first.body);
    await enter(s, 'bob');
    assert.deepEqual((await me(s, 'ann')).body, { ...first.body, entries: 2 });
    assert.equal((await entryRows(s)).length, 2);
    assert.deepEqual((await env.redis.smembers(saleKeys(s.id).entries)).sort(), ['ann', 'bob']);
  });

  test('a ticket does not tell who entered: the record lists no sha256(saleId:buyer); an entry made before secrets keeps that ticket and verifies', async () => {
    let s = await drawSale({ stock: 1 });
    const secrets = await enterAll(s, ['o1', 'o2']);
    assert.notEqual(secrets.get('o1'), secrets.get('o2'));
    // An entry as it was made before secrets (migration 0012): no secret, the old ticket.
    await env.pool.query('insert into draw_entries (sale_id, buyer, ticket) values ($1, $2, $3)', [
      s.id,
      'o-old',
      sha(`${s.id}:o-old`),
    ]);
    s = await closeEntries(s);
    await tick();
    const pub = await waitFor('the record', async () => ((await record(s)).body.seed ? (await record(s)).body : null));
    assert.equal(pub.tickets.length, 3);
    for (const b of ['o1', 'o2']) {
      assert.ok(!pub.tickets.includes(sha(`${s.id}:${b}`)), `${b} cannot be found from their id`);
      assert.ok(
        pub.tickets.includes(sha(`${s.id}:${b}:${secrets.get(b)}`)),
        `${b} finds their ticket with their secret`,
      );
    }
    assert.ok(
      !JSON.stringify(pub).includes('"o1"') && !JSON.stringify(pub).includes('"o2"'),
      'no buyer id in the record',
    );
    assert.deepEqual(
      new Map((await entryRows(s)).map((r) => [r.buyer, r.draw_rank])),
      ranksOf(s.id, s.seed!, new Map<string, string | null>([...secrets, ['o-old', null]])),
    );
    const verify = await cli(env, ['draw', 'verify', s.id]);
    assert.equal(verify.code, 0, verify.out);
  });

  test('a pow draw needs a purchase token to enter, which the entry spends; the entrant comes back without one', async () => {
    const s = await drawSale({ challenge: 'pow', challengeComplexity: 1000 });
    assert.equal(outcome(await enter(s, 'cat')), '403 purchase_token_required');
    const t = await pow.tokenFor(api.port, s, 'cat');
    assert.equal(outcome(await enter(s, 'dan', { [PURCHASE_TOKEN_HEADER]: t })), '403 invalid_purchase_token');
    assert.equal(outcome(await enter(s, 'cat', { [PURCHASE_TOKEN_HEADER]: t })), '200');
    assert.equal(outcome(await enter(s, 'cat')), '200');
    const t2 = await pow.tokenFor(api.port, s, 'eve');
    assert.equal(outcome(await enter(s, 'eve', { [PURCHASE_TOKEN_HEADER]: t2 })), '200');
    // The entry spent eve's token: its mark is the one a purchase would have left.
    assert.equal(await env.redis.exists(saleKeys(s.id).tokenUsed(pow.tokenId(t2))), 1);
    assert.deepEqual((await entryRows(s)).map((r) => r.buyer).sort(), ['cat', 'eve']);
  });
});

describe("one clock: Postgres's", () => {
  /** Postgres's close is now just past; the API's cached sale still says entries close in an hour. */
  const closeInPostgres = async (s: Sale) => {
    await env.pool.query(
      "update sales set entries_close_at = now() - interval '1 millisecond', backfill_until = now() + interval '1 hour' where id = $1",
      [s.id],
    );
    return (await getSale(env.pool, s.id))!;
  };
  const saleOn = (port: number, s: Sale) => http(port, 'GET', `/api/sales/${s.id}`);

  test("an entry after Postgres's close is refused by the insert itself; the seed is shown only once the draw is made", async () => {
    let s = await drawSale();
    assert.equal(outcome(await enter(s, 'c1')), '200');
    s = await closeInPostgres(s);
    // The insert refuses at once, though the API's cached sale still says an hour to go.
    assert.equal(outcome(await enter(s, 'c2')), '409 entries_closed');
    assert.equal(outcome(await enter(s, 'c1')), '200', 'an entrant still gets their entry back');
    assert.deepEqual(
      (await entryRows(s)).map((r) => r.buyer),
      ['c1'],
    );
    // Entries have closed by every clock, but the draw is not made: no seed, no tickets.
    await waitFor(
      "the API's sale to have the close",
      async () => (await saleOn(api.port, s)).body.entriesCloseAt === s.entriesCloseAt!.toISOString(),
    );
    assert.equal((await saleOn(api.port, s)).body.seed, null);
    const before = (await record(s)).body;
    assert.deepEqual([before.seed, before.drawn, before.tickets], [null, false, []]);
    // A loop whose clock runs an hour fast makes no draw before Postgres's close; at it, the draw is made.
    const early = await drawSale();
    assert.equal(await makeDraw(env.pool, early, Date.now() + 2 * HOUR), 0);
    assert.equal((await getSale(env.pool, early.id))!.drawnAt, null);
    assert.equal(await makeDraw(env.pool, s, Date.now()), 1);
    const pub = await waitFor('the seed published', async () =>
      (await record(s)).body.seed ? (await record(s)).body : null,
    );
    assert.equal(sha(pub.seed), pub.seedSha256);
    assert.equal(pub.seed, s.seed);
    await waitFor("the sale view's seed", async () => (await saleOn(api.port, s)).body.seed === s.seed);
  });

  test("an API whose clock runs 5 s late refuses an entry after Postgres's close and shows no seed before the draw is made", async () => {
    const port = await freePort();
    const late = spawnCli(env, ['api'], { PORT: String(port), FAKETIME: '-5s', LD_PRELOAD: FAKETIME_LIB });
    try {
      await ready(late, 'the late API');
      const enterOn = (s: Sale, user: string) => http(port, 'POST', `/api/sales/${s.id}/entries`, { user });
      let s = await drawSale();
      assert.equal(outcome(await enterOn(s, 'l1')), '200');
      s = await closeInPostgres(s);
      // By its own clock entries close 5 s from now.
      await waitFor(
        "the late API's sale to have the close",
        async () => (await saleOn(port, s)).body.entriesCloseAt === s.entriesCloseAt!.toISOString(),
      );
      assert.equal(outcome(await enterOn(s, 'l2')), '409 entries_closed');
      assert.deepEqual(
        (await entryRows(s)).map((r) => r.buyer),
        ['l1'],
      );
      assert.equal((await saleOn(port, s)).body.seed, null);
      assert.equal((await http(port, 'GET', `/api/sales/${s.id}/draw`)).body.seed, null);
      // Made: the late API shows the seed, though its clock says entries are still open.
      assert.equal(await makeDraw(env.pool, s, Date.now()), 1);
      await waitFor(
        "the late API's record to have the seed",
        async () => (await http(port, 'GET', `/api/sales/${s.id}/draw`)).body.seed === s.seed,
      );
      await waitFor(
        "the late API's sale view to have the seed",
        async () => (await saleOn(port, s)).body.seed === s.seed,
      );
    } finally {
      late.kill('SIGINT');
      await exited(late);
    }
  });
});

describe('ending a draw sale', () => {
  const endNow = (s: Sale) =>
    http(api.port, 'POST', `/api/sales/${s.id}/end`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });

  test('after the draw: entries stop at once (403 ended), every entrant without an order is told lost at once, by poll and stream', async () => {
    let s = await drawSale({ stock: 1 });
    for (const b of ['m1', 'm2', 'm3']) assert.equal(outcome(await enter(s, b)), '200');
    s = await closeEntries(s);
    await tick();
    const [winner, ...rest] = await entryRows(s);
    assert.deepEqual([winner!.status, ...rest.map((r) => r.status)], ['won', 'waiting', 'waiting']);
    const watch = stream(s, rest[0]!.buyer);
    await waitFor("the stream's first event", async () => watch.events.length >= 1);
    assert.equal(watch.events[0].state, 'waiting');
    assert.equal(outcome(await endNow(s)), '200');
    // At once: no tick of the admission loop in between.
    assert.deepEqual(
      (await entryRows(s)).map((r) => r.status),
      ['won', 'lost', 'lost'],
    );
    for (const r of rest) assert.equal((await me(s, r.buyer)).body.state, 'lost');
    await watch.ended;
    assert.equal(watch.events.at(-1).state, 'lost');
    assert.equal((await me(s, winner!.buyer)).body.state, 'won', 'the winner keeps the order');
    const late = await enter(s, 'm4');
    assert.equal(outcome(late), '403 ended');
    assert.deepEqual(Object.keys(late.body).sort(), ['error', 'message']);
    assert.equal((await entryRows(s)).length, 3);
    const verify = await cli(env, ['draw', 'verify', s.id]);
    assert.equal(verify.code, 0, verify.out);
  });

  test('before the draw: the draw is made at the end, entries stop (403 ended) and every entrant has lost at once', async () => {
    const s = await drawSale({ stock: 1 });
    const secrets = await enterAll(s, ['n1', 'n2']);
    const watch = stream(s, 'n1');
    await waitFor("the stream's first event", async () => watch.events.length >= 1);
    assert.equal(watch.events[0].state, 'entered');
    assert.equal(outcome(await endNow(s)), '200');
    const late = await enter(s, 'n3');
    assert.equal(outcome(late), '403 ended');
    assert.deepEqual(Object.keys(late.body).sort(), ['error', 'message']);
    assert.deepEqual(
      (await entryRows(s)).map((r) => [r.buyer, r.draw_rank, r.status]),
      [...ranksOf(s.id, s.seed!, secrets)].sort((a, b) => a[1] - b[1]).map(([b, r]) => [b, r, 'lost']),
    );
    await watch.ended;
    assert.equal(watch.events.at(-1).state, 'lost');
    assert.equal((await me(s, 'n2')).body.state, 'lost');
    // No order was made; the draw is over, its seed public, and it verifies.
    assert.equal((await env.pool.query('select 1 from orders where sale_id = $1', [s.id])).rowCount, 0);
    await waitFor('the seed published', async () => (await record(s)).body.seed === s.seed);
    const verify = await cli(env, ['draw', 'verify', s.id]);
    assert.equal(verify.code, 0, verify.out);
    assert.match(verify.stdout, /2 entries .* 0 winners/);
  });
});

describe('the draw', () => {
  test("ranks follow the seed's documented order; the first `stock` get pending orders through the writer, payable; purchases are refused", async () => {
    let s = await drawSale({ stock: 3 });
    const buyers = Array.from({ length: 12 }, (_, i) => `d${i}`);
    const secrets = await enterAll(s, buyers);
    assert.equal((await record(s)).body.seed, null);
    assert.equal(
      outcome(await http(api.port, 'POST', `/api/sales/${s.id}/purchases`, { user: 'd0', body: { qty: 1 } })),
      '403 draw_sale',
    );
    // The stream of the entrant the seed will rank first: entered now, won once the draw is made.
    const expected = ranksOf(s.id, s.seed!, secrets);
    const firstBuyer = buyers.find((b) => expected.get(b) === 1)!;
    const watch = stream(s, firstBuyer);
    await waitFor('the first event', async () => watch.events.length >= 1);
    assert.equal(watch.events[0].state, 'entered');
    s = await closeEntries(s);
    await tick();
    await watch.ended;
    assert.deepEqual([watch.events.at(-1).state, watch.events.at(-1).drawRank], ['won', 1]);
    const rows = await entryRows(s);
    assert.deepEqual(new Map(rows.map((r) => [r.buyer, r.draw_rank])), expected);
    assert.deepEqual(
      rows.map((r) => r.status),
      [...Array(3).fill('won'), ...Array(9).fill('waiting')],
    );
    assert.equal(await available(s), 0);
    const first = rows[0]!;
    const mine = (await me(s, first.buyer)).body;
    assert.deepEqual(mine, {
      saleId: s.id,
      state: 'won',
      ticket: first.ticket,
      secret: secrets.get(first.buyer),
      drawRank: 1,
      orderId: first.order_id,
      variant: 'default',
      secondChoice: null,
      sku: 'default',
      entries: 12,
    });
    assert.deepEqual((await me(s, rows[5]!.buyer)).body.state, 'waiting');
    // The public record: the seed, every ticket sorted, the winners in draw order.
    const pub = await waitFor('the seed revealed', async () =>
      (await record(s)).body.seed ? (await record(s)).body : null,
    );
    assert.equal(sha(pub.seed), pub.seedSha256);
    assert.deepEqual(pub.tickets, rows.map((r) => r.ticket).sort());
    // What the draw committed to: every ticket, in draw order.
    assert.deepEqual([pub.drawnEntries, pub.drawnEntriesSha256], [12, sha(rows.map((r) => r.ticket).join(':'))]);
    assert.deepEqual(
      pub.winners,
      rows.slice(0, 3).map((r) => ({ ticket: r.ticket, drawRank: r.draw_rank, orderId: r.order_id, sku: 'default' })),
    );
    assert.deepEqual(pub.stock, [{ sku: 'default', units: 3 }]);
    assert.deepEqual(
      pub.choices,
      pub.tickets.map((ticket: string) => ({ ticket, variant: 'default', secondChoice: null })),
    );
    assert.equal(pub.drawn, true);
    // The writer makes the orders; a winner pays theirs as any order.
    await drain(s);
    const order = await http(api.port, 'GET', `/api/orders/${first.order_id}`, { user: first.buyer });
    assert.equal(order.body.status, 'pending_payment');
    assert.equal(
      outcome(await http(api.port, 'POST', `/api/orders/${first.order_id}/pay`, { user: first.buyer })),
      '200 paid',
    );
    assert.equal(
      (await env.pool.query('select status from orders where id = $1', [first.order_id])).rows[0].status,
      'paid',
    );
    assert.equal(
      outcome(await http(api.port, 'POST', `/api/sales/${s.id}/purchases`, { user: rows[5]!.buyer, body: { qty: 1 } })),
      '403 draw_sale',
    );
    assert.equal(outcome(await enter(s, 'late-comer')), '409 entries_closed');
  });

  test("backfill through expiry: an expired winner's unit goes to the next rank; at backfillUntil the rest have lost, told by poll and stream", async () => {
    let s = await drawSale({ stock: 2, paymentWindowSeconds: 60 });
    for (const b of ['e1', 'e2', 'e3', 'e4', 'e5']) await enter(s, b);
    s = await closeEntries(s);
    await tick();
    await drain(s);
    const [r1, , r3, r4, r5] = await entryRows(s);
    const third = stream(s, r3!.buyer);
    const streams = [stream(s, r4!.buyer), stream(s, r5!.buyer)];
    await waitFor("the streams' first events", async () => [third, ...streams].every((st) => st.events.length >= 1));
    assert.deepEqual(
      [third, ...streams].map((st) => st.events[0].state),
      ['waiting', 'waiting', 'waiting'],
    );
    // Rank 1 does not pay: the order expires and its unit comes back.
    await env.pool.query('update orders set expires_at = now() where id = $1', [r1!.order_id]);
    await closeOrders(env.pool, env.redis, [r1!.order_id!], 'replay');
    assert.equal(await available(s), 1);
    await tick();
    // Rank 3's stream tells it at once, with the order; the poll says the same.
    await third.ended;
    const won = (await me(s, r3!.buyer)).body;
    assert.deepEqual(third.events.at(-1), won);
    assert.equal(won.state, 'won');
    await drain(s);
    assert.equal(
      (await http(api.port, 'GET', `/api/orders/${won.orderId}`, { user: r3!.buyer })).body.status,
      'pending_payment',
    );
    assert.equal((await me(s, r1!.buyer)).body.state, 'won', 'rank 1 keeps its (expired) order');
    assert.equal(await available(s), 0);
    // Backfill over (by Postgres's clock, which judges it): ranks 4 and 5 have lost.
    s = await endBackfillIn(env, s);
    await tick();
    await Promise.all(streams.map((st) => st.ended));
    assert.deepEqual(
      streams.map((st) => st.events.at(-1).state),
      ['lost', 'lost'],
    );
    assert.deepEqual([(await me(s, r4!.buyer)).body.state, (await me(s, r5!.buyer)).body.state], ['lost', 'lost']);
    // A unit that comes back now stays unsold.
    const r2 = (await entryRows(s))[1]!;
    await env.pool.query('update orders set expires_at = now() where id = $1', [r2.order_id]);
    await closeOrders(env.pool, env.redis, [r2.order_id!], 'replay');
    await tick();
    assert.deepEqual(
      (await entryRows(s)).map((r) => r.status),
      ['won', 'won', 'won', 'lost', 'lost'],
    );
    assert.equal(await available(s), 1);
    const verify = await cli(env, ['draw', 'verify', s.id]);
    assert.equal(verify.code, 0, verify.out);
    assert.match(verify.stdout, /verified: .* 5 entries .* 3 winners/);
    // Units, orders and restores add up as for any sale.
    assert.deepEqual(
      (await checkInvariants(env.pool, env.redis, { saleIds: [s.id], replayIntervalMs: 3_600_000 })).violations,
      [],
    );
  });

  test('a Redis that lost its copy of the entries changes nothing: the draw reads Postgres', async () => {
    let s = await drawSale({ stock: 4 });
    const buyers = Array.from({ length: 30 }, (_, i) => `f${i}`);
    const secrets = await enterAll(s, buyers);
    await env.redis.del(saleKeys(s.id).entries);
    s = await closeEntries(s);
    await tick();
    const rows = await entryRows(s);
    assert.deepEqual(new Map(rows.map((r) => [r.buyer, r.draw_rank])), ranksOf(s.id, s.seed!, secrets));
    assert.equal(rows.filter((r) => r.status === 'won').length, 4);
    assert.equal((await me(s, 'f0')).body.entries, 30);
  });

  test('a step stopped half way never awards a rank twice: a unit reserved but not recorded is recorded, not reserved again', async () => {
    let s = await drawSale({ stock: 3 });
    for (const b of ['g1', 'g2', 'g3', 'g4', 'g5']) await enter(s, b);
    s = await closeEntries(s);
    const now = Date.now();
    assert.equal(await makeDraw(env.pool, s, now), 5);
    assert.equal(await makeDraw(env.pool, s, now), 0, 'a second draw changes nothing');
    // An entry that reaches Postgres after the draw (an API whose clock runs late) is refused, not left unranked.
    assert.equal(
      await insertEntry(env.pool, s.id, 'g-late', ticketOf(s.id, 'g-late', null), newSecret()),
      'entries_closed',
    );
    const ranked = await entryRows(s);
    // The award of rank 1 reached Redis, then the process died before Postgres heard of it.
    assert.equal(await reserveUnit(deps(), s, 1, ranked[0]!.buyer), 1);
    assert.equal(await available(s), 2);
    assert.equal((await entryRows(s))[0]!.status, 'waiting');
    // The retry: the same order id, so the same reservation.
    assert.equal(await reserveUnit(deps(), s, 1, ranked[0]!.buyer), 1);
    assert.equal(await available(s), 2);
    assert.equal(await awardUnits(deps(), s, now, true), 2);
    const rows = await entryRows(s);
    assert.deepEqual(
      rows.map((r) => r.status),
      ['won', 'won', 'won', 'waiting', 'waiting'],
    );
    assert.equal(await available(s), 0);
    assert.equal(await env.redis.llen(saleKeys(s.id).winners), 3);
    assert.equal(new Set(rows.slice(0, 3).map((r) => r.order_id)).size, 3);
    // A unit back, reserved for rank 4 and not recorded, then backfill ends: rank 4 won, rank 5 lost.
    await env.redis.incr(saleKeys(s.id).available);
    assert.equal(await reserveUnit(deps(), s, 4, rows[3]!.buyer), 1);
    assert.equal(
      await endBackfill(deps(), s, s.backfillUntil!.getTime()),
      0,
      "not before backfillUntil by Postgres's clock",
    );
    s = await endBackfillIn(env, s);
    assert.equal(await endBackfill(deps(), s, s.backfillUntil!.getTime()), 1);
    assert.deepEqual(
      (await entryRows(s)).map((r) => r.status),
      ['won', 'won', 'won', 'won', 'lost'],
    );
    assert.equal(await env.redis.llen(saleKeys(s.id).winners), 4);
  });

  test('loop cost: a quiet drawn sale costs no Postgres query per tick; a draw over for a minute is no longer read', async () => {
    let s = await drawSale({ stock: 1 });
    for (const b of ['k1', 'k2']) await enter(s, b);
    s = await closeEntries(s);
    // A loop whose every Postgres query is counted (the pool itself is the real one).
    let queries = 0;
    const pool = new Proxy(env.pool, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver);
        if (prop === 'query' || prop === 'connect') {
          return (...args: unknown[]) => {
            queries++;
            return (v as (...a: unknown[]) => unknown).apply(target, args);
          };
        }
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    const draws = new DrawLoop({ pool, redis: env.redis, logger: env.logger, buyCountTtlSeconds: 86_400 });
    const t0 = Date.now();
    assert.equal((await draws.tick(s, t0))?.through, 1);
    assert.ok(queries > 0);
    const before = queries;
    for (let i = 1; i <= 20; i++) await draws.tick(s, t0 + i * 100);
    assert.equal(queries, before, 'twenty quiet ticks, no query');
    // Over: then nothing at all, and a minute on the sale is no longer among the loop's sales.
    s = await endBackfillIn(env, s);
    assert.equal((await draws.tick(s, Date.now()))?.over, true);
    const over = queries;
    for (let i = 1; i <= 20; i++) await draws.tick(s, s.backfillUntil!.getTime() + i * 100);
    assert.equal(queries, over);
    assert.ok((await admissionSales(env.pool)).some((x) => x.id === s.id));
    await env.pool.query("update sales set draw_over_at = now() - interval '2 minutes' where id = $1", [s.id]);
    assert.ok(!(await admissionSales(env.pool)).some((x) => x.id === s.id));
  });

  test("a draw blocked in Postgres holds up neither a waiting room's passes nor the loop's next tick; the draw is made once the block lifts", async () => {
    let s = await drawSale({ stock: 1 });
    for (const b of ['j1', 'j2']) assert.equal((await enter(s, b)).status, 200);
    s = await closeEntries(s);
    // Started a second ago by Redis's clock: its first step has the passes for both.
    const room = await newSale(env, {
      stock: 2,
      admission: 'queue',
      admitRatePerSecond: 1000,
      admitOverbook: 1,
      passSeconds: 60,
      startsAt: new Date((await redisNow(env.redis)) - 1000).toISOString(),
    });
    for (const b of ['r1', 'r2'])
      assert.equal((await http(api.port, 'POST', `/api/sales/${room.id}/queue`, { user: b })).status, 200);
    // Another transaction holds the draw's sale row: its step waits for the lock.
    const blocker = await env.pool.connect();
    try {
      await blocker.query('begin');
      await blocker.query('select 1 from sales where id = $1 for update', [s.id]);
      await loop().refreshSales();
      // As the loop's own run ticks: not waiting for the draws (whose clock is a second on).
      const at = Date.now() + 1000;
      await loop().tick(at, false);
      assert.equal(
        await env.redis.hget(saleKeys(room.id).room, 'admitted'),
        '2',
        'the room admitted while the draw waits',
      );
      assert.deepEqual(
        (await entryRows(s)).map((r) => r.draw_rank),
        [null, null],
        'the draw is still blocked',
      );
      await loop().tick(at + 100, false);
    } finally {
      await blocker.query('commit');
      blocker.release();
    }
    // The draw (ranks, all waiting) and then its award (one won) are two transactions of the pass.
    await waitFor('the draw and its award, once the lock is free', async () =>
      (await entryRows(s)).some((r) => r.status === 'won'),
    );
    const rows = await entryRows(s);
    assert.deepEqual(
      rows.map((r) => [r.draw_rank, r.status]),
      [
        [1, 'won'],
        [2, 'waiting'],
      ],
    );
  });

  test('draw verify: OK on a fair draw; a tampered rank is a mismatch, exit 3', async () => {
    let s = await drawSale({ stock: 2 });
    for (const b of ['h1', 'h2', 'h3', 'h4']) await enter(s, b);
    s = await closeEntries(s);
    await tick();
    const ok = await cli(env, ['draw', 'verify', s.id]);
    assert.equal(ok.code, 0, ok.out);
    assert.match(ok.stdout, new RegExp(`draw ${s.id} verified`));
    // Swap ranks 3 and 4 (both waiting): the seed's order says otherwise.
    for (const [from, to] of [
      [3, -3],
      [4, 3],
      [-3, 4],
    ]) {
      await env.pool.query('update draw_entries set draw_rank = $3 where sale_id = $1 and draw_rank = $2', [
        s.id,
        from,
        to,
      ]);
    }
    const bad = await cli(env, ['draw', 'verify', s.id]);
    assert.equal(bad.code, 3, bad.out);
    assert.match(bad.stdout, /MISMATCH: ticket [0-9a-f]{64} has drawRank [34], the seed's order gives [34]/);
    assert.equal((await cli(env, ['draw', 'verify', 'no-such-sale'])).code, 2);
  });

  test('draw verify proves the record: an entry dated at the close, a loser deleted from the end, an order of another qty or buyer, a lost commitment: each a mismatch, exit 3', async () => {
    let s = await drawSale({ stock: 2 });
    await enterAll(s, ['v1', 'v2', 'v3', 'v4', 'v5']);
    s = await closeEntries(s);
    await tick();
    await drain(s);
    const verify = () => cli(env, ['draw', 'verify', s.id]);
    const ok = await verify();
    assert.equal(ok.code, 0, ok.out);
    assert.match(ok.stdout, /5 entries \(as committed when drawn\), all before the close/);
    const [first, , , , last] = await env.pool
      .query<{ buyer: string; ticket: string; secret: string; status: string; draw_rank: number; entered_at: Date }>(
        'select buyer, ticket, secret, status, draw_rank, entered_at from draw_entries where sale_id = $1 order by draw_rank',
        [s.id],
      )
      .then((r) => r.rows);
    /** Tampers, expects verify to fail with `why`, and puts the rows back as they were. */
    const tampered = async (why: RegExp, tamper: [string, unknown[]], undo: [string, unknown[]]) => {
      await env.pool.query(...tamper);
      const bad = await verify();
      await env.pool.query(...undo);
      assert.equal(bad.code, 3, bad.out);
      assert.match(bad.stdout, why);
    };
    const lastRow = [s.id, last!.buyer, last!.ticket, last!.secret, last!.status, last!.draw_rank, last!.entered_at];
    const putBack =
      'insert into draw_entries (sale_id, buyer, ticket, secret, status, draw_rank, entered_at) values ($1, $2, $3, $4, $5, $6, $7)';
    await tampered(
      /MISMATCH: ticket [0-9a-f]{64} was entered at .+, at or after the close /,
      [
        'update draw_entries d set entered_at = s.entries_close_at from sales s where s.id = $1 and d.sale_id = $1 and d.buyer = $2',
        [s.id, last!.buyer],
      ],
      [
        'update draw_entries set entered_at = $3 where sale_id = $1 and buyer = $2',
        [s.id, last!.buyer, last!.entered_at],
      ],
    );
    await tampered(
      /MISMATCH: the draw ranked 5 entries, 4 are recorded now/,
      ['delete from draw_entries where sale_id = $1 and buyer = $2', [s.id, last!.buyer]],
      [putBack, lastRow],
    );
    // Dropping the loser and the count with it: the committed digest still says otherwise.
    await tampered(
      /MISMATCH: the entries recorded now hash to [0-9a-f]{64}, not to the [0-9a-f]{64} committed when the draw was made/,
      [
        'with d as (delete from draw_entries where sale_id = $1 and buyer = $2) update sales set drawn_entries = 4 where id = $1',
        [s.id, last!.buyer],
      ],
      [`with i as (${putBack}) update sales set drawn_entries = 5 where id = $1`, lastRow],
    );
    const order = (
      await env.pool.query<{ id: string }>(
        'select order_id as id from draw_entries where sale_id = $1 and buyer = $2',
        [s.id, first!.buyer],
      )
    ).rows[0]!.id;
    await tampered(
      /MISMATCH: order .+ is for 2 units, the draw gives 1/,
      ['update orders set qty = 2 where id = $1', [order]],
      ['update orders set qty = 1 where id = $1', [order]],
    );
    await tampered(
      new RegExp(`MISMATCH: order .+ belongs to "mallory", the draw gave it to "${first!.buyer}"`),
      ["update orders set user_id = 'mallory' where id = $1", [order]],
      ['update orders set user_id = $2 where id = $1', [order, first!.buyer]],
    );
    const [committed] = (
      await env.pool.query('select drawn_entries, drawn_entries_sha256 from sales where id = $1', [s.id])
    ).rows;
    await tampered(
      /MISMATCH: the draw's commitment to its entries \(drawn_entries, drawn_entries_sha256\) is missing/,
      ['update sales set drawn_entries = null, drawn_entries_sha256 = null where id = $1', [s.id]],
      [
        'update sales set drawn_entries = $2, drawn_entries_sha256 = $3 where id = $1',
        [s.id, committed.drawn_entries, committed.drawn_entries_sha256],
      ],
    );
    // Every row back as it was: the record verifies again.
    assert.equal((await verify()).code, 0);
  });
});
