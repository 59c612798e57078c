// The network-and-clock scenario's own side, run inside its private network namespace by
// ../network-and-clock.test.ts (which judges what it writes to FLASHSALE_NETNS_RESULT). Three
// phases, one per clock skew of api-b and writer-b (the seed orders them); each opens a first-come
// sale 3 s after its start and closes another 3 s after it, by Redis's clock, and runs a waiting
// room and a draw whose entries close 4 s after it; the network faults run across all three.
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { delay } from '../../../shared/runtime/daemon.js';
import { PURCHASE_TOKEN_HEADER } from '../../../shared/http/routes/purchase.js';
import { saleIdOfOrder } from '../../../shared/runtime/ids.js';
import type { Violation } from '../../../shared/checks/invariants.js';
import type { Sale } from '../../../shared/sales/sale.js';
import { freePort } from '../../../tools/local-stack.js';
import { Cluster } from '../../support/cluster.js';
import { testEnv, type TestEnv } from '../../support/env.js';
import { newSale, seededRandom, settle, waitFor, written } from '../../support/fixtures.js';
import { http, outcome, type Reply } from '../../support/http.js';
import { inPrivateNetns, NetFaults } from '../../support/netns.js';
import { beginScenario, checkSale, LiveChecks, QUIET_POLLING, tally } from '../../support/scenario.js';
import { Shoppers, sizes, skewedDemand } from '../../support/shoppers.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import { byFirstWord, networkFaults, PROCS, type Server } from './faults.js';

/** What a decision judged by the wrong clock looks like, by kind: each entry says which and by how much. */
export type ClockKind =
  | 'purchase_outside_window'
  | 'pass_past_expiry'
  | 'draw_entry_after_close'
  | 'order_closed_before_deadline';

export interface NetworkScenarioResult {
  seed: number;
  buyers: number;
  orders: number;
  /** First-come purchases answered 202, purchases with a pass answered 202, draw entries that won. */
  accepted: number;
  passPurchases: number;
  drawWinners: number;
  faults: number;
  faultKinds: string;
  checks: number;
  violations: Violation[];
  missingOrders: string[];
  winnersWithoutOrder: string[];
  answers: Record<string, number>;
  unexpectedExits: string[];
  clock: Record<ClockKind, string[]>;
}

const SCENARIO = 'network-and-clock';
/** Started under libfaketime, at each phase's skew. */
const SKEWED = ['api-b', 'writer-b'];
const SKEWS = [-30, -2, 30];

/** Debian's libfaketime, wherever the architecture puts it. */
function libfaketime(): string {
  const path = readdirSync('/usr/lib')
    .map((arch) => `/usr/lib/${arch}/faketime/libfaketime.so.1`)
    .find((p) => existsSync(p));
  if (!path) throw new Error('libfaketime is not installed: apt-get install faketime');
  return path;
}

const iso = (ms: number) => new Date(ms).toISOString();
const fmtSkew = (s: number) => `${s > 0 ? '+' : ''}${s} s`;

/** This process's clock against Redis TIME: Redis's = ours + offset, give or take `slack` (the round trip). */
async function redisClock(env: TestEnv): Promise<{ offset: number; slack: number; now: () => Promise<number> }> {
  const now = async () => {
    const [s, us] = await env.redis.time();
    return Number(s) * 1000 + Math.floor(Number(us) / 1000);
  };
  const t0 = Date.now();
  const r = await now();
  const t1 = Date.now();
  return { offset: r - (t0 + t1) / 2, slack: t1 - t0 + 1, now };
}

/** Sends until a definite answer, or until `until` (this process's clock): no answer, 503 and 429 are sent again. */
async function untilAnswered(send: () => Promise<Reply>, until: number): Promise<Reply> {
  for (;;) {
    const r = await send();
    if ((r.status !== 0 && r.status !== 503 && r.status !== 429) || Date.now() >= until) return r;
    await delay(100);
  }
}

