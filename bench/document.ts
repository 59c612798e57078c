// The text of BENCHMARKS.md around the tables of report.ts: what was run, on what, how, and what
// each target's result means. Rendered from bench/results/bench.json (latest full and quick runs).
import { expiryTable, growthTable, headline, memoryTable, purchaseTable, writerTable, type BenchResults } from './report.js';
import { analysis } from './analysis.js';
import { existsSync, readFileSync } from 'node:fs';
import type { Machine } from './machine.js';

function machineSection(r: BenchResults): string {
  const m = r.machine;
  return [
    `- ${m.cores} × ${m.cpu}, ${m.memoryGb} GB, ${m.os}, Linux ${m.kernel}; Node ${m.node}.`,
    `- ${Object.entries(m.versions).map(([k, v]) => `${k} ${v}`).join(', ')}.`,
    `- Load average when the run started: ${m.loadAvgAtStart.join(' / ')} (1 / 5 / 15 min). The machine is shared: other jobs (test suites of other`,
    '  work on the same repository) ran during the run, so absolute figures move by tens of percent between runs. Every claim below is a',
    '  ratio of figures measured in the same run, designs interleaved round by round; each figure in the purchase table is the median of its rounds,',
    '  and the rounds are listed beside it.',
    `- Run ${r.at}, ${Math.round(r.seconds / 60)} min.`,
    ...(r.reruns ?? []).map((x) => `- Run again with \`--only ${x.parts.join(',')}\` at ${x.at} (load average ${x.loadAvgAtStart.join(' / ')}); those figures replace the first run's.`),
  ].join('\n');
}

const SETTINGS = `- **Load generator:** \`wrk\` (Debian's 4.1.0, C, one thread) with \`bench/wrk/purchase.lua\`: every request is
  a new buyer (\`X-User-Id: buyer-<n>\`, \`POST {"qty":1}\`), keep-alive connections, and the run ends when the
  last buyer is answered (the script takes the time from the first request to the last answer). wrk runs
  as its own process; its CPU is reported beside the servers' (a Node load generator would take far more of
  the same two cores).
- **Processes:** every server under test is its own OS process: the product as \`node dist/daemons/cli.js api\`
  (plus \`order-writer\` and \`expiry-listener\`, so the orders reach Postgres during the run), the baselines as
  small scripts under \`bench/baselines/\`. One process per server, on two cores shared with wrk, Redis and
  Postgres. CPU is the share of one core each process used during the measured run; RSS the peak
  (Postgres: the sum of its processes' PSS).
- **Auth:** every design takes the buyer from \`X-User-Id\` (the product's \`AUTH_MODE=trusted-header\`), so none
  pays for JWT verification the others skip.
- **Servers:** one embedded Postgres (\`fsync=on\`, server default \`synchronous_commit=off\`, which every connection
  made through the product's pool turns on for itself: an acknowledged commit survives a crash; \`shared_buffers=256MB\`), a fresh database
  per run; a fresh \`redis-server\` per run with the product's settings (AOF \`everysec\`, \`notify-keyspace-events Ex\`,
  \`noeviction\`).
- **Same semantics everywhere:** stock, a per-user limit of 1, and the product's 200 ms sold-out memory
  (\`SOLD_OUT_CACHE_MS\`) in every design, so no design wins by skipping work the others do. The row-lock
  design: one transaction per buyer (limit upsert, order insert, then \`UPDATE bench_stock SET stock = stock - $qty
  WHERE sale_id = $1 AND stock >= $qty\` last, so the hot row's lock is held only for that statement and the commit),
  pool of 20 like the product API. The enqueue design: the handler adds a BullMQ job and answers 202 queued; a
  worker process (concurrency 20) decides each job with the row-lock transaction and raises a sold-out flag the API
  reads every 200 ms. The hello-world ceiling: the same fastify 5 route answering 202 with no work.`;

interface JwtMeasure { perSec: number; usPerOp: number; cpuUsPerOp: number; n: number }
interface JwtSummary { perSec: number; usPerOp: number; cpuUsPerOp: number; rounds: JwtMeasure[] }
/** bench/results/jwt.json, written by `npm run bench:jwt` (bench/jwt.ts). */
export interface JwtResults {
  at: string;
  seconds: number;
  settings: { rounds: number; secondsPerRound: number; inFlight: number };
  machine: Machine;
  results: { name: string; what: string; sequential: JwtSummary; inFlight: JwtSummary }[];
}

export function jwtTable(r: JwtResults): string {
  const hs = r.results.find((x) => x.name === 'HS256')!;
  const n = (x: number) => x.toLocaleString('en-US');
  return [
    `| token | verifier | verifications/s, one at a time | µs each | CPU µs each | verifications/s, ${r.settings.inFlight} in flight | CPU µs each | CPU vs HS256 (in flight) |`,
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...r.results.map((x) => `| ${x.name} | ${x.what} | ${n(x.sequential.perSec)} | ${x.sequential.usPerOp} | ${x.sequential.cpuUsPerOp} | ${n(x.inFlight.perSec)} | ${x.inFlight.cpuUsPerOp} | ${(x.inFlight.cpuUsPerOp / hs.inFlight.cpuUsPerOp).toFixed(1)}x |`),
  ].join('\n');
}

