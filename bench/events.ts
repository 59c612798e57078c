// Delivery throughput (docs/events.md): N order events delivered by a `flashsale events` process to
// a keep-alive receiver on loopback that answers 200 at once, at EVENTS_CONCURRENCY 1 and at the
// default, alternating within each round, on fresh servers each run. The clock runs from the
// events' insert (one statement) until the receiver has every webhook-id; the events process's and
// Postgres's CPU over the same time, from /proc, per delivered event.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadavg } from 'node:os';
import { SETTINGS } from '../shared/config/settings.js';
import { addEndpoint } from '../shared/events/endpoints.js';
import { newOrderId } from '../shared/runtime/ids.js';
import { createSale, parseSaleInput } from '../shared/sales/sale.js';
import {
  BENCH_PRICE,
  Cleanup,
  cli,
  freshDatabase,
  freshRedis,
  progress,
  spawnNode,
  until,
  type BenchPostgres,
} from './harness.js';
import { Monitor } from './procstat.js';

export interface EventsRun {
  concurrency: number;
  events: number;
  seconds: number;
  perSecond: number;
  /** CPU milliseconds per delivered event: the events process, and Postgres (every backend). */
  eventsCpuMs: number;
  postgresCpuMs: number;
  correct: boolean;
}

export interface EventsResults {
  events: number;
  rounds: number;
  /** Each concurrency's runs, in round order. */
  runs: { concurrency: number; rounds: EventsRun[] }[];
  /** Events/s at the default concurrency over events/s at 1, medians. */
  ratio: number;
  loadAvgAtStart: number[];
}

const SALE = 'events';
const DEFAULT_CONCURRENCY = SETTINGS.eventsConcurrency.parse(undefined, 'EVENTS_CONCURRENCY', {
  development: false,
  env: {},
});

