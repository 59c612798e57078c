// The benchmark headline of README.md and docs/benchmarks.md (the same block in both): every target
// from the stored results in bench/results/*.json, each row from the newest run that measured it,
// with that run's hello-world ceiling beside it, since on this shared machine a run's absolute
// figures say as much about the machine that day as about the code. Written by `npm run bench` and
// `npm run docs:bench`; test/bench-headline.test.ts fails while a committed block differs from it.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { JwtResults } from './document.js';
import type { SavedTimeliness } from './expiry.js';
import type { IdleResults } from './idle.js';
import { table, targets, verdict, type BenchResults, type Part, type Target } from './report.js';
import { median, roomFigures, TARGET_BYTES, TARGET_LAG_MS, type RoomResults } from './room-report.js';

export type SavedBench = Partial<Record<'quick' | 'full', BenchResults>>;
/** What the headline reads; each file may be missing, as on a checkout where that bench never ran. */
export interface StoredResults {
  bench: SavedBench;
  timeliness?: SavedTimeliness;
  room?: RoomResults;
  jwt?: JwtResults;
  idle?: IdleResults;
}
export interface HeadlineRow extends Omit<Target, 'part'> {
  run: string;
  ceiling: string;
}

export const HEADLINE_DOCS = ['README.md', 'docs/benchmarks.md'].map((f) =>
  fileURLToPath(new URL(`../${f}`, import.meta.url)),
);
const BEGIN =
  '<!-- bench-headline:start: written by `npm run docs:bench` from bench/results/*.json (bench/headline.ts); edit it there -->';
const END = '<!-- bench-headline:end -->';

// The rows in the order shown. Left out: the bench run's own expiry spread (its scale follows --quick;
// the expiry-target row is the target's own scenario) and the memory of a sale without an end
// (issue 22's target is for a sale with one).
const ROWS = [
  'crowd-ceiling',
  'all-win-ceiling',
  'p99-crowd',
  'p99-all-win',
  'correct',
  'bullmq',
  'row-lock',
  'row-lock-no-memory',
  'selling-row-lock',
  'selling-bullmq',
  'pm2-crowd',
  'pm2-all-win',
  'writer',
  'writer-vs-one',
  'memory',
  'expiry-target',
  'expiry-burst',
  'expiry-early',
  'closes-spread',
  'closes-burst',
  'room-bytes',
  'room-fanout',
  'room-join',
  'room-pass',
  'jwt',
  'idle',
];

const n = (v: number) => Math.round(v).toLocaleString('en-US');
const day = (at: string) => at.slice(0, 10);

function read<T>(name: string): T | undefined {
  const file = new URL(`./results/${name}`, import.meta.url);
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as T) : undefined;
}

export function loadResults(bench: SavedBench = read<SavedBench>('bench.json') ?? {}): StoredResults {
  return {
    bench,
    timeliness: read('expiry-timeliness.json'),
    room: read('room.json'),
    jwt: read('jwt.json'),
    idle: read('idle.json'),
  };
}

/** When a part of a run was last measured: the latest `--only` rerun that ran it, or the run itself. */
export function measuredAt(r: BenchResults, part: Part): string {
  return [...(r.reruns ?? [])].reverse().find((x) => x.parts.includes(part))?.at ?? r.at;
}

/** The hello-world route's req/s under that run's sold-out crowd, dated when taken on another day than the row's figure. */
function ceiling(r: BenchResults, at: string): string {
  const hello = r.purchase?.crowd.find((d) => d.design === 'hello');
  if (!hello) return '-';
  const taken = day(measuredAt(r, 'purchase'));
  return `${n(hello.load.rps)} req/s${taken === day(at) ? '' : ` (${taken})`}`;
}

/** Each target of bench.json from the run whose part holding it was measured last (a tie keeps the full run). */
function benchRows(saved: SavedBench): HeadlineRow[] {
  const newest = new Map<string, HeadlineRow & { at: string }>();
  for (const r of [saved.full, saved.quick]) {
    for (const { part, ...t } of r ? targets(r) : []) {
      const at = measuredAt(r!, part);
      const held = newest.get(t.key);
      if (!held || Date.parse(at) > Date.parse(held.at))
        newest.set(t.key, { ...t, at, run: `${r!.mode} run, ${day(at)}`, ceiling: ceiling(r!, at) });
    }
  }
  return [...newest.values()];
}

const other = (
  key: string,
  what: string,
  target: string,
  measured: string,
  met: boolean | null,
  run: string,
): HeadlineRow => ({ key, what, target, measured, met, run, ceiling: '-' });

/** The full preset is the scenario the expiry target names (bench/expiry-timeliness.ts); quick and custom runs are smaller. */
function timelinessRow(saved?: SavedTimeliness): HeadlineRow[] {
  const run = saved?.full;
  const s = run?.phases[0];
  if (!run || !s) return [];
  const o = run.options;
  const p99 = s.lateMs.p99;
  return [
    other(
      'expiry-target',
      `expiry lateness p99, ${n(o.orders ?? s.orders)} orders due over ${o.windowS ?? s.windowS} s among ${n(o.noise ?? 0)} other TTL keys`,
      '<= 1 s, 0 early',
      `${p99 ?? 'n/a'} ms (max ${s.lateMs.max ?? 'n/a'} ms; ${n(s.closed)} of ${n(s.orders)} closed, ${s.closedEarly} early)`,
      p99 !== null && p99 <= 1000 && !s.lowerBound && s.closedEarly === 0,
      `\`bench:expiry\`, ${day(run.at)}`,
    ),
  ];
}