/** The buyer-token section, when bench/results/jwt.json exists. */
function jwtSection(): string | undefined {
  const file = new URL('./results/jwt.json', import.meta.url);
  if (!existsSync(file)) return undefined;
  const r = JSON.parse(readFileSync(file, 'utf8')) as JwtResults;
  const m = r.machine;
  const hs = r.results.find((x) => x.name === 'HS256')!;
  const joseHs = r.results.find((x) => x.name === 'HS256 (jose)');
  return ['## 5. Buyer-token verification', '',
    `What one verification costs the purchase path, measured by \`npm run bench:jwt\` (\`bench/jwt.ts\`; raw figures \`bench/results/jwt.json\`): the API's own verifier, one process, ${r.settings.rounds} interleaved rounds of ${r.settings.secondsPerRound} s per figure, median shown. Run ${r.at} on ${m.cores} × ${m.cpu}, Node ${m.node}, jose ${m.versions.jose ?? '?'}, load average ${m.loadAvgAtStart.join(' / ')}. "In flight": that many verifications awaited at once, as a crowd of requests does; CPU counts every thread of the process (jose verifies through WebCrypto on libuv's thread pool).`,
    '', jwtTable(r), '',
    `HS256 keeps a hand-written node:crypto path: jose's HS256 (second row) took ${joseHs ? (joseHs.inFlight.cpuUsPerOp / hs.inFlight.cpuUsPerOp).toFixed(1) : '?'}x its CPU per verification in this run. RS256 and ES256 go through jose. Only ratios within one run mean anything on this shared machine.`, ''].join('\n');
}

export function document(saved: Partial<Record<'quick' | 'full', BenchResults>>): string {
  const r = saved.full ?? saved.quick!;
  const out: string[] = [
    '# Benchmarks',
    '',
    `Written by \`npm run bench\` (${r.mode === 'full' ? 'the full run' : 'a quick run: `npm run bench -- --quick`'}; it starts its own Postgres and Redis).`,
    'Code: `bench/` (one file per comparison, baselines in `bench/baselines/`); raw figures: `bench/results/bench.json`.',
    '',
    '## Headline',
    '',
    headline(r),
    '',
  ];
  if (saved.full && saved.quick) out.push('The same targets in the latest quick run (smaller crowd, one round):', '', headline(saved.quick), '');
  out.push('## Machine and method', '', machineSection(r), SETTINGS, '');
  if (r.purchase) {
    const p = r.purchase;
    const hello = p.crowd.find((d) => d.design === 'hello');
    const helloAll = p.allWin.find((d) => d.design === 'hello');
    out.push(
      '## 1. Purchase path',
      '',
      `Stock ${p.settings.stock.toLocaleString('en-US')}, ${p.settings.buyers.toLocaleString('en-US')} distinct buyers, concurrency ${p.settings.connections}, ${p.settings.rounds} round(s); warm-up of ${p.settings.warmupBuyers.toLocaleString('en-US')} buyers on another sale first. "settle s": from the last answer until every buyer is decided and every order is a row (the enqueue design decides after answering).`,
      '',
      purchaseTable(p.crowd, hello),
      '',
      `Every buyer wins (stock = buyers = ${p.allWinSettings.stock.toLocaleString('en-US')}): no sold-out phase, so every request does the full purchase work in every design.`,
      '',
      purchaseTable(p.allWin, helloAll),
      '',
    );
  }
  if (r.writer) out.push('## 2. Order writer', '', 'Queued winners made by the real purchase script, drained into Postgres with their expiry keys set (`SET ... PXAT` plus the deadlines index), each drain as its own process on fresh servers. Clock: from the moment the sale becomes visible to the drain until the last queued entry is gone.', '', writerTable(r.writer), '');
  if (r.expiry) {
    const e = r.expiry;
    const rows = [
      ...(e.timeliness?.phases ?? []).map((s) => ({ label: `flashsale spread, ${s.label} (timeliness bench)`, s, extra: '' })),
      ...e.spread.map((c) => ({ label: `${c.closer} spread`, s: c.summary, extra: `${c.procs.map((p) => `${p.name} ${p.cpuPct}%`).join(', ')}; ${c.redisBytesPerOrder} B/order in Redis` })),
      ...e.burst.map((c) => ({ label: `${c.closer} burst`, s: c.summary, extra: `${c.procs.map((p) => `${p.name} ${p.cpuPct}%`).join(', ')}; ${c.redisBytesPerOrder} B/order in Redis` })),
    ];
    const t = e.timeliness?.options;
    const sp = e.spread[0]?.spec;
    const b = e.burst[0]?.spec;
    out.push('## 3. Expiry', '',
      `Spread: ${t ? `\`bench/expiry-timeliness.ts\` as it is (${t.orders} orders over ${t.windowS} s, ${t.noise} unrelated TTL keys; its second phase is its own baseline with the nudger off)` : 'the timeliness bench did not run'}; BullMQ: the same scenario${sp ? ` (${sp.orders} orders over ${sp.windowS} s, ${sp.noise} unrelated TTL keys)` : ''} with one delayed job per order, closed by a worker (concurrency 100, pool 20) doing what the listener does for an order (\`bench/baselines/bullmq-closer.ts\`). Burst: ${b ? `${b.orders} orders whose deadlines fall in the same second, ${b.noise} unrelated TTL keys` : ''}; the product's \`expiry-listener\` process against the BullMQ closer. Lateness = closed_at - expires_at from Postgres's clock; ">=" marks lower bounds (orders still open at the cutoff).`,
      '', expiryTable(rows), '');
  }
  if (r.cost) {
    out.push('## 4. Cost and growth', '', `Redis memory, ${r.cost.memory.winners.toLocaleString('en-US')} winners queued by the purchase script, then drained by the writer:`, '', memoryTable(r.cost.memory), '',
      'The product alone at each concurrency, then at each ratio of buyers to stock (CPU and peak RSS of each process under that load):', '', growthTable(r.cost.growth), '');
  }
  const jwt = jwtSection();
  if (jwt) out.push(jwt);
  out.push('## Targets: what limits each, and what was changed', '', analysis(r), '');
  return `${out.join('\n')}\n`;
}