/** A shop's receiver that only counts: each distinct webhook-id, answered 200. */
async function receiver(cleanup: Cleanup): Promise<{ url: string; ids: Set<string> }> {
  const ids = new Set<string>();
  const server: Server = createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
    req.resume();
    req.on('end', () => {
      ids.add(String(req.headers['webhook-id']));
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanup.add(() => new Promise<void>((r) => server.close(() => r())).then(() => server.closeAllConnections()));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`, ids };
}

async function runOne(pg: BenchPostgres, n: number, concurrency: number): Promise<EventsRun> {
  const cleanup = new Cleanup();
  try {
    const db = await freshDatabase(pg.url, 'bench_events');
    cleanup.add(() => db.pool.end());
    const r = await freshRedis(cleanup);
    await createSale(
      db.pool,
      r.redis,
      parseSaleInput({ id: SALE, name: SALE, stock: n, ...BENCH_PRICE, paymentWindowSeconds: 3600 }),
    );
    // Paid orders as the payment decision leaves them; their events are inserted when the clock starts.
    const ids = Array.from({ length: n }, () => newOrderId(SALE));
    await db.pool.query(
      `insert into orders (id, sale_id, user_id, qty, status, seq, purchased_at, created_at, expires_at, paid_at)
       select t.id, $1, 'buyer-' || t.seq, 1, 'paid', t.seq, now(), now(), now() + interval '1 hour', now()
       from unnest($2::text[]) with ordinality as t(id, seq)`,
      [SALE, ids],
    );
    const shop = await receiver(cleanup);
    await addEndpoint(db.pool, { url: shop.url, allowPrivate: true });
    const proc = await spawnNode(
      'events',
      cli('events'),
      {
        DATABASE_URL: db.url,
        REDIS_URL: r.url,
        OPS_PORT: '0',
        EVENTS_CONCURRENCY: String(concurrency),
        EVENTS_ALLOW_PRIVATE_ENDPOINTS: 'true',
      },
      cleanup,
    );
    const monitor = new Monitor([
      { name: 'events', pid: proc.pid },
      { name: 'postgres', pid: pg.pid, tree: true },
    ]);
    monitor.start();
    const t0 = performance.now();
    await db.pool.query(
      `insert into events (type, sale_id, order_id, payload)
       select 'order.paid', sale_id, id, '{}'::jsonb from orders where sale_id = $1 order by seq`,
      [SALE],
    );
    await until('every event delivered', 1_800_000, async () => shop.ids.size >= n, 20);
    const seconds = (performance.now() - t0) / 1000;
    const procs = monitor.stop();
    const delivered = (
      await db.pool.query<{ n: number }>("select count(*)::int as n from deliveries where status = 'delivered'")
    ).rows[0]!.n;
    // CPU % of one core over the run, as milliseconds per event.
    const msPerEvent = (name: string) =>
      Math.round((((procs.find((p) => p.name === name)?.cpuPct ?? 0) / 100) * seconds * 1000 * 100) / n) / 100;
    return {
      concurrency,
      events: n,
      seconds: Math.round(seconds * 100) / 100,
      perSecond: Math.round(n / seconds),
      eventsCpuMs: msPerEvent('events'),
      postgresCpuMs: msPerEvent('postgres'),
      // Settled rows lag the receiver by a moment; every id arrived, each once, is the claim.
      correct: shop.ids.size === n && delivered <= n,
    };
  } finally {
    await cleanup.run();
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;

export async function runEvents(pg: BenchPostgres, opts: { events: number; rounds: number }): Promise<EventsResults> {
  const loadAvgAtStart = loadavg().map((l) => Math.round(l * 100) / 100);
  const concurrencies = [1, DEFAULT_CONCURRENCY];
  const runs = concurrencies.map((concurrency) => ({ concurrency, rounds: [] as EventsRun[] }));
  for (let round = 1; round <= opts.rounds; round++) {
    // Alternated each round, so the machine's noise falls on both alike.
    for (const run of round % 2 === 1 ? runs : [...runs].reverse()) {
      progress(`events round ${round}/${opts.rounds}: ${opts.events} events, EVENTS_CONCURRENCY=${run.concurrency}`);
      const r = await runOne(pg, opts.events, run.concurrency);
      progress(`  ${r.perSecond} events/s, ${r.eventsCpuMs} ms CPU per event, correct ${r.correct}`);
      run.rounds.push(r);
    }
  }
  const rate = (i: number) => median(runs[i]!.rounds.map((r) => r.perSecond));
  return {
    events: opts.events,
    rounds: opts.rounds,
    runs,
    ratio: Math.round((rate(1) / rate(0)) * 1000) / 1000,
    loadAvgAtStart,
  };
}

const fmt = (v: number) => v.toLocaleString('en-US');

/** BENCHMARKS.md's section: events/s and CPU per event at each concurrency, and their ratio. */
export function eventsSection(e: EventsResults, mode: string): string {
  const rows = e.runs.map(({ concurrency, rounds }) => {
    const m = [...rounds].sort((a, b) => a.perSecond - b.perSecond)[Math.floor((rounds.length - 1) / 2)]!;
    return `| ${concurrency} | ${fmt(m.perSecond)} (${rounds.map((r) => fmt(r.perSecond)).join(', ')}) | ${m.eventsCpuMs} | ${m.postgresCpuMs} | ${rounds.every((r) => r.correct) ? 'yes' : 'NO'} |`;
  });
  return [
    '## Event delivery',
    '',
    `\`bench/events.ts\` (\`npm run bench -- --only events\`, ${mode} run): ${fmt(e.events)} \`order.paid\` events inserted in one statement, delivered by one \`flashsale events\` process to one endpoint, a keep-alive receiver on loopback (in the bench process) that answers 200 at once; EVENTS_CONCURRENCY 1 and the default, alternating within each of ${e.rounds} round(s), fresh servers each run. Clock: from the insert until the receiver has every webhook-id (dispatch, claim, body, signature, POST and settle included). CPU per event: the process's CPU time over the run (from /proc) over the events; the median round is shown, every round's events/s in brackets. Load average at the start ${e.loadAvgAtStart.join(' / ')}.`,
    '',
    '| EVENTS_CONCURRENCY | events/s | events process CPU ms/event | Postgres CPU ms/event | every event once |',
    '|---:|---:|---:|---:|---|',
    ...rows,
    '',
    `Default over 1: ${e.ratio.toFixed(2)}x the events/s.`,
    '',
  ].join('\n');
}
