// BENCHMARKS.md from the results of `npm run bench` (bench/results/bench.json holds the latest
// full and quick runs): the machine, the settings, the headline targets, then every figure.
import type { VariantResults } from './variants.js';
import type { ClusterResults } from './cluster.js';
import type { CaseResult, TimelinessRun } from './expiry.js';
import type { GrowthRow, MemoryResult } from './cost.js';
import type { Machine } from './machine.js';
import type { DesignResult, PurchaseSettings } from './purchase.js';
import type { ProfileResults } from './profiles.js';
import type { RateLimitResults } from './rate-limit.js';
import type { Summary } from './stats.js';
import type { WholeMachineResults } from './whole-machine.js';
import type { WriterResult } from './writer.js';
import type { EventsResults } from './events.js';
import type { OutboxResults } from './outbox.js';

export interface BenchResults {
  mode: 'quick' | 'full';
  at: string;
  seconds: number;
  machine: Machine;
  /** Parts run again later with --only (their figures replace the first run's). */
  reruns?: { parts: string[]; at: string; seconds: number; loadAvgAtStart: number[] }[];
  purchase?: {
    settings: PurchaseSettings;
    crowd: DesignResult[];
    allWin: DesignResult[];
    allWinSettings: PurchaseSettings;
  };
  writer?: WriterResult[];
  expiry?: { timeliness: TimelinessRun | null; spread: CaseResult[]; burst: CaseResult[] };
  /** memory: a sale without end; memoryWithEnd (absent in older results): the same with an end. */
  cost?: { memory: MemoryResult; memoryWithEnd?: MemoryResult; growth: GrowthRow[] };
  /** Replication (REDIS_MIN_REPLICAS_ACK) and Redis Cluster: bench/cluster.ts. */
  cluster?: ClusterResults;
  /** What the purchase rate limits cost: bench/rate-limit.ts. */
  rateLimit?: RateLimitResults;
  /** The PM2 deployment (API_INSTANCES = cores) against the hello-world ceiling under PM2: bench/whole-machine.ts. */
  wholeMachine?: WholeMachineResults;
  /** The top of each profile: bench/profiles.ts. */
  profile?: ProfileResults;
  /** A sale of 12 variants against a sale of one: bench/variants.ts. */
  variants?: VariantResults;
  /** Delivery of outbound events at concurrency 1 and the default: bench/events.ts. */
  events?: EventsResults;
  /** The writer's batch insert with and without its event rows: bench/outbox.ts. */
  outbox?: OutboxResults;
}

const n = (v: number) => Math.round(v).toLocaleString('en-US');
const x = (v: number) => `${v.toFixed(2)}x`;
const pct = (v: number) => `${Math.round(v * 100)}%`;
const row = (cells: (string | number)[]) => `| ${cells.join(' | ')} |`;
export const table = (head: string[], rows: (string | number)[][], align?: string[]) =>
  [row(head), row(align ?? head.map((_, i) => (i === 0 ? '---' : '---:'))), ...rows.map(row)].join('\n');

/** The parts of a run, as `--only` names them: a target's figure is as old as its part's last measurement. */
export type Part = 'purchase' | 'writer' | 'expiry' | 'cost' | 'machine';
/** key: the same row in every run, whatever its figures say in `what` (the README's headline picks by it). */
export interface Target {
  key: string;
  part: Part;
  what: string;
  target: string;
  measured: string;
  met: boolean | null;
}

/**
 * a's throughput over b's, round by round: the designs of a round ran minutes apart, so each
 * round's ratio shares its machine noise; the median of those is the figure claimed.
 */
export function roundRatio(a: { rounds: number[] }, b: { rounds: number[] }): { median: number; each: number[] } {
  const each = a.rounds.map((v, i) => v / (b.rounds[i] ?? v));
  const sorted = [...each].sort((p, q) => p - q);
  return { median: sorted[Math.floor((sorted.length - 1) / 2)]!, each };
}

