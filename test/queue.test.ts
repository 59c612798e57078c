// The waiting room (admission 'queue') against the real API, Redis and Postgres, with the
// admission loop's ticks driven by the test, which places each sale's start and the room's bucket
// against Redis's TIME (admit.lua's clock) and backdates passes: the pre-queue is shuffled by the seed and
// then joined by later arrivals in order, passes go out at the rate and within the units left
// times the overbook, a purchase needs a live pass of the buyer's and a pass buys once, expired
// passes go back to the budget, admission stops at sold out and resumes when a unit comes back.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, test } from 'node:test';
import { AdmissionLoop, LEASE_MS } from '../shared/admission/loop.js';
import { PURCHASE_TOKEN_HEADER } from '../shared/http/routes/purchase.js';
import { ADMISSION_LEASE, saleKeys } from '../shared/redis/keys.js';
import { metrics } from '../shared/runtime/metrics.js';
import { Phase } from '../shared/admission/room/room.js';
import { getSale, type Sale } from '../shared/sales/sale.js';
import { apiEnv, type ApiEnv } from './support/api.js';
import type { TestEnv } from './support/env.js';
import { newSale, redisNow, refillRoom, startedAgo, waitFor } from './support/fixtures.js';
import { http, outcome, sseEvents } from './support/http.js';
import * as pow from './support/pow.js';
import { token } from './support/tokens.js';

let env: TestEnv;
let api: ApiEnv['api'];
apiEnv((s) => ({ env, api } = s), { challengeRatePerBuyer: 0, purchaseRatePerBuyer: 0 });

const newLoop = () => new AdmissionLoop({ pool: env.pool, redis: env.redis, logger: env.logger });
// One loop for the file (it holds the lease); the lease's own test takes it over on purpose.
let shared: AdmissionLoop | undefined;
const loop = () => (shared ??= newLoop());
/** One tick of the file's loop, with the sales re-read first; the tick of sale `s`, if it published one. */
async function step(s: Sale, l = loop()) {
  await l.refreshSales();
  return (await l.tick()).find((t) => t.saleId === s.id) ?? null;
}
const join = (s: Sale, user: string, headers: Record<string, string> = {}) =>
  http(api.port, 'POST', `/api/sales/${s.id}/queue`, { user, headers });
const me = (s: Sale, user: string) => http(api.port, 'GET', `/api/sales/${s.id}/queue/me`, { user });
const buy = (s: Sale, user: string, pass?: string) =>
  http(api.port, 'POST', `/api/sales/${s.id}/purchases`, {
    user,
    body: { qty: 1 },
    headers: pass === undefined ? {} : { [PURCHASE_TOKEN_HEADER]: pass },
  });
const iso = (ms: number) => new Date(ms).toISOString();
/** A room started a second ago by Redis's clock (its first step has a second's worth of passes), unless `fields` say otherwise. */
const queueSale = async (fields: Record<string, unknown> = {}) =>
  newSale(env, {
    admission: 'queue',
    admitRatePerSecond: 1000,
    admitOverbook: 1,
    passSeconds: 60,
    startsAt: iso((await redisNow(env.redis)) - 1000),
    ...fields,
  });
/** Starting in an hour by Redis's clock. */
const later = async () => ({ startsAt: iso((await redisNow(env.redis)) + 3_600_000) });

/** The buyer's pass, once /queue/me says admitted. */
async function passOf(s: Sale, user: string): Promise<string> {
  const r = await me(s, user);
  assert.equal(r.body.state, 'admitted', `${user}: ${JSON.stringify(r.body)}`);
  return r.body.pass as string;
}

/** Everyone in the room in the order they are admitted. */
const line = (s: Sale) => env.redis.zrange(saleKeys(s.id).queue, '0', '-1');

/** Admitted buyers in the order admit.lua admitted them (the queue's first `admitted` places). */
async function admittedInOrder(s: Sale): Promise<string[]> {
  const k = saleKeys(s.id);
  const admitted = Number((await env.redis.hget(k.room, 'admitted')) ?? 0);
  return admitted === 0 ? [] : env.redis.zrange(k.queue, '0', String(admitted - 1));
}