function roomRows(r?: RoomResults): HeadlineRow[] {
  if (!r) return [];
  const f = roomFigures(r);
  const run = (at: string) => `\`bench:room\` (${r.mode}), ${day(at)}`;
  const widths = r.settings.widths.filter((w) => f.joins(w).runs.length > 0);
  const bytes = widths.map((w) => f.joins(w).bytes);
  const join = widths.length ? f.joins(widths[0]!) : undefined;
  const worst = f.big ? Math.max(...f.big.ticks.map((t) => t.lagMs)) : 0;
  return [
    ...(bytes.length
      ? [
          other(
            'room-bytes',
            `Redis memory per waiting buyer, ${widths.join('- / ')}-character ids`,
            `<= ${TARGET_BYTES} B`,
            bytes.map((b) => `${n(b)} B`).join(' / '),
            Math.max(...bytes) <= TARGET_BYTES,
            run(r.at),
          ),
        ]
      : []),
    ...(f.big
      ? [
          other(
            'room-fanout',
            `one admission tick reaches the last of ${n(f.big.streams)} open streams (${f.big.apis} API processes), median of ${f.big.ticks.length} ticks`,
            `<= ${n(TARGET_LAG_MS)} ms`,
            `${n(f.big.lagMs)} ms (worst ${n(worst)} ms)`,
            f.big.lagMs <= TARGET_LAG_MS,
            run(r.fanoutRun?.at ?? r.at),
          ),
        ]
      : []),
    ...(join?.cpuVsPurchase.length
      ? [
          other(
            'room-join',
            `API CPU per join of the waiting room (${widths[0]}-character ids) / per winning purchase`,
            '',
            `${n(join.cpuUs)} µs, ${median(join.cpuVsPurchase).toFixed(2)}x`,
            null,
            run(r.at),
          ),
        ]
      : []),
    ...(f.rpsRatio.length
      ? [
          other(
            'room-pass',
            'a purchase with a waiting-room pass / without: API CPU, purchases/s',
            '',
            `+${n(f.cpuPass - f.cpuPlain)} µs, ${median(f.rpsRatio).toFixed(2)}x`,
            null,
            run(r.at),
          ),
        ]
      : []),
  ];
}

function jwtRow(r?: JwtResults): HeadlineRow[] {
  // jose's own HS256 is the section's reference, not a verifier the API uses.
  const used = r?.results.filter((x) => x.name !== 'HS256 (jose)') ?? [];
  return r && used.length
    ? [
        other(
          'jwt',
          `buyer-token verification, CPU each with ${r.settings.inFlight} in flight ("repeat": the same token again, from the cache)`,
          '',
          used.map((x) => `${x.name} ${x.inFlight.cpuUsPerOp.toFixed(1)} µs`).join(', '),
          null,
          `\`bench:jwt\`, ${day(r.at)}`,
        ),
      ]
    : [];
}

function idleRow(r?: IdleResults): HeadlineRow[] {
  const [, before, after] = r?.phases ?? [];
  if (!r || !before || !after) return [];
  const cpu = before.cpu.map(
    (c) => `${c.name} ${c.cpuPct} / ${after.cpu.find((a) => a.name === c.name)?.cpuPct ?? '?'}%`,
  );
  return [
    other(
      'idle',
      `an idle stack beside one live sale with ${n(r.settings.pastSales)} ended sales unsettled / settled by the replay: % of a core, purchase-to-row lag p50`,
      '',
      `${cpu.join(', ')}; lag ${n(before.lag.p50Ms)} / ${n(after.lag.p50Ms)} ms`,
      null,
      `\`bench:idle\`, ${day(r.at)}`,
    ),
  ];
}

export function headlineRows(stored: StoredResults): HeadlineRow[] {
  const all = [
    ...benchRows(stored.bench),
    ...timelinessRow(stored.timeliness),
    ...roomRows(stored.room),
    ...jwtRow(stored.jwt),
    ...idleRow(stored.idle),
  ];
  return ROWS.flatMap((key) => all.filter((row) => row.key === key));
}

export function headlineTable(stored: StoredResults = loadResults()): string {
  return table(
    ['what is measured', 'figure', 'target', 'result', 'measured in', 'hello-world ceiling of that run'],
    headlineRows(stored).map((r) => [r.what, r.measured, r.target, verdict(r.met), r.run, r.ceiling]),
    ['---', '---', '---:', '---', '---', '---:'],
  );
}

/** The document with the block between its markers replaced by `headline`. */
export function withHeadline(doc: string, headline: string): string {
  const begin = doc.indexOf(BEGIN);
  const end = doc.indexOf(END);
  if (begin < 0 || end < begin)
    throw new Error(`the benchmark headline has lost its markers: put back ${BEGIN} and ${END} around the table`);
  return `${doc.slice(0, begin + BEGIN.length)}\n${headline}\n${doc.slice(end)}`;
}

/** Writes the block into README.md and docs/benchmarks.md; returns the files it changed. */
export function writeHeadline(stored: StoredResults = loadResults()): string[] {
  const headline = headlineTable(stored);
  return HEADLINE_DOCS.filter((file) => {
    const doc = readFileSync(file, 'utf8');
    const next = withHeadline(doc, headline);
    if (next !== doc) writeFileSync(file, next);
    return next !== doc;
  });
}