function byDesign(rs: DesignResult[], d: string): DesignResult | undefined {
  return rs.find((r) => r.design === d);
}

/** "55% (rounds 54%, 57%; median req/s 20,000 / 36,000)": a against b, round by round. */
const vs = (a: DesignResult, b: DesignResult, f: (v: number) => string) => {
  const r = roundRatio(a, b);
  return `${f(r.median)} (rounds ${r.each.map(f).join(', ')}; median req/s ${n(a.load.rps)} / ${n(b.load.rps)})`;
};

export function targets(r: BenchResults): Target[] {
  const out: Target[] = [];
  const p = r.purchase;
  if (p) {
    const [fs, hello, lock, queue] = ['flashsale', 'hello', 'rowlock', 'enqueue'].map((d) => byDesign(p.crowd, d));
    if (fs && hello)
      out.push({
        key: 'crowd-ceiling',
        part: 'purchase',
        what: 'purchase throughput, sold-out crowd / hello-world ceiling',
        target: '>= 85%',
        measured: vs(fs, hello, pct),
        met: roundRatio(fs, hello).median >= 0.85,
      });
    const [fsAll, helloAll] = ['flashsale', 'hello'].map((d) => byDesign(p.allWin, d));
    if (fsAll && helloAll)
      out.push({
        key: 'all-win-ceiling',
        part: 'purchase',
        what: 'purchase throughput, every buyer wins (writer and listener running) / hello-world ceiling',
        target: '>= 50%',
        measured: vs(fsAll, helloAll, pct),
        met: roundRatio(fsAll, helloAll).median >= 0.5,
      });
    if (fs && lock)
      out.push({
        key: 'row-lock',
        part: 'purchase',
        what: 'purchase throughput / Postgres row lock',
        target: '>= 10x',
        measured: vs(fs, lock, x),
        met: roundRatio(fs, lock).median >= 10,
      });
    if (fs && queue)
      out.push({
        key: 'bullmq',
        part: 'purchase',
        what: 'purchase throughput / BullMQ job per request',
        target: '>= 2x',
        measured: vs(fs, queue, x),
        met: roundRatio(fs, queue).median >= 2,
      });
    const fsNo = byDesign(p.crowd, 'flashsale-nomem');
    const lockNo = byDesign(p.crowd, 'rowlock-nomem');
    if (fsNo && lockNo)
      out.push({
        key: 'row-lock-no-memory',
        part: 'purchase',
        what: 'the same, both without the sold-out memory',
        target: '',
        measured: vs(fsNo, lockNo, x),
        met: null,
      });
    const sell = (d?: DesignResult) =>
      d?.outcome && d.outcome.selloutS > 0 ? d.outcome.orders / d.outcome.selloutS : 0;
    if (fs && lock && sell(lock) > 0)
      out.push({
        key: 'selling-row-lock',
        part: 'purchase',
        what: 'orders/s while the stock sells: flashsale / row lock',
        target: '',
        measured: `${x(sell(fs) / sell(lock))} (sold out in ${fs.outcome!.selloutS} s vs ${lock.outcome!.selloutS} s)`,
        met: null,
      });
    if (fs && queue && sell(queue) > 0)
      out.push({
        key: 'selling-bullmq',
        part: 'purchase',
        what: 'orders/s while the stock sells: flashsale / BullMQ',
        target: '',
        measured: `${x(sell(fs) / sell(queue))} (sold out in ${fs.outcome!.selloutS} s vs ${queue.outcome!.selloutS} s)`,
        met: null,
      });
    for (const [d, what, c, key] of [
      [fs, 'sold-out crowd', p.settings.connections, 'crowd'],
      [fsAll, 'every buyer wins', p.allWinSettings.connections, 'all-win'],
    ] as const) {
      if (d)
        out.push({
          key: `p99-${key}`,
          part: 'purchase',
          what: `purchase p99 at concurrency ${c}, ${what}`,
          target: '<= 50 ms',
          measured: `${d.load.latencyMs.p99} ms (p50 ${d.load.latencyMs.p50} ms)`,
          met: d.load.latencyMs.p99 <= 50,
        });
    }
    const all = [...p.crowd, ...p.allWin].filter((d) => d.correct !== null);
    out.push({
      key: 'correct',
      part: 'purchase',
      what: 'orders = stock, no oversell, <= 1 per buyer (every design, every run)',
      target: 'all',
      measured: all.every((d) => d.correct)
        ? 'all correct'
        : `wrong: ${all
            .filter((d) => !d.correct)
            .map((d) => d.design)
            .join(', ')}`,
      met: all.every((d) => d.correct),
    });
  }
  const m = r.wholeMachine;
  for (const [c, what, key] of m
    ? ([
        [m.crowd, 'sold-out crowd', 'crowd'],
        [m.allWin, 'every buyer wins', 'all-win'],
      ] as const)
    : []) {
    const [fs, hello] = ['pm2-flashsale', 'pm2-hello'].map((d) => byDesign(c.designs, d));
    if (fs && hello)
      out.push({
        key: `pm2-${key}`,
        part: 'machine',
        what: `whole machine under PM2 (${m!.cores} API instances), ${what} / hello-world under PM2`,
        target: '',
        measured: `${vs(fs, hello, pct)}${fs.correct === false ? '; **orders wrong**' : ''}`,
        met: null,
      });
  }
  const w = r.writer;
  // The product's defaults: batch 1000, WRITER_CONCURRENCY 2 (results from before it existed had one in flight).
  const main =
    w?.find((v) => v.batchSize === 1000 && (v.concurrency ?? 2) === 2) ?? w?.find((v) => v.batchSize !== null);
  const one = w?.find((v) => v.batchSize === null);
  const inFlight = main?.concurrency ? `, ${main.concurrency} in flight` : '';
  if (main)
    out.push({
      key: 'writer',
      part: 'writer',
      what: `order writer drain (batch ${main.batchSize}${inFlight})`,
      target: '>= 60,000 orders/s',
      measured: `${n(main.perSecond)} orders/s`,
      met: main.perSecond >= 60_000,
    });
  if (main && one) {
    const r = roundRatio({ rounds: main.rounds ?? [main.perSecond] }, { rounds: one.rounds ?? [one.perSecond] });
    out.push({
      key: 'writer-vs-one',
      part: 'writer',
      what: 'order writer / one-at-a-time drain',
      target: '>= 20x',
      measured: `${x(r.median)} (rounds ${r.each.map(x).join(', ')}; median ${n(main.perSecond)} / ${n(one.perSecond)} orders/s)`,
      met: r.median >= 20,
    });
  }
  const mem = r.cost?.memory;
  const timed = r.cost?.memoryWithEnd;
  if (mem && timed) {
    out.push({
      key: 'memory',
      part: 'cost',
      what: 'Redis memory per pending order',
      target: '<= 400 B',
      measured: `${n(timed.bytesPerPendingOrder)} B with an end, ${n(mem.bytesPerPendingOrder)} B without (per queued winner ${n(timed.bytesPerQueuedWinner)} B, ${n(mem.bytesPerQueuedWinner)} B)`,
      // Issue 22's target is for a sale with an end, the one that keeps a deadline per order.
      met: timed.bytesPerPendingOrder <= 400,
    });
  } else if (mem) {
    out.push({
      key: 'memory-without-end',
      part: 'cost',
      what: 'Redis memory per pending order',
      target: '<= 400 B',
      measured: `${n(mem.bytesPerPendingOrder)} B (per queued winner ${n(mem.bytesPerQueuedWinner)} B)`,
      met: mem.bytesPerPendingOrder <= 400,
    });
  }
  const e = r.expiry;
  if (e) {
    const nudged = e.timeliness?.phases[0];
    if (nudged)
      out.push({
        key: 'expiry-spread',
        part: 'expiry',
        what: 'expiry lateness p99, spread (timeliness bench)',
        target: '<= 1 s',
        measured: `${nudged.lateMs.p99} ms`,
        met: (nudged.lateMs.p99 ?? Infinity) <= 1000 && !nudged.lowerBound,
      });
    const fsBurst = e.burst.find((c) => c.closer === 'flashsale');
    const mqBurst = e.burst.find((c) => c.closer === 'bullmq');
    if (fsBurst)
      out.push({
        key: 'expiry-burst',
        part: 'expiry',
        what: `expiry lateness p99, burst (${n(fsBurst.spec.orders)} in one second)`,
        target: '<= 1 s',
        measured: `${fsBurst.summary.lateMs.p99} ms`,
        met: (fsBurst.summary.lateMs.p99 ?? Infinity) <= 1000 && !fsBurst.summary.lowerBound,
      });
    const all: Summary[] = [
      ...(e.timeliness?.phases.slice(0, 1) ?? []),
      ...e.spread.map((c) => c.summary),
      ...e.burst.map((c) => c.summary),
    ];
    out.push({
      key: 'expiry-early',
      part: 'expiry',
      what: 'orders closed before their deadline (every case)',
      target: '0',
      measured: String(all.reduce((s, v) => s + v.closedEarly, 0)),
      met: all.every((v) => v.closedEarly === 0),
    });
    const mqSpread = e.spread.find((c) => c.closer === 'bullmq');
    if (nudged && mqSpread)
      out.push({
        key: 'closes-spread',
        part: 'expiry',
        what: 'closes/s, spread: flashsale / BullMQ',
        target: '>= 1x',
        measured: `${x(nudged.closesPerSecond.mean / Math.max(1, mqSpread.summary.closesPerSecond.mean))} (${nudged.closesPerSecond.mean} / ${mqSpread.summary.closesPerSecond.mean}; arrival-bound)`,
        met: nudged.closesPerSecond.mean >= mqSpread.summary.closesPerSecond.mean * 0.98,
      });
    if (fsBurst && mqBurst)
      out.push({
        key: 'closes-burst',
        part: 'expiry',
        what: 'closes/s, burst: flashsale / BullMQ',
        target: '>= 1x',
        measured: `${x(fsBurst.summary.closesPerSecond.mean / Math.max(1, mqBurst.summary.closesPerSecond.mean))} (${n(fsBurst.summary.closesPerSecond.mean)} / ${n(mqBurst.summary.closesPerSecond.mean)})`,
        met: fsBurst.summary.closesPerSecond.mean >= mqBurst.summary.closesPerSecond.mean,
      });
  }
  return out;
}