describe('joining', () => {
  test('a sale without a room answers 409 no_waiting_room; a buyer who never joined gets 404 not_in_queue; joining twice keeps the place', async () => {
    const plain = await newSale(env);
    assert.equal(outcome(await join(plain, 'ann')), '409 no_waiting_room');
    const s = await queueSale();
    assert.equal(outcome(await me(s, 'ann')), '404 not_in_queue');
    const first = await join(s, 'ann');
    assert.equal(outcome(first), '200');
    assert.equal(first.body.state, 'waiting');
    await join(s, 'bob');
    const again = await join(s, 'ann');
    assert.equal(again.body.state, 'waiting');
    assert.equal(await env.redis.zcard(saleKeys(s.id).queue), 2);
    assert.equal(outcome(await http(api.port, 'POST', `/api/sales/${s.id}/queue`, {})), '401 unauthorized');
  });

  test("a pow sale's room needs a purchase token to join, before the start too, and the token joins once", async () => {
    const s = await queueSale({ challenge: 'pow', challengeComplexity: 1000, ...(await later()) });
    assert.equal(outcome(await join(s, 'cat')), '403 purchase_token_required');
    const t = await pow.tokenFor(api.port, s, 'cat');
    assert.equal(outcome(await join(s, 'cat', { [PURCHASE_TOKEN_HEADER]: t })), '200');
    // The same buyer again: their place, without a token; another buyer cannot use it.
    assert.equal(outcome(await join(s, 'cat')), '200');
    assert.equal(outcome(await join(s, 'dan', { [PURCHASE_TOKEN_HEADER]: t })), '403 invalid_purchase_token');
    assert.equal(await env.redis.zcard(saleKeys(s.id).queue), 1);
  });
});

