// The waiting room under faults: 30,000 buyers join a 500-unit queue sale before its start and
// 20,000 more after it, over HTTP, while the admission loop (two processes, one leading by the
// lease) is SIGKILLed and Redis (AOF on) restarted mid-admission at seeded moments. Admitted
// buyers buy with their pass; some never do, so their passes expire (when the test says: their
// expiry is brought forward, as time passing would) and go back to the budget.
// Then, from Redis and Postgres as they are: nobody admitted twice or skipped, the line is the
// seed's shuffle then arrival order, admission stopped at sold out, no unit sold without a pass.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join as joinPath } from 'node:path';
import { test } from 'node:test';
import { delay } from '../../shared/runtime/daemon.js';
import { PURCHASE_TOKEN_HEADER } from '../../shared/http/routes/purchase.js';
import { ADMISSION_LEASE, saleKeys } from '../../shared/redis/keys.js';
import { fileEnv } from '../support/cluster.js';
import { countBy, newSale, runConcurrently, seededRandom, waitFor, written } from '../support/fixtures.js';
import { http, outcome, type Reply } from '../support/http.js';
import {
  assertNo500,
  beginScenario,
  checkSale,
  LiveChecks,
  QUIET_POLLING,
  summarize,
  tally,
} from '../support/scenario.js';

const STOCK = 500;
const PRE = 30_000;
const LIVE = 20_000;
const JOIN_CONCURRENCY = 64;
/** Buyers who are admitted and never buy: more than the overbook's slack (600 - 500), so their expiry admits more. */
const NO_SHOWS = 150;
const LOOPS = ['admission-a', 'admission-b'];

const file = fileEnv();

/** A join's place: the seed's shuffle (sha1(seed:buyer), first 52 bits, as a fraction), computed here, not by the server. */
const shuffled = (seed: string, buyer: string) =>
  parseInt(createHash('sha1').update(`${seed}:${buyer}`).digest('hex').slice(0, 13), 16) / 2 ** 52;

/** Sends until a definite answer: no answer, 503 (Redis restarting) and 429 busy are sent again. */
async function untilAnswered(send: () => Promise<Reply>): Promise<Reply> {
  for (;;) {
    const r = await send();
    if (r.status !== 0 && r.status !== 503 && r.status !== 429) return r;
    await delay(50);
  }
}

/** A join as the client saw it: when first sent, when answered 200, and the position the answer gave (null before the opening and at sold out). */
interface Join {
  buyer: string;
  sentAt: number;
  answeredAt: number;
  answer: string;
  position: number | null;
}