/** A target's result in words, from `met` as targets() computed it. */
export const verdict = (met: boolean | null) => (met === null ? '(context)' : met ? 'met' : '**missed**');

export function headline(r: BenchResults): string {
  return table(
    ['', 'target', `measured (${r.mode} run)`, ''],
    targets(r).map((t) => [t.what, t.target, t.measured, verdict(t.met)]),
    ['---', '---:', '---', '---'],
  );
}

const procs = (d: { procs: { name: string; cpuPct: number; rssMaxMb: number }[] }) =>
  d.procs.map((p) => `${p.name} ${p.cpuPct}% / ${p.rssMaxMb} MB`).join(', ');

export function purchaseTable(rs: DesignResult[], hello?: DesignResult): string {
  const o = (d: DesignResult) => d.outcome;
  return table(
    [
      'design',
      'req/s',
      'vs ceiling',
      'p50 ms',
      'p99 ms',
      'max ms',
      '2xx',
      'refused',
      'orders',
      'sold out in s',
      'orders/s selling',
      'correct',
      'settle s',
      'rounds req/s',
      'CPU % of a core / peak RSS',
    ],
    rs.map((d) => [
      d.label,
      n(d.load.rps),
      hello ? pct(d.load.rps / hello.load.rps) : '',
      d.load.latencyMs.p50,
      d.load.latencyMs.p99,
      d.load.latencyMs.max,
      n(d.accepted),
      n(d.load.answered - d.accepted),
      o(d) ? n(o(d)!.orders) : '-',
      o(d) ? o(d)!.selloutS : '-',
      o(d) && o(d)!.selloutS > 0 ? n(o(d)!.orders / o(d)!.selloutS) : '-',
      d.correct === null ? '-' : d.correct ? 'yes' : '**no**',
      d.settleS,
      d.rounds.map(n).join(' / '),
      procs(d.load),
    ]),
  );
}