describe('admission', () => {
  test("the pre-queue is admitted in the seed's shuffle, then later joiners in arrival order", async () => {
    const s = await queueSale({ stock: 100, ...(await later()) });
    const early = Array.from({ length: 30 }, (_, i) => `early-${i}`);
    for (const u of early) assert.equal(outcome(await join(s, u)), '200');
    assert.equal((await me(s, 'early-0')).body.position, null, 'no place before the start');
    await startedAgo(env, s, 1000);
    assert.equal((await step(s))!.phase, Phase.Open);
    const late = Array.from({ length: 10 }, (_, i) => `late-${i}`);
    for (const u of late) await join(s, u);
    await refillRoom(env, s, 1000);
    await step(s);
    const { seed } = (await getSale(env.pool, s.id))!;
    // An independent computation of the documented order: sha1(seed:buyer), first 52 bits.
    const shuffled = [...early].sort((a, b) => place(seed!, a) - place(seed!, b));
    assert.notDeepEqual(shuffled, early);
    assert.deepEqual(await admittedInOrder(s), [...shuffled, ...late]);
  });

  test("the pre-queue's seed is never shown before the room opens; once open it is public and redoes the admitted order", async () => {
    const s = await queueSale({ stock: 100, ...(await later()) });
    const early = Array.from({ length: 20 }, (_, i) => `seeded-${i}`);
    for (const u of early) assert.equal((await join(s, u)).body.seed, null);
    const view = () => http(api.port, 'GET', `/api/sales/${s.id}`);
    assert.equal((await me(s, 'seeded-0')).body.seed, null);
    assert.equal((await view()).body.seed, null);
    // A tick before the start leaves the room shut, and the seed secret.
    assert.equal((await step(s))!.phase, Phase.NotStarted);
    assert.deepEqual([(await me(s, 'seeded-0')).body.seed, (await view()).body.seed], [null, null]);
    // The room opens at the start (by Redis's clock): the places are final, and the seed is public.
    await startedAgo(env, s, 1000);
    assert.equal((await step(s))!.phase, Phase.Open);
    const pub = (await view()).body;
    assert.match(pub.seed, /^[0-9a-f]{64}$/);
    assert.equal(createHash('sha256').update(pub.seed).digest('hex'), pub.seedSha256);
    assert.equal((await me(s, 'seeded-3')).body.seed, pub.seed);
    assert.equal((await join(s, 'after-open')).body.seed, pub.seed);
    // What an outsider does with it: sha1(seed:buyer) orders the pre-queue, and that is who is admitted first.
    await refillRoom(env, s, 1000);
    await step(s);
    const redone = [...early].sort((a, b) => place(pub.seed, a) - place(pub.seed, b));
    assert.deepEqual((await admittedInOrder(s)).slice(0, early.length), redone);
  });

  test('passes go out at the rate, never past the units left times the overbook; an expired pass frees its slot', async () => {
    const s = await queueSale({ stock: 5, admitRatePerSecond: 4, admitOverbook: 1.5, passSeconds: 10 });
    for (let i = 0; i < 20; i++) await join(s, `u${i}`);
    const k = saleKeys(s.id);
    const admitted = async () => Number(await env.redis.hget(k.room, 'admitted'));
    // Started a second ago: the bucket fills from the start, a second's worth (4), capped at one second's burst.
    await step(s);
    assert.equal(await admitted(), 4);
    // A quarter of a second's refill is one pass. The time until the step adds to it, bounded by
    // Redis's clock read before the refill and after the step (one more only if that took 250 ms).
    const from = (await redisNow(env.redis)) - 250;
    await refillRoom(env, s, 250);
    await step(s);
    const most = Math.floor((((await redisNow(env.redis)) - from) * 4) / 1000);
    const got = (await admitted()) - 4;
    assert.ok(
      got >= 1 && got <= most,
      `a quarter second's refill admitted ${got} (1, or at most ${most} by Redis's clock)`,
    );
    // floor(5 x 1.5) = 7 outstanding at most, however much time passes.
    for (let i = 0; i < 3; i++) {
      await refillRoom(env, s, 1000);
      await step(s);
    }
    assert.equal(await admitted(), 7);
    assert.equal(await env.redis.zcount(k.passes, '(0', '+inf'), 7);
    // The seven passes were handed out their lifetime ago (each expiry goes back 10 s): they have
    // expired unused; seven more go out (the bucket's 4, then 3), the first seven are told expired.
    for (const [buyer, until] of pairs(await env.redis.zrange(k.passes, '(0', '+inf', 'BYSCORE', 'WITHSCORES'))) {
      await env.redis.zadd(k.passes, Number(until) - 10_000, buyer);
    }
    for (let i = 0; i < 2; i++) {
      await refillRoom(env, s, 1000);
      await step(s);
    }
    assert.equal(await admitted(), 14);
    assert.equal(Number(await env.redis.hget(saleKeys(s.id).room, 'expired')), 7);
    assert.equal((await me(s, (await admittedInOrder(s))[0]!)).body.state, 'expired');
    assert.equal((await me(s, (await admittedInOrder(s))[13]!)).body.state, 'admitted');
  });

  test("a purchase needs a live pass of the buyer's own; a pass buys once", async () => {
    const s = await queueSale({ stock: 10, perUserLimit: 2 });
    await join(s, 'eve');
    await join(s, 'fay');
    assert.equal(outcome(await buy(s, 'eve')), '403 admission_pass_required');
    // Both admitted at once (the rate allows it): the order between them does not matter here.
    await step(s);
    const pass = await passOf(s, 'eve');
    assert.equal(outcome(await buy(s, 'fay', pass)), '403 admission_pass_invalid');
    const token = await pow.tokenFor(
      api.port,
      await newSale(env, { challenge: 'pow', challengeComplexity: 1000 }),
      'eve',
    );
    assert.equal(outcome(await buy(s, 'eve', token)), '403 invalid_purchase_token');
    const bought = await Promise.all(Array.from({ length: 5 }, () => buy(s, 'eve', pass)));
    assert.deepEqual(bought.map(outcome).sort(), ['202 queued', ...Array(4).fill('403 admission_pass_invalid')]);
    assert.equal((await me(s, 'eve')).body.state, 'used');
    assert.equal(await env.redis.get(saleKeys(s.id).available), '9');
    // An expired pass is refused by the API's check; Redis would refuse it too.
    const k = saleKeys(s.id);
    const past = (await redisNow(env.redis)) - 1;
    await env.redis.zadd(k.passes, past, 'fay');
    assert.equal(outcome(await buy(s, 'fay', await passFor(s, 'fay', past))), '403 admission_pass_invalid');
  });

  test('admission stops at sold out (waiting buyers are told so) and resumes from the head when a unit comes back', async () => {
    const s = await queueSale({ stock: 2 });
    for (const u of ['a1', 'a2', 'a3', 'a4']) await join(s, u);
    // Joined before the room opened: their order is the seed's shuffle.
    const [a1, a2, a3, a4] = await line(s);
    await step(s);
    for (const u of [a1!, a2!]) assert.equal(outcome(await buy(s, u, await passOf(s, u))), '202 queued');
    await refillRoom(env, s, 1000);
    assert.equal((await step(s))!.phase, Phase.SoldOut);
    assert.equal((await me(s, a3!)).body.state, 'sold_out');
    assert.equal(Number(await env.redis.hget(saleKeys(s.id).room, 'admitted')), 2);
    // A unit comes back (as a cancel or an expiry gives it): the next in line, a3, is admitted, a4 waits.
    await env.redis.incr(saleKeys(s.id).available);
    await refillRoom(env, s, 1000);
    await step(s);
    assert.equal((await me(s, a3!)).body.state, 'admitted');
    const last = await me(s, a4!);
    assert.deepEqual([last.body.state, last.body.position], ['waiting', 1]);
  });

  test('a sale of three variants: a variant sold out leaves admission going to the others; it stops once all three are out', async () => {
    const s = await queueSale({
      admitRatePerSecond: 1,
      variants: ['S', 'M', 'L'].map((sku) => ({ sku, label: sku, stock: 1 })),
    });
    for (const u of ['v1', 'v2', 'v3', 'v4']) await join(s, u);
    const order = await line(s);
    const buyOf = (user: string, variant: string, pass: string) =>
      http(api.port, 'POST', `/api/sales/${s.id}/purchases`, {
        user,
        body: { qty: 1, variant },
        headers: { [PURCHASE_TOKEN_HEADER]: pass },
      });
    const admitted = async () => Number(await env.redis.hget(saleKeys(s.id).room, 'admitted'));
    // One pass a second: each step admits the next in line while any variant has a unit.
    for (const [i, sku] of ['S', 'M', 'L'].entries()) {
      if (i > 0) await refillRoom(env, s, 1000);
      assert.equal((await step(s))!.phase, Phase.Open, `before ${sku}`);
      assert.equal(await admitted(), i + 1);
      const u = order[i]!;
      const pass = await passOf(s, u);
      if (i > 0) {
        // S is sold out, the pass is not spent by the refusal: the buyer takes another size with it.
        const refused = await buyOf(u, 'S', pass);
        assert.equal(outcome(refused), '409 sold_out');
      }
      assert.equal(outcome(await buyOf(u, sku, pass)), '202 queued', `${u} buys ${sku}`);
    }
    // Every variant is out: the room stops, and the next in line is told so.
    await refillRoom(env, s, 1000);
    assert.equal((await step(s))!.phase, Phase.SoldOut);
    assert.equal(await admitted(), 3);
    assert.equal((await me(s, order[3]!)).body.state, 'sold_out');
  });

  test('one loop leads: a second one steps only once the first has stopped renewing its lease', async () => {
    const s = await queueSale({ stock: 10, admitRatePerSecond: 10 });
    for (const u of ['b1', 'b2', 'b3']) await join(s, u);
    await env.redis.del(ADMISSION_LEASE);
    const [a, b] = [newLoop(), newLoop()];
    shared = b;
    assert.notEqual(await step(s, a), null);
    assert.equal(await step(s, b), null);
    assert.equal(b.leader, false);
    // a is gone (no more ticks): after the lease runs out, b takes over where a left off.
    await new Promise((r) => setTimeout(r, LEASE_MS + 100));
    assert.notEqual(await step(s, b), null);
    assert.equal(b.leader, true);
    assert.deepEqual(await admittedInOrder(s), await line(s));
  });
});