async function main(): Promise<NetworkScenarioResult> {
  if (!inPrivateNetns())
    throw new Error(`${SCENARIO}: run by network-and-clock.test.ts, inside a network namespace of its own`);
  const { seed, log, answers } = beginScenario(SCENARIO);
  const env = await testEnv();
  log.note('Redis and Postgres up in the namespace');
  const faults = new NetFaults();
  const proxies = new Map<string, Record<Server, TcpProxy>>();
  let c: Cluster | undefined;
  try {
    const ports: Record<Server, number> = {
      redis: env.redisServer.port,
      pg: Number(new URL(env.config.databaseUrl!).port),
    };
    let n = 0;
    for (const [name] of PROCS) {
      proxies.set(name, {
        redis: await TcpProxy.start(ports.redis, { seed: seed + ++n }),
        pg: await TcpProxy.start(ports.pg, { seed: seed + ++n }),
      });
    }
    const via = (name: string) => {
      const url = new URL(env.config.databaseUrl!);
      url.port = String(proxies.get(name)!.pg.port);
      return { REDIS_URL: `redis://127.0.0.1:${proxies.get(name)!.redis.port}`, DATABASE_URL: url.toString() };
    };
    const shuffle = seededRandom(seed + 3);
    const order = SKEWS.map((s) => [s, shuffle()] as const)
      .sort((a, b) => a[1] - b[1])
      .map(([s]) => s);
    // One offset file for both skewed processes, read again every second (FAKETIME_CACHE_DURATION):
    // a phase changes the skew without a restart. Only the wall clock moves; timers keep the real
    // monotonic clock, so a step back does not stall them.
    const skewFile = join(env.dataDir, 'faketime');
    const setSkew = (s: number) => writeFileSync(skewFile, `${s > 0 ? '+' : ''}${s}s\n`);
    setSkew(order[0]!);
    const skewVars = {
      LD_PRELOAD: libfaketime(),
      FAKETIME_TIMESTAMP_FILE: skewFile,
      FAKETIME_CACHE_DURATION: '1',
      FAKETIME_DONT_FAKE_MONOTONIC: '1',
    };
    /** Waits until a skewed process's HTTP Date header (its wall clock, to the second) says it runs `s` off. */
    const skewed = (name: string, port: number, s: number) =>
      waitFor(
        `${name} at ${fmtSkew(s)}`,
        async () => {
          const r = await http(port, 'GET', '/healthz', { timeoutMs: 2000 });
          const date = Date.parse(String(r.headers.date));
          return Math.abs(date - (Date.now() + s * 1000)) < 1500;
        },
        30_000,
        200,
      );
    const apiPorts: Record<string, number> = { 'api-a': await freePort(), 'api-b': await freePort() };
    const apiOf = (port: number) => (port === apiPorts['api-a'] ? 'api-a' : 'api-b');
    const skewNow: Record<string, number> = { 'api-a': 0, 'api-b': order[0]! };
    c = new Cluster(env, log, QUIET_POLLING);
    const cl = c;
    await Promise.all(
      PROCS.map(([name, kind]) =>
        cl.start(name, kind, {
          ...via(name),
          ...(kind === 'api' ? { PORT: String(apiPorts[name]) } : {}),
          ...(kind === 'order-writer' ? { WRITER_ID: name } : {}),
          ...(SKEWED.includes(name) ? skewVars : {}),
        }),
      ),
    );
    const clock = await redisClock(env);
    log.note(
      `processes up, each through its own proxies; this clock to Redis's: ${Math.round(clock.offset)} ms (±${clock.slack}); skews in order: ${order.map(fmtSkew).join(', ')}`,
    );
    const both = [apiPorts['api-a']!, apiPorts['api-b']!];

    const found: Record<ClockKind, string[]> = {
      purchase_outside_window: [],
      pass_past_expiry: [],
      draw_entry_after_close: [],
      order_closed_before_deadline: [],
    };
    const sales: Sale[] = [];
    const draws: Sale[] = [];
    const shoppers: Shoppers[] = [];
    const passBuys: { orderId: string; buyer: string }[] = [];
    const entrants: { sale: string; buyer: string }[] = [];
    const buyers = new Set<string>();
    const lives: LiveChecks[] = [];
    const acceptedIds = () => [
      ...shoppers.flatMap((s) => s.accepted.map((w) => w.orderId)),
      ...passBuys.map((b) => b.orderId),
    ];
    const net = networkFaults(log, seededRandom(seed + 2), faults, proxies, ports);

    for (const [i, skew] of order.entries()) {
      setSkew(skew);
      await Promise.all([skewed('api-b', apiPorts['api-b']!, skew), skewed('writer-b', cl.opsPort('writer-b'), skew)]);
      skewNow['api-b'] = skew;
      log.fault(`clock skew ${fmtSkew(skew)}: ${SKEWED.join(', ')}`);
      const rand = seededRandom(seed + 10 + i);
      const R = await clock.now();
      const toLocal = (redisMs: number) => redisMs - clock.offset;
      const at = (redisMs: number) => delay(Math.max(0, toLocal(redisMs) - Date.now()));
      // Stock enough that neither sells out near its boundary, where a skewed API shows itself.
      // Three sizes each, bought by skewed demand: conservation is checked per size under the faults.
      const first = { ...sizes(3, 100), perUserLimit: 2, maxPerOrder: 2, paymentWindowSeconds: 2 };
      const opening = await newSale(env, { ...first, startsAt: iso(R + 3000), endsAt: iso(R + 3_600_000) });
      const closing = await newSale(env, { ...first, startsAt: iso(R - 60_000), endsAt: iso(R + 3000) });
      // Opened a minute ago: open by every API's clock, skewed or not.
      const room = await newSale(env, {
        admission: 'queue',
        stock: 15,
        perUserLimit: 1,
        maxPerOrder: 1,
        paymentWindowSeconds: 2,
        admitRatePerSecond: 20,
        passSeconds: 10,
        startsAt: iso(R - 60_000),
      });
      // Its orders stay pending: the draw's winners are read once it is made, without backfill churning.
      const draw = await newSale(env, {
        admission: 'draw',
        stock: 10,
        paymentWindowSeconds: 600,
        startsAt: iso(R - 60_000),
        entriesCloseAt: iso(R + 4000),
      });
      sales.push(opening, closing, room, draw);
      draws.push(draw);
      lives.push(
        new LiveChecks(env, [opening.id, closing.id, room.id, draw.id], acceptedIds, {
          everyMs: 1000,
          graceMs: 10_000,
        }),
      );

      // First come: both sales, both APIs, from now until 4 s past their boundaries.
      const bounds = [
        { from: R + 3000, to: Infinity },
        { from: -Infinity, to: R + 3000 },
      ];
      const phaseShoppers = [opening, closing].map(
        (s, j) =>
          new Shoppers({
            port: both[0]!,
            ports: both,
            saleId: s.id,
            rand: seededRandom(seed + 20 + i * 2 + j),
            users: 60,
            prefix: `p${i}-${j ? 'closing' : 'opening'}-`,
            maxQty: 2,
            payRatio: 0.5,
            payDelayMs: [0, 2500],
            concurrency: 3,
            thinkMs: [50, 150],
            demand: skewedDemand(
              s.variants.map((v) => v.sku),
              seededRandom(seed + 40 + i * 2 + j),
            ),
          }),
      );
      for (const s of phaseShoppers) {
        s.run();
        shoppers.push(s);
      }
      const firstCome = (async () => {
        await at(R + 7000);
        await Promise.all(phaseShoppers.map((s) => s.done()));
        for (const [j, s] of phaseShoppers.entries()) {
          const b = bounds[j]!;
          for (const w of s.accepted) {
            const [from, to] = [w.sentAt + clock.offset - clock.slack, w.answeredAt + clock.offset + clock.slack];
            const who = `${w.orderId} via ${apiOf(w.port)} (skew ${fmtSkew(apiOf(w.port) === 'api-a' ? 0 : skew)})`;
            if (to < b.from)
              found.purchase_outside_window.push(`${who}: accepted ${Math.round(b.from - to)} ms before the start`);
            if (from >= b.to)
              found.purchase_outside_window.push(`${who}: accepted ${Math.round(from - b.to)} ms after the end`);
          }
          for (const b of s.buyers) buyers.add(b);
        }
      })();

      // The waiting room: as many join through either API as it has units, so the first round admits
      // them all; most buy at once, some hold their pass until just past its expiry. Every choice is
      // drawn here, in order, so the seed replays it.
      const roomBuyers = Array.from({ length: room.stock }, (_, b) => ({
        buyer: `p${i}-room-${b}`,
        joinVia: both[Math.floor(rand() * 2)]!,
        buyVia: both[Math.floor(rand() * 2)]!,
        lateMs: rand() < 0.35 ? 200 + rand() * 1000 : undefined,
        pay: rand() < 0.5,
      }));
      const roomAnswers: Record<string, number> = {};
      const waitingRoom = Promise.all(
        roomBuyers.map(async (b) => {
          buyers.add(b.buyer);
          // Bounded only to end a run that went wrong: a slow machine makes the phase longer, not emptier.
          const joined = await untilAnswered(
            () => http(b.joinVia, 'POST', `/api/sales/${room.id}/queue`, { user: b.buyer }),
            Date.now() + 60_000,
          );
          if (joined.status !== 200) return;
          let view: Reply | undefined;
          for (const until = Date.now() + 60_000; Date.now() < until; await delay(250)) {
            const r = await http(b.joinVia, 'GET', `/api/sales/${room.id}/queue/me`, { user: b.buyer });
            if (r.status === 200 && r.body.state === 'admitted') {
              view = r;
              break;
            }
            if (r.status === 200 && ['expired', 'used', 'ended'].includes(r.body.state)) return;
          }
          if (!view) return;
          const expiresAt = Date.parse(view.body.passExpiresAt as string);
          if (b.lateMs !== undefined) await at(expiresAt + b.lateMs);
          const skewThen = apiOf(b.buyVia) === 'api-a' ? 0 : skewNow['api-b']!;
          const sentAt = Date.now();
          const r = await http(b.buyVia, 'POST', `/api/sales/${room.id}/purchases`, {
            user: b.buyer,
            body: { qty: 1 },
            headers: { [PURCHASE_TOKEN_HEADER]: view.body.pass },
          });
          const label = `${b.lateMs === undefined ? 'at once' : 'late'} via ${apiOf(b.buyVia)}: ${outcome(r)}`;
          roomAnswers[label] = (roomAnswers[label] ?? 0) + 1;
          if (r.status !== 202) return;
          passBuys.push({ orderId: r.body.orderId, buyer: b.buyer });
          const late = sentAt + clock.offset - clock.slack - expiresAt;
          if (late >= 0)
            found.pass_past_expiry.push(
              `${r.body.orderId} via ${apiOf(b.buyVia)} (skew ${fmtSkew(skewThen)}): pass used ${Math.round(late)} ms after its expiry`,
            );
          if (b.pay) await http(b.buyVia, 'POST', `/api/orders/${r.body.orderId}/pay`, { user: b.buyer });
        }),
      );

      // The draw: 40 entrants at seeded moments, half over the 6 s around the close, half crowding
      // the last second before it and the first after, through either API.
      const drawEntrants = Array.from({ length: 40 }, (_, e) => ({
        buyer: `p${i}-draw-${e}`,
        atMs: e % 2 ? R + 3000 + rand() * 2000 : R + rand() * 6000,
        via: both[Math.floor(rand() * 2)]!,
      }));
      const entering = Promise.all(
        drawEntrants.map(async (e) => {
          buyers.add(e.buyer);
          await at(e.atMs);
          const r = await untilAnswered(
            () => http(e.via, 'POST', `/api/sales/${draw.id}/entries`, { user: e.buyer }),
            toLocal(R + 6500),
          );
          if (r.status === 200) entrants.push({ sale: draw.id, buyer: e.buyer });
        }),
      );
      await Promise.all([firstCome, waitingRoom, entering]);
      log.note(
        `phase ${i + 1} (${fmtSkew(skew)}) done: first-come ${JSON.stringify(phaseShoppers.map((s) => s.purchases))}; with a pass ${JSON.stringify(roomAnswers)}`,
      );
    }
    await net.stop();
    await faults.healAll();
    for (const p of proxies.values()) for (const proxy of Object.values(p)) proxy.setDelay(undefined);
    log.note(
      `faults healed; rules left: ${JSON.stringify((await faults.list()).split('\n').filter((l) => l.startsWith('-A')))}`,
    );

    // At rest: the first-come and waiting-room sales settled, each draw made and its orders written.
    for (const s of sales.filter((x) => x.admission !== 'draw')) await settle(env, s.id, 60_000);
    for (const d of draws) {
      await waitFor(
        `draw ${d.id} made`,
        async () =>
          (await env.pool.query('select 1 from sales where id = $1 and drawn_at is not null', [d.id])).rowCount === 1,
        60_000,
        100,
      );
      await waitFor(
        `draw ${d.id}'s winners given orders`,
        async () => {
          const r = await env.pool.query<{ n: number }>(
            "select count(*)::int as n from draw_entries where sale_id = $1 and status = 'won'",
            [d.id],
          );
          return r.rows[0]!.n === Math.min(d.stock, entrants.filter((e) => e.sale === d.id).length);
        },
        60_000,
        100,
      );
      await written(env, d.id);
    }
    for (const l of lives) await l.stop();
    const accepted = acceptedIds();
    const finals = await Promise.all(
      sales.map((s) =>
        checkSale(
          env,
          s.id,
          accepted.filter((id) => saleIdOfOrder(id) === s.id),
        ),
      ),
    );
    const ids = sales.map((s) => s.id);
    const present = new Set(
      (await env.pool.query<{ id: string }>('select id from orders where id = any($1::text[])', [accepted])).rows.map(
        (r) => r.id,
      ),
    );
    const missingOrders = accepted.filter((id) => !present.has(id));

    // Every entrant asks the true-clock API how their entry went; a win must have its order.
    const winnersWithoutOrder: string[] = [];
    let drawWinners = 0;
    for (const e of entrants) {
      const r = await untilAnswered(
        () => http(apiPorts['api-a']!, 'GET', `/api/sales/${e.sale}/entries/me`, { user: e.buyer }),
        Date.now() + 20_000,
      );
      if (r.body?.state !== 'won') continue;
      drawWinners++;
      const order = await env.pool.query('select 1 from orders where id = $1', [r.body.orderId]);
      if (order.rowCount !== 1)
        winnersWithoutOrder.push(`${e.buyer} told won with ${r.body.orderId}, which is not in Postgres`);
    }

    const late = await env.pool.query<{ buyer: string; sale_id: string; ms: number }>(
      `select d.buyer, d.sale_id, round(extract(epoch from d.entered_at - s.entries_close_at) * 1000)::int as ms
       from draw_entries d join sales s on s.id = d.sale_id where d.sale_id = any($1::text[]) and d.entered_at >= s.entries_close_at`,
      [ids],
    );
    for (const r of late.rows)
      found.draw_entry_after_close.push(`${r.buyer} entered ${r.ms} ms after the close (sale ${r.sale_id})`);
    const early = await env.pool.query<{ id: string; ms: number }>(
      `select id, round(extract(epoch from expires_at - closed_at) * 1000)::int as ms from orders
       where sale_id = any($1::text[]) and status = 'expired' and closed_at < expires_at`,
      [ids],
    );
    for (const r of early.rows)
      found.order_closed_before_deadline.push(`${r.id} closed ${r.ms} ms before its deadline`);

    const orders = (
      await env.pool.query<{ n: number }>('select count(*)::int as n from orders where sale_id = any($1::text[])', [
        ids,
      ])
    ).rows[0]!.n;
    const delayed = [...proxies.values()].reduce((s, p) => s + p.redis.delayedChunks + p.pg.delayedChunks, 0);
    log.note(
      `${delayed} chunks delayed by the proxies; live checks skipped ${lives.reduce((s, l) => s + l.skipped, 0)}`,
    );
    const totals = tally(...lives, ...finals);
    return {
      seed,
      buyers: buyers.size,
      orders,
      accepted: shoppers.reduce((s, x) => s + x.accepted.length, 0),
      passPurchases: passBuys.length,
      drawWinners,
      faults: log.faults,
      faultKinds: byFirstWord(log.kinds),
      checks: totals.checks + ids.length * 2 + accepted.length + entrants.length,
      violations: [...lives.flatMap((l) => l.violations), ...finals.flatMap((f) => f.violations)],
      missingOrders,
      winnersWithoutOrder,
      answers: answers(),
      unexpectedExits: [...c.unexpectedExits],
      clock: found,
    };
  } finally {
    c?.killAll();
    await faults.healAll().catch(() => {});
    for (const p of proxies.values()) for (const proxy of Object.values(p)) await proxy.close();
    await env.close();
  }
}

try {
  const result = await main();
  writeFileSync(process.env.FLASHSALE_NETNS_RESULT!, JSON.stringify(result));
  process.exit(0);
} catch (err) {
  console.error(`[${SCENARIO}] failed:`, err);
  process.exit(1);
}