export function writerTable(ws: WriterResult[]): string {
  return table(
    [
      'drain',
      'orders',
      'seconds',
      'orders/s',
      'rounds orders/s',
      'expiry keys',
      'correct',
      'load avg',
      'CPU % of a core / peak RSS',
    ],
    ws.map((w) => [
      w.label,
      n(w.orders),
      w.seconds,
      n(w.perSecond),
      (w.rounds ?? []).map(n).join(' / '),
      n(w.expiryKeys),
      w.correct ? 'yes' : '**no**',
      w.loadAvg ?? '',
      procs(w),
    ]),
  );
}

export function expiryTable(rows: { label: string; s: Summary; extra: string }[]): string {
  const f = (v: number | null, lb: boolean) => (v === null ? 'n/a' : `${lb ? '>= ' : ''}${n(v)}`);
  return table(
    [
      'case',
      'orders',
      'closed',
      'early',
      'p50 ms',
      'p99 ms',
      'max ms',
      'stock back p99 ms',
      'closes/s mean / peak',
      'cost',
    ],
    rows.map(({ label, s, extra }) => [
      label,
      n(s.orders),
      n(s.closed),
      s.closedEarly,
      f(s.lateMs.p50, s.lowerBound),
      f(s.lateMs.p99, s.lowerBound),
      f(s.lateMs.max, s.lowerBound),
      f(s.stockBackP99Ms, s.restored < s.orders),
      `${n(s.closesPerSecond.mean)} / ${n(s.closesPerSecond.peak)}`,
      extra,
    ]),
  );
}