describe('the stream', () => {
  test("a waiting buyer's stream shows the place, then the pass when admitted, and ends; the pass buys", async () => {
    const s = await queueSale({ stock: 5, admitRatePerSecond: 1 });
    // Opened before anyone joined, its bucket then held empty: three in line, nobody admitted yet.
    assert.equal((await step(s))!.phase, Phase.Open);
    await refillRoom(env, s, -3_600_000);
    for (const u of ['c1', 'c2', 'c3']) await join(s, u);
    const third = (await line(s))[2]!;
    await step(s);
    const { events, ended } = sseEvents<{ state: string; position: number | null; pass?: string }>(
      api.port,
      `/api/sales/${s.id}/queue/events`,
      { authorization: `Bearer ${token(third)}` },
    );
    await waitFor('the first event', async () => events.length >= 1);
    assert.deepEqual([events[0]!.state, events[0]!.position], ['waiting', 3]);
    // A new position is written at most once a second (the loop publishes at least that often).
    await new Promise((r) => setTimeout(r, 1100));
    // A second's refill at one pass a second: one admitted.
    await refillRoom(env, s, 1000);
    await step(s);
    await waitFor('position 2', async () => events.some((e) => e.position === 2));
    // One more admitted: the buyer is next.
    await new Promise((r) => setTimeout(r, 1100));
    await refillRoom(env, s, 1000);
    await step(s);
    await waitFor('position 1', async () => events.some((e) => e.position === 1));
    await refillRoom(env, s, 1000);
    await step(s);
    await ended;
    const last = events.at(-1)!;
    assert.equal(last.state, 'admitted');
    assert.equal(outcome(await buy(s, third, last.pass)), '202 queued');
  });
});