test('waiting room: 50,000 joiners for 500 units, the admission loop SIGKILLed and Redis restarted mid-admission: nobody admitted twice or skipped, shuffled-then-arrival order, admission stops at sold out, nothing sold without a pass', async () => {
  const { env } = file;
  const { seed, log, rand, answers } = beginScenario('waiting-room');
  const sale = await newSale(env, {
    stock: STOCK,
    perUserLimit: 1,
    maxPerOrder: 1,
    paymentWindowSeconds: 600,
    admission: 'queue',
    // 50 passes a second: the units left times the overbook (600) caps a round, not the rate, and at
    // this rate the first round lasts 12 s, long enough for the faults to land inside it.
    admitRatePerSecond: 50,
    admitOverbook: 1.2,
    // A pass outlives the test however slow the machine: it runs out only when the test brings
    // its expiry forward (a no-show's), never before its buyer got to use it.
    passSeconds: 3600,
    startsAt: new Date(Date.now() + 3_600_000).toISOString(),
  });
  const k = saleKeys(sale.id);
  const cl = file.cluster(log, QUIET_POLLING);
  await Promise.all([
    cl.start('api', 'api'),
    cl.start('writer', 'order-writer'),
    ...LOOPS.map((name) => cl.start(name, 'admission', { LOG_LEVEL: 'info' })),
  ]);
  const port = cl.apiPort;
  const join = async (buyer: string): Promise<Join> => {
    const sentAt = performance.now();
    const r = await untilAnswered(() => http(port, 'POST', `/api/sales/${sale.id}/queue`, { user: buyer }));
    return { buyer, sentAt, answeredAt: performance.now(), answer: outcome(r), position: r.body?.position ?? null };
  };

  // The pre-queue: everyone in before the start.
  let t = Date.now();
  const pre = await runConcurrently(PRE, JOIN_CONCURRENCY, (i) => join(`pre-${i}`));
  const preMs = Date.now() - t;
  log.note(
    `pre-queue: ${PRE} joins in ${preMs} ms (${Math.round(PRE / (preMs / 1000))} joins/s at concurrency ${JOIN_CONCURRENCY}): ${JSON.stringify(countBy(pre, (j) => j.answer))}`,
  );

  // The start, brought forward to just after the last pre-queue join, in both places it is kept
  // (the loop reads it from Redis's copy), instead of waiting out a start guessed in advance.
  const startsAt = Date.now() + 1000;
  await env.pool.query('update sales set starts_at = $2 where id = $1', [sale.id, new Date(startsAt)]);
  await env.redis.hset(k.meta, 'startsAt', startsAt);
  // A buyer learns the room is open when their place has a position.
  await waitFor(
    'the room open',
    async () => (await http(port, 'GET', `/api/sales/${sale.id}/queue/me`, { user: 'pre-0' })).body?.position != null,
    10_000,
    50,
  );
  const openedAt = Date.now();
  log.note(`room open ${openedAt - startsAt} ms after the start`);

  // Admitted buyers: the loop's count says how many places have a pass; the buyer at each new
  // place (by the order computed here from the seed) asks the API where they stand, and buys with
  // the pass it gives, unless a no-show.
  const { seed: saleSeed } = (await env.pool.query<{ seed: string }>('select seed from sales where id = $1', [sale.id]))
    .rows[0]!;
  const expected = pre.map((j) => j.buyer).sort((a, b) => shuffled(saleSeed, a) - shuffled(saleSeed, b));
  const buyerRand = seededRandom(seed + 1);
  const accepted: { orderId: string; buyer: string }[] = [];
  const misplaced: string[] = [];
  const seenStates: string[] = [];
  const purchases: string[] = [];
  const noShows = new Set<string>();
  /** No-shows who saw their pass: it runs out now, its expiry (ms) moved into the past for the loop to sweep. */
  const runOut = new Set<string>();
  const expireRunOut = async () => {
    if (runOut.size === 0) return;
    const buyers = [...runOut];
    const scores = await env.redis.zmscore(k.passes, ...buyers);
    // Again each round: a Redis restart may have lost a move made under a second before it. XX: a
    // pass the loop swept already is not put back.
    await Promise.all(buyers.filter((_, i) => Number(scores[i]) > 1).map((b) => env.redis.zadd(k.passes, 'XX', 1, b)));
  };
  const buyers: Promise<void>[] = [];
  let watched = 0;
  let watching = true;
  const admittedBuyer = async (place: number, noShow: boolean) => {
    const buyer = expected[place]!;
    const view = await untilAnswered(() => http(port, 'GET', `/api/sales/${sale.id}/queue/me`, { user: buyer }));
    seenStates.push(outcome(view) === '200' ? view.body.state : outcome(view));
    if (view.body?.state !== 'admitted') {
      if (view.body?.state !== 'expired')
        misplaced.push(
          `place ${place} (${buyer}): ${JSON.stringify(view.body)} when ${place + 1} or more were admitted`,
        );
      return;
    }
    if (noShow) {
      runOut.add(buyer);
      return;
    }
    const r = await untilAnswered(() =>
      http(port, 'POST', `/api/sales/${sale.id}/purchases`, {
        user: buyer,
        body: { qty: 1 },
        headers: { [PURCHASE_TOKEN_HEADER]: view.body.pass },
      }),
    );
    purchases.push(outcome(r));
    if (r.status === 202) accepted.push({ orderId: r.body.orderId, buyer });
  };
  const watcher = (async () => {
    while (watching) {
      try {
        const admitted = Number((await env.redis.hget(k.room, 'admitted')) ?? 0);
        for (; watched < admitted; watched++) {
          // Decided here, in place order, so the seed reproduces who no-shows.
          const noShow = noShows.size < NO_SHOWS && buyerRand() < 0.3;
          if (noShow) noShows.add(expected[watched]!);
          buyers.push(admittedBuyer(watched, noShow));
        }
        await expireRunOut();
      } catch {
        // Redis restarting: the next read catches up.
      }
      await delay(50);
    }
  })();
  const live = new LiveChecks(env, [sale.id], () => accepted.map((a) => a.orderId), { everyMs: 500, graceMs: 4000 });

  // Live arrivals, while the faults land. Each is set off by how far admission has got, not by a
  // clock, so it lands mid-admission however loaded the machine: the leader SIGKILLed at a seeded
  // count in the first round of passes (the standby takes the lease over within LEASE_MS; the dead
  // one comes back after a seeded while, as the standby), Redis SIGKILLed at a later seeded count
  // and restarted from its AOF, then the leader SIGKILLed again a seeded while after that, around
  // when the no-shows' passes have run out and the passes they free go out.
  t = Date.now();
  const arrivals = runConcurrently(LIVE, JOIN_CONCURRENCY, (i) => join(`live-${i}`)).then((r) => ({
    joins: r,
    ms: Date.now() - t,
  }));
  const soldOut = waitFor(
    'sold out',
    async () => (await env.redis.get(k.available).catch(() => null)) === '0',
    180_000,
    50,
  ).then(() => Date.now());
  const admittedNow = async () => (await env.redis.hget(k.room, 'admitted').catch(() => null)) ?? '?';
  const reach = async (n: number) => {
    const at = await waitFor(
      `${n} admitted`,
      async () => {
        const a = Number(await admittedNow());
        return a >= n && a;
      },
      60_000,
      20,
    );
    log.note(`admitted ${at} (waited for ${n})`);
  };
  const loopId = (name: string) => {
    const started = readFileSync(joinPath(cl.logDir, `${name}.log`), 'utf8')
      .split('\n')
      .filter((l) => l.includes('admission loop started'));
    return (JSON.parse(started.at(-1)!) as { loop: string }).loop;
  };
  const leader = () =>
    waitFor(
      'an admission leader',
      async () => {
        const holder = await env.redis.get(ADMISSION_LEASE).catch(() => null);
        return LOOPS.find((name) => cl.alive(name) && loopId(name) === holder);
      },
      10_000,
      20,
    );
  const killLeader = async (): Promise<Promise<void>> => {
    const name = await leader();
    await cl.signal(name, 'SIGKILL');
    log.note(`killed the leader ${name} at admitted ${await admittedNow()}`);
    const downMs = 200 + rand() * 1500;
    return delay(downMs).then(() => cl.restart(name, { LOG_LEVEL: 'info' }));
  };
  await reach(20 + Math.floor(rand() * 230));
  const back = await killLeader();
  await reach(300 + Math.floor(rand() * 250));
  const downMs = 300 + rand() * 1000;
  log.fault(`redis-server SIGKILL (at admitted ${await admittedNow()}, down ${Math.round(downMs)} ms)`);
  await env.stopRedis('SIGKILL');
  await delay(downMs);
  await env.startRedis();
  log.note(
    `redis-server back (AOF replayed): admitted ${await admittedNow()}, available ${await env.redis.get(k.available)}`,
  );
  await back;
  await delay(rand() * 4000);
  await await killLeader();

  const { joins: liveJoins, ms: liveMs } = await arrivals;
  log.note(
    `live arrivals: ${LIVE} joins in ${liveMs} ms (${Math.round(LIVE / (liveMs / 1000))} joins/s): ${JSON.stringify(countBy(liveJoins, (j) => j.answer))}`,
  );
  const soldOutMs = (await soldOut) - openedAt;
  watching = false;
  await watcher;
  for (let n = 0; n < buyers.length; n = buyers.length) await Promise.all(buyers.slice(n));
  // The last no-shows' passes run out too, and the loop sweeps them back to the budget.
  await waitFor(
    "the no-shows' passes swept",
    async () => {
      await expireRunOut();
      return runOut.size === 0 || (await env.redis.zmscore(k.passes, ...runOut)).every((p) => p === null);
    },
    60_000,
    50,
  );
  await written(env, sale.id);
  await live.stop();
  log.note(
    `sold out ${soldOutMs} ms after the opening; ${watched} admitted buyers asked, ${noShows.size} no-shows; their views ${JSON.stringify(countBy(seenStates, (s) => s))}; purchases ${JSON.stringify(countBy(purchases, (p) => p))}`,
  );

  // Admission stays stopped while nothing is left: sampled at six ticks of the loop (each writes tickAt).
  const samples: { admitted: string; available: string; tickAt: string }[] = [];
  await waitFor(
    'six ticks at sold out',
    async () => {
      const [[, room], [, available]] = (await env.redis
        .multi()
        .hmget(k.room, 'admitted', 'tickAt')
        .get(k.available)
        .exec())! as [[null, string[]], [null, string]];
      if (samples.at(-1)?.tickAt !== room[1]) samples.push({ admitted: room[0]!, tickAt: room[1]!, available });
      return samples.length >= 6;
    },
    20_000,
    40,
  );

  // What there is now, read once: the line, the passes, the room, the orders.
  const line = await env.redis.zrange(k.queue, '0', '-1', 'WITHSCORES');
  const places = new Map<string, number>();
  const order: string[] = [];
  for (let i = 0; i < line.length; i += 2) {
    order.push(line[i]!);
    places.set(line[i]!, Number(line[i + 1]));
  }
  const rank = new Map(order.map((b, i) => [b, i] as const));
  const room = await env.redis.hgetall(k.room);
  const admitted = Number(room.admitted);
  const passList = await env.redis.zrange(k.passes, '0', '-1', 'WITHSCORES');
  const passes = new Map<string, number>();
  for (let i = 0; i < passList.length; i += 2) passes.set(passList[i]!, Number(passList[i + 1]));
  const orders = (
    await env.pool.query<{ id: string; user_id: string; qty: number }>(
      'select id, user_id, qty from orders where sale_id = $1',
      [sale.id],
    )
  ).rows;
  const expired = Number(room.expired ?? 0);
  const stateOf = async (buyer: string) =>
    (await untilAnswered(() => http(port, 'GET', `/api/sales/${sale.id}/queue/me`, { user: buyer }))).body
      .state as string;
  const waitingProbe = [...order.slice(admitted, admitted + 10), order[PRE - 1]!, order[PRE]!, order.at(-1)!];
  const probeStates = await Promise.all(waitingProbe.map(stateOf));

  const statuses = answers();
  const final = await checkSale(
    env,
    sale.id,
    accepted.map((a) => a.orderId),
  );
  summarize({
    scenario: 'waiting-room',
    seed,
    buyers: PRE + LIVE,
    orders: orders.length,
    faults: log.faults,
    faultKinds: log.kinds.join(', '),
    ...tally(live, final),
    answers: statuses,
  });
  log.note(
    `admitted ${admitted}, passes used ${[...passes.values()].filter((p) => p === 0).length}, expired ${expired}, still outstanding ${[...passes.values()].filter((p) => p > 0).length}; ticks sampled at sold out: ${JSON.stringify(samples.map((s) => s.admitted))}`,
  );
  assertNo500('waiting-room', statuses);

  // Everyone who joined has one place: 200 to every join, and the line holds exactly them.
  assert.deepEqual(
    countBy([...pre, ...liveJoins], (j) => j.answer),
    { 200: PRE + LIVE },
    'every join answered 200 in the end',
  );
  assert.equal(order.length, PRE + LIVE, 'one place per buyer in the line');
  assert.deepEqual(
    pre
      .filter((j) => j.position !== null)
      .map((j) => j.buyer)
      .slice(0, 5),
    [],
    'no position before the start: places are drawn at the opening',
  );

  // Order: the pre-queue first, in the seed's shuffle, each at the place the seed gives it ...
  const prePart = order.slice(0, PRE);
  const firstWrong = prePart.findIndex((b, i) => b !== expected[i]);
  assert.equal(
    firstWrong,
    -1,
    `place ${firstWrong}: the line has ${prePart[firstWrong]}, the seed's shuffle puts ${expected[firstWrong]} there`,
  );
  const offSeed = expected.filter((b) => places.get(b) !== shuffled(saleSeed, b));
  assert.deepEqual(offSeed.slice(0, 5), [], `pre-queue places that are not sha1(seed:buyer): ${offSeed.length}`);
  // ... then the live arrivals, numbered 1, 2, ... by the tail counter (place 1 + n), none lost to the restart ...
  const livePart = order.slice(PRE);
  const misnumbered = livePart.filter((b, i) => !b.startsWith('live-') || places.get(b) !== i + 2);
  assert.deepEqual(
    misnumbered.slice(0, 5),
    [],
    `live arrivals off the tail counter: ${misnumbered.length} (tail ${room.tail})`,
  );
  assert.equal(Number(room.tail), LIVE, 'the tail counter counted each arrival once');
  // ... in arrival order as far as the client sees it: a join answered before another was sent is ahead of it.
  const byAnswer = [...liveJoins].sort((a, b) => a.answeredAt - b.answeredAt);
  const overtaken: string[] = [];
  let ahead = -Infinity;
  let aheadOf = '';
  let comparable = 0;
  let next = 0;
  for (const j of [...liveJoins].sort((a, b) => a.sentAt - b.sentAt)) {
    for (; next < byAnswer.length && byAnswer[next]!.answeredAt < j.sentAt; next++) {
      if (places.get(byAnswer[next]!.buyer)! > ahead)
        [ahead, aheadOf] = [places.get(byAnswer[next]!.buyer)!, byAnswer[next]!.buyer];
    }
    if (next > 0) comparable++;
    if (places.get(j.buyer)! <= ahead)
      overtaken.push(`${j.buyer} (place ${places.get(j.buyer)}) sent after ${aheadOf} (place ${ahead}) was answered`);
  }
  assert.deepEqual(
    overtaken.slice(0, 5),
    [],
    `live arrivals behind a later one: ${overtaken.length} of ${comparable} comparable`,
  );
  log.note(
    `line: ${PRE} pre-queue places as the seed gives them, then ${LIVE} arrivals at places 2..${LIVE + 1}; ${comparable} arrivals were sent after another was answered, and each is behind it`,
  );
  // The position a live join was answered is its place in the line less those admitted then, which only grows up to `admitted`.
  const offPosition = liveJoins
    .filter(
      (j) =>
        j.position !== null &&
        !(rank.get(j.buyer)! - (j.position - 1) >= 0 && rank.get(j.buyer)! - (j.position - 1) <= admitted),
    )
    .map((j) => `${j.buyer} at rank ${rank.get(j.buyer)} told position ${j.position}`);
  assert.deepEqual(
    offPosition.slice(0, 5),
    [],
    `live joins told a position their place does not give: ${offPosition.length}`,
  );

  // Nobody admitted twice, nobody skipped: every pass (live, used) is one of the first `admitted`
  // places, and the passes plus those that expired are exactly `admitted`, one per place.
  const beyond = [...passes.keys()].filter((b) => !(rank.get(b)! < admitted));
  assert.deepEqual(beyond, [], `buyers with a pass beyond the ${admitted} admitted places`);
  assert.equal(
    passes.size + expired,
    admitted,
    `passes ${passes.size} + expired ${expired} != admitted ${admitted}: a place had no pass or two`,
  );
  // Every admitted buyer the test asked was admitted at the place the seed's order gives.
  assert.deepEqual(misplaced, [], 'buyers the loop had reached who were not admitted');
  assert.equal(watched, admitted, 'the test asked every admitted buyer');
  const notAdmittedView = (
    await Promise.all(order.slice(0, admitted).map(async (b) => [b, await stateOf(b)] as const))
  ).filter(([, s]) => !['admitted', 'used', 'expired'].includes(s));
  assert.deepEqual(notAdmittedView, [], 'every one of the first places says admitted, used or expired');

  // Admission stopped at sold out: no new pass over six ticks while nothing is left, and the line is told so.
  assert.ok(
    samples.every((s) => s.available === '0' && Number(s.admitted) === admitted),
    `admitted grew while sold out: ${JSON.stringify(samples)}`,
  );
  assert.deepEqual(
    probeStates,
    waitingProbe.map(() => 'sold_out'),
    `waiting buyers' views: ${waitingProbe.join(', ')}`,
  );

  // No unit sold outside a pass: each order is one unit of a buyer whose pass bought, at most one per buyer.
  const perBuyer = countBy(orders, (o) => o.user_id);
  assert.deepEqual(
    Object.entries(perBuyer).filter(([, n]) => n > 1),
    [],
    'buyers with two orders',
  );
  assert.deepEqual(
    orders
      .filter((o) => passes.get(o.user_id) !== 0)
      .map((o) => `${o.id} of ${o.user_id} (pass ${passes.get(o.user_id)})`),
    [],
    'orders without a used pass',
  );
  assert.equal(
    orders.reduce((n, o) => n + o.qty, 0),
    STOCK,
    'sold out: every unit in an order, no more',
  );
  assert.equal([...passes.values()].filter((p) => p === 0).length, orders.length, 'one order per used pass');
  assert.ok(
    noShows.size > 0 && expired >= noShows.size,
    `no-shows' passes expired: ${noShows.size} no-shows, ${expired} expired`,
  );
  assert.deepEqual(live.violations, [], 'invariants during the faults');
  assert.deepEqual(final.violations, [], 'invariants at rest');
  assert.deepEqual(cl.unexpectedExits, []);
  assert.deepEqual(
    await cl.stopAll(),
    { api: 0, writer: 0, 'admission-a': 0, 'admission-b': 0 },
    'every process stops cleanly on SIGTERM',
  );
});