export function growthTable(rows: GrowthRow[]): string {
  return table(
    [
      'axis',
      'value',
      'stock',
      'buyers',
      'connections',
      'req/s',
      'p50 ms',
      'p99 ms',
      'p99.9 ms',
      'max ms',
      'statuses',
      'orders',
      'correct',
      'CPU % / peak RSS',
    ],
    rows.map((g) => [
      g.axis,
      g.value,
      n(g.stock),
      n(g.buyers),
      g.connections,
      n(g.result.load.rps),
      g.result.load.latencyMs.p50,
      g.result.load.latencyMs.p99,
      g.result.load.latencyMs.p999,
      g.result.load.latencyMs.max,
      Object.entries(g.result.load.statuses)
        .map(([k, v]) => `${k}: ${n(v)}`)
        .join(', '),
      g.result.outcome ? n(g.result.outcome.orders) : '-',
      g.result.correct ? 'yes' : '**no**',
      procs(g.result.load),
    ]),
  );
}

/** One column per sale measured: without end, and with one where the results have it. */
export function memoryTable(m: MemoryResult, withEnd?: MemoryResult): string {
  const runs = withEnd ? [m, withEnd] : [m];
  const keys = [...new Set(runs.flatMap((r) => Object.keys(r.keys)))];
  return table(
    ['what', ...(withEnd ? ['sale without end, bytes', 'sale with an end, bytes'] : ['bytes'])],
    [
      ['per queued winner (INFO used_memory delta)', ...runs.map((r) => n(r.bytesPerQueuedWinner))],
      ['per pending order, after the writer (INFO used_memory delta)', ...runs.map((r) => n(r.bytesPerPendingOrder))],
      ...keys.map((k) => [`${k} (MEMORY USAGE)`, ...runs.map((r) => (r.keys[k] === undefined ? '-' : n(r.keys[k])))]),
    ],
  );
}