describe('metrics', () => {
  /** The room's series as this process exports them (the loop runs in it): undefined when not exported. */
  async function exported(s: Sale) {
    const of = async (m: { get(): Promise<{ values: { labels: Record<string, unknown>; value: number }[] }> }) =>
      (await m.get()).values.find((v) => v.labels.sale === s.id)?.value;
    return {
      waiting: await of(metrics.queueWaiting),
      available: await of(metrics.queueAvailable),
      outstanding: await of(metrics.queuePassesOutstanding),
      admittable: await of(metrics.queueAdmittable),
      admitted: await of(metrics.queueAdmitted),
    };
  }

  test('the leading loop exports each room; admittable is 0 before the start and once every pass the units allow is out; a loop that stops leading drops the room', async () => {
    const s = await queueSale({ stock: 2, admitRatePerSecond: 1, admitOverbook: 1, ...(await later()) });
    for (const u of ['m1', 'm2', 'm3']) await join(s, u);
    // Before the start: waiters and units, nothing to admit yet; the admissions counter exists at 0.
    await step(s);
    assert.deepEqual(await exported(s), { waiting: 3, available: 2, outstanding: 0, admittable: 0, admitted: 0 });
    // Started a second ago, open at one pass a second: one pass, room for one more.
    await startedAgo(env, s, 1000);
    await step(s);
    assert.deepEqual(await exported(s), { waiting: 2, available: 2, outstanding: 1, admittable: 1, admitted: 1 });
    // Two passes out for two units: m3's turn waits for a pass to buy or expire, which is no stuck queue.
    await refillRoom(env, s, 1000);
    await step(s);
    assert.deepEqual(await exported(s), { waiting: 1, available: 2, outstanding: 2, admittable: 0, admitted: 2 });
    assert.equal(Number(await env.redis.hget(saleKeys(s.id).room, 'admitted')), 2);

    // Another loop holds the lease: this one's next tick steps nothing and stops exporting rooms.
    await env.redis.set(ADMISSION_LEASE, 'another-loop', 'PX', LEASE_MS);
    assert.equal(await step(s), null);
    assert.equal(loop().leader, false);
    const gone = await exported(s);
    assert.deepEqual(
      [gone.waiting, gone.available, gone.outstanding, gone.admittable],
      [undefined, undefined, undefined, undefined],
    );
    assert.equal(gone.admitted, 2, 'the admissions counter stays: Prometheus sums it over the loops');
    await env.redis.del(ADMISSION_LEASE);
  });
});

/** [member, score] pairs of a WITHSCORES reply. */
function pairs(reply: string[]): [string, string][] {
  return Array.from({ length: reply.length / 2 }, (_, i) => [reply[2 * i]!, reply[2 * i + 1]!]);
}

function place(seed: string, buyer: string): number {
  return parseInt(createHash('sha1').update(`${seed}:${buyer}`).digest('hex').slice(0, 13), 16) / 2 ** 52;
}

/** A pass as the API signs one (for the expiry case): through the API's own Challenges. */
async function passFor(s: Sale, user: string, expiresAt: number): Promise<string> {
  const { Challenges } = await import('../shared/purchase/challenge.js');
  return new Challenges(env.redis).pass(s.id, user, expiresAt, Date.now() - 10);
}
