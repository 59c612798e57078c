// The text of BENCHMARKS.md around the tables of report.ts: what was run, on what, how, and what
// each target's result means. Rendered from bench/results/bench.json (latest full and quick runs).
import {
  expiryTable,
  growthTable,
  headline,
  memoryTable,
  purchaseTable,
  roundRatio,
  table,
  writerTable,
  type BenchResults,
} from './report.js';
import type { ClusterResults, Measured } from './cluster.js';
import { analysis } from './analysis.js';
import { eventsSection } from './events.js';
import { outboxSection } from './outbox.js';
import type { ProfileResults } from './profiles.js';
import { rateLimitSection } from './rate-limit.js';
import { roomSection } from './room-report.js';
import { variantsSection } from './variants.js';
import { wholeMachineSection } from './whole-machine.js';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { loadResults, writeHeadline, type SavedBench } from './headline.js';
import type { Machine } from './machine.js';

function machineSection(r: BenchResults): string {
  const m = r.machine;
  return [
    `- ${m.cores} × ${m.cpu}, ${m.memoryGb} GB, ${m.os}, Linux ${m.kernel}; Node ${m.node}.`,
    `- ${Object.entries(m.versions)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}.`,
    `- Load average when the run started: ${m.loadAvgAtStart.join(' / ')} (1 / 5 / 15 min). The machine is shared: other jobs (test suites of other`,
    '  work on the same repository) ran during the run, so absolute figures move by tens of percent between runs. Every claim below is a',
    '  ratio of figures measured in the same run, designs interleaved round by round; each figure in the purchase table is the median of its rounds,',
    '  and the rounds are listed beside it.',
    `- Run ${r.at}, ${Math.round(r.seconds / 60)} min.`,
    ...(r.reruns ?? []).map(
      (x) =>
        `- Run again with \`--only ${x.parts.join(',')}\` at ${x.at} (load average ${x.loadAvgAtStart.join(' / ')}); the figures of those parts are from then.`,
    ),
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
  per run; a fresh \`redis-server\` per run with the product's settings (AOF \`always\`, \`notify-keyspace-events Ex\`,
  \`noeviction\`).
- **Same semantics everywhere:** stock, a per-user limit of 1, and the product's 200 ms sold-out memory
  (\`SOLD_OUT_CACHE_MS\`) in every design, so no design wins by skipping work the others do. The row-lock
  design: one transaction per buyer (limit upsert, order insert, then \`UPDATE bench_stock SET stock = stock - $qty
  WHERE sale_id = $1 AND stock >= $qty\` last, so the hot row's lock is held only for that statement and the commit),
  pool of 20 like the product API. The enqueue design: the handler adds a BullMQ job and answers 202 queued; a
  worker process (concurrency 20) decides each job with the row-lock transaction and raises a sold-out flag the API
  reads every 200 ms. The hello-world ceiling: the same fastify 5 route answering 202 with no work.`;

interface JwtMeasure {
  perSec: number;
  usPerOp: number;
  cpuUsPerOp: number;
  n: number;
}
interface JwtSummary {
  perSec: number;
  usPerOp: number;
  cpuUsPerOp: number;
  rounds: JwtMeasure[];
}
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
    ...r.results.map(
      (x) =>
        `| ${x.name} | ${x.what} | ${n(x.sequential.perSec)} | ${x.sequential.usPerOp} | ${x.sequential.cpuUsPerOp} | ${n(x.inFlight.perSec)} | ${x.inFlight.cpuUsPerOp} | ${(x.inFlight.cpuUsPerOp / hs.inFlight.cpuUsPerOp).toFixed(1)}x |`,
    ),
  ].join('\n');
}

/** bench/results/challenge.json, written by `npm run bench:challenge` (bench/challenge.ts). */
export interface ChallengeResults {
  at: string;
  settings: { rounds: number; secondsPerRound: number; complexity: number };
  machine: Machine;
  results: {
    name: string;
    what: string;
    perSec: number;
    cpuUsPerOp: number;
    rounds: { perSec: number; cpuUsPerOp: number }[];
  }[];
  solveMs: { median: number; max: number; all: number[] };
}

export function challengeTable(r: ChallengeResults): string {
  const n = (x: number) => x.toLocaleString('en-US');
  return [
    '| step | per second, one process | CPU µs each | rounds per second |',
    '| --- | ---: | ---: | ---: |',
    ...r.results.map(
      (x) => `| ${x.what} | ${n(x.perSec)} | ${x.cpuUsPerOp} | ${x.rounds.map((m) => n(m.perSec)).join(' / ')} |`,
    ),
    `| the buyer solving a challenge of complexity ${n(r.settings.complexity)} (Node, one thread) | | | median ${n(r.solveMs.median)} ms, max ${n(r.solveMs.max)} ms of ${r.solveMs.all.length} |`,
  ].join('\n');
}

/** The proof-of-work section, when bench/results/challenge.json exists: its check against a winning purchase's CPU from section 1. */
function challengeSection(purchase: BenchResults['purchase'] | undefined): string | undefined {
  const file = new URL('./results/challenge.json', import.meta.url);
  if (!existsSync(file)) return undefined;
  const r = JSON.parse(readFileSync(file, 'utf8')) as ChallengeResults;
  const m = r.machine;
  const check = r.results.find((x) => x.name === 'check')!;
  const won = purchase?.allWin.find((d) => d.design === 'flashsale');
  const serverCpu = won?.load.procs.find((p) => p.name === 'server')?.cpuPct;
  const perPurchase = won && serverCpu ? ((serverCpu / 100) * 1e6) / won.load.rps : undefined;
  return [
    '## 8. Proof-of-work challenge',
    '',
    `What a sale with \`challenge: pow\` costs, measured by \`npm run bench:challenge\` (\`bench/challenge.ts\`; raw figures \`bench/results/challenge.json\`): shared/purchase/challenge.ts itself in one process against a local redis-server, ${r.settings.rounds} interleaved rounds of ${r.settings.secondsPerRound} s, median shown. Run ${r.at} on ${m.cores} × ${m.cpu}, Node ${m.node}, load average ${m.loadAvgAtStart.join(' / ')}.`,
    '',
    challengeTable(r),
    '',
    perPurchase
      ? `On the purchase path only the token check runs: ${check.cpuUsPerOp} µs of CPU against about ${Math.round(perPurchase)} µs for a winning purchase in the API process (section 1: ${Math.round(serverCpu!)}% of a core at ${won!.load.rps.toLocaleString('en-US')} purchases/s), about ${((check.cpuUsPerOp / perPurchase) * 100).toFixed(1)}%; purchase.lua reads one more field of the sale's hash. Issuing and exchanging run once per buyer (the buyer's page solves as soon as it knows the buyer, while the sale is upcoming too, and exchanges at the click), at about 300 µs of CPU each.`
      : `On the purchase path only the token check runs: ${check.cpuUsPerOp} µs of CPU per purchase.`,
    '',
  ].join('\n');
}

/** The top of each profile (bench/profiles.ts). */
function profileSection(p: ProfileResults, mode: string): string {
  const shares = (head: string[], rows: [string, number][]) =>
    table(
      head,
      rows.map(([name, pct]) => [name.replace(/\|/g, '\\|'), `${pct.toFixed(1)}%`]),
    );
  return [
    '## 10. Profiles',
    '',
    `\`bench/profiles.ts\` (${mode} run; \`npm run bench -- --only profile\`): the product as in section 1, every buyer wins (${p.crowd.buyers.toLocaleString('en-US')} buyers, concurrency ${p.crowd.connections}, ${p.crowd.rps.toLocaleString('en-US')} purchases/s with the profiler on).`,
    '',
    ...(p.api
      ? [
          `**The API process** (\`node --cpu-prof\`, ${p.api.busyS} s busy), share of its busy CPU by package, then the top functions by self time:`,
          '',
          shares(['package', 'share'], p.api.byPackage),
          '',
          shares(['function', 'self'], p.api.byFunction),
          '',
        ]
      : ['The API profile was not written.', '']),
    '**Redis** (`INFO commandstats` over the crowd and its drain; commands a script runs count on their own line as well as in its `evalsha`):',
    '',
    table(
      ['command', 'calls', 'µs per call', 'µs total'],
      p.commandstats.map((c) => [
        c.command,
        c.calls.toLocaleString('en-US'),
        c.usecPerCall,
        c.usecTotal.toLocaleString('en-US'),
      ]),
    ),
    '',
    '**Postgres** (`EXPLAIN (ANALYZE, BUFFERS)`, each inside a transaction rolled back):',
    '',
    ...p.explain.flatMap((e) => [`${e.what}:`, '', '```', ...e.plan, '```', '']),
  ].join('\n');
}

/** How much cheaper a repeat of a JWKS token is than its first verification, when the run measured both. */
function repeats(r: JwtResults): string {
  const pairs = ['RS256', 'ES256'].flatMap((alg) => {
    const first = r.results.find((x) => x.name === alg);
    const again = r.results.find((x) => x.name === `${alg} repeat`);
    return first && again ? [`${alg} ${(first.inFlight.cpuUsPerOp / again.inFlight.cpuUsPerOp).toFixed(0)}x`] : [];
  });
  return pairs.length
    ? ` on a token's first verification; a repeat of the same token is answered by the verified-token cache (shared/buyers/jwt-cache.ts) for a fraction of that CPU (first / repeat, in flight: ${pairs.join(', ')})`
    : '';
}

/** The buyer-token section, when bench/results/jwt.json exists. */
function jwtSection(): string | undefined {
  const file = new URL('./results/jwt.json', import.meta.url);
  if (!existsSync(file)) return undefined;
  const r = JSON.parse(readFileSync(file, 'utf8')) as JwtResults;
  const m = r.machine;
  const hs = r.results.find((x) => x.name === 'HS256')!;
  const joseHs = r.results.find((x) => x.name === 'HS256 (jose)');
  return [
    '## 5. Buyer-token verification',
    '',
    `What one verification costs the purchase path, measured by \`npm run bench:jwt\` (\`bench/jwt.ts\`; raw figures \`bench/results/jwt.json\`): the API's own verifier, one process, ${r.settings.rounds} interleaved rounds of ${r.settings.secondsPerRound} s per figure, median shown. Run ${r.at} on ${m.cores} × ${m.cpu}, Node ${m.node}, jose ${m.versions.jose ?? '?'}, load average ${m.loadAvgAtStart.join(' / ')}. "In flight": that many verifications awaited at once, as a crowd of requests does; CPU counts every thread of the process (jose verifies through WebCrypto on libuv's thread pool).`,
    '',
    jwtTable(r),
    '',
    `HS256 keeps a hand-written node:crypto path: jose's HS256 (second row) took ${joseHs ? (joseHs.inFlight.cpuUsPerOp / hs.inFlight.cpuUsPerOp).toFixed(1) : '?'}x its CPU per verification in this run. RS256 and ES256 go through jose${repeats(r)}. Only ratios within one run mean anything on this shared machine.`,
    '',
  ].join('\n');
}

const fmt = (v: number) => Math.round(v).toLocaleString('en-US');
const cpuOf = (m: Measured, name: string) => m.load.procs.find((p) => p.name === name)?.cpuPct ?? 0;
const costs = (m: Measured) => m.load.procs.map((p) => `${p.name} ${p.cpuPct}% / ${p.rssMaxMb} MB`).join(', ');
/** b against a, round by round (the rounds of a pair ran back to back): "1.02x (rounds 1.01x, 1.05x)". */
const versus = (b: Measured, a: Measured) => {
  const r = roundRatio(b, a);
  return `${r.median.toFixed(2)}x (rounds ${r.each.map((v) => `${v.toFixed(2)}x`).join(', ')})`;
};

/** Section 6, from bench/cluster.ts's results. */
function clusterSection(c: ClusterResults, mode: 'quick' | 'full'): string {
  const s = c.settings;
  const [ack0, ack1] = [c.wait.find((w) => w.ack === 0)!, c.wait.find((w) => w.ack === 1)!];
  const [one, three] = [c.masters.find((m) => m.masters === 1)!, c.masters.find((m) => m.masters === 3)!];
  const e = c.expiry;
  const l = e.summary.lateMs;
  const waitRows = c.wait.map((w) => [
    w.ack,
    fmt(w.load.rps),
    w === ack0 ? '1.00x' : versus(w, ack0),
    w.load.latencyMs.p50,
    w.load.latencyMs.p99,
    w.load.latencyMs.max,
    fmt(w.purchases),
    fmt(w.waitCalls),
    w.waitCalls > 0 ? `${(w.waitCalls / w.purchases).toFixed(4)} (${fmt(w.purchases / w.waitCalls)})` : '-',
    w.correct ? 'yes' : '**no**',
    w.rounds.map(fmt).join(' / '),
    w.p99Rounds.join(' / '),
    costs(w),
  ]);
  const masterCpu = (m: Measured, n: number) =>
    Math.max(...Array.from({ length: n }, (_, i) => cpuOf(m, `master${i + 1}`)));
  const mastersRows = c.masters.map((m) => [
    m.masters === 1 ? '1 master' : `${m.masters} masters`,
    fmt(m.load.rps),
    m === one ? '1.00x' : versus(m, one),
    m.load.latencyMs.p50,
    m.load.latencyMs.p99,
    m.load.latencyMs.max,
    fmt(m.load.statuses['202'] ?? 0),
    m.correct ? 'yes' : '**no**',
    m.cpuSPer10k.join(' / '),
    m.cpuSPer10k.reduce((a, b) => a + b, 0).toFixed(2),
    m.rounds.map(fmt).join(' / '),
    m.p99Rounds.join(' / '),
    costs(m),
  ]);
  const busiest = (m: Measured) => m.load.procs.reduce((a, b) => (b.cpuPct > a.cpuPct ? b : a));
  const who = (m: Measured) => (busiest(m).name === 'server' ? 'API' : busiest(m).name);
  const total = (m: Measured) => m.load.procs.reduce((n, p) => n + p.cpuPct, 0);
  const apiLimits = busiest(one).name === 'server' && busiest(three).name === 'server' && masterCpu(one, 1) < 60;
  // How far apart one setting's own rounds were: the noise a difference between settings must beat.
  const spread = (m: Measured) => Math.round((Math.max(...m.rounds) / Math.min(...m.rounds) - 1) * 100);
  const ratio = roundRatio(ack1, ack0).median;
  return [
    '## 6. Redis Cluster and replication',
    '',
    `\`bench/cluster.ts\` (${mode} run), loopback only, on the ${c.cores} cores every other process shares: the product as in section 1 (API, order-writer and expiry-listener processes, \`AUTH_MODE=trusted-header\`), every buyer wins (stock >= buyers), concurrency ${s.connections}, a warm-up of ${fmt(s.warmupBuyers)} buyers first, ${s.rounds} round(s) per setting with the order of the settings alternated each round; the median round is shown and every round is listed. Ratios are round by round.`,
    '',
    `**What WAIT costs.** One master and one replica (two \`redis-server\`s, \`--replicaof\`), the same servers for both settings (flushed between runs), one sale, ${fmt(s.buyers)} buyers. With \`REDIS_MIN_REPLICAS_ACK=1\` a purchase is answered 202 only after a WAIT says the replica has it; WAITs are group-committed (\`shared/redis/replication.ts\`), so "WAITs per purchase" is \`INFO commandstats\` cmdstat_wait calls on the master during the crowd over the purchases answered 202.`,
    '',
    table(
      [
        'REDIS_MIN_REPLICAS_ACK',
        'purchases/s',
        'vs 0',
        'p50 ms',
        'p99 ms',
        'max ms',
        '202',
        'WAIT calls',
        'WAITs per purchase (purchases per WAIT)',
        'correct',
        'rounds purchases/s',
        'rounds p99 ms',
        'CPU % of a core / peak RSS',
      ],
      waitRows,
    ),
    '',
    `With ACK=1 one WAIT confirmed ${ack1.waitCalls > 0 ? fmt(ack1.purchases / ack1.waitCalls) : '?'} purchases on average, and purchases/s were ${ratio.toFixed(2)}x those of ACK=0 (p99 ${ack1.load.latencyMs.p99} against ${ack0.load.latencyMs.p99} ms); ACK=0's own rounds differed by ${spread(ack0)}% and ACK=1's by ${spread(ack1)}%, so a difference smaller than that is noise. What limits these figures: the busiest process was the ${who(ack0)} (API ${cpuOf(ack0, 'server')}% and ${cpuOf(ack1, 'server')}% of a core, ACK 0 / 1), the master used ${cpuOf(ack0, 'redis')}% / ${cpuOf(ack1, 'redis')}%, the replica ${cpuOf(ack0, 'replica')}% / ${cpuOf(ack1, 'replica')}%, all processes together ${total(ack0)}% / ${total(ack1)}% of the ${c.cores * 100}% the cores give. The replica is on the same loopback and cores, so its acknowledgement costs almost no network time here; a replica on another host would add its round trip to each group's answers (not measured here).`,
    '',
    `**1 master against 3, many sales.** A Redis Cluster of 1 master (every slot) and one of 3 (\`tools/redis-cluster.ts\`, no replicas), ${s.sales} sales placed ${s.sales / 3} on each master of the 3, ${fmt(s.buyers)} buyers, each request buying from a random sale (\`bench/wrk/purchase.lua\` with a random path per request). Redis CPU: \`INFO cpu\` used_cpu_user + used_cpu_sys of each master from the crowd's start until the writer had drained it (the purchase script plus the writer's claim and ack), per 10,000 purchases. Pinning: ${c.pinning}.`,
    '',
    table(
      [
        'cluster',
        'purchases/s',
        'vs 1 master',
        'p50 ms',
        'p99 ms',
        'max ms',
        '202',
        'correct',
        'Redis CPU s per 10k purchases, each master',
        'all masters',
        'rounds purchases/s',
        'rounds p99 ms',
        'CPU % of a core / peak RSS',
      ],
      mastersRows,
    ),
    '',
    `What limits these figures: the API process used ${cpuOf(one, 'server')}% of a core with 1 master and ${cpuOf(three, 'server')}% with 3; the busiest master ${masterCpu(one, 1)}% and ${masterCpu(three, 3)}%; all processes together ${total(one)}% and ${total(three)}% of the ${c.cores * 100}% the cores give. ${apiLimits ? 'The API process, not Redis, is the limit on this machine: it is the busiest process on cores that are nearly full, while the one master used well under a core, so spreading the sales over three cannot raise throughput here; what the second and third master change is where Redis spends its CPU, and the CPU per purchase summed over the masters shows what the cluster costs.' : `The busiest process was the ${who(one)} with 1 master and the ${who(three)} with 3.`} Capacity beyond one master needs a core (or a host) per master, which this machine does not have.`,
    '',
    `**Expiry on the cluster.** ${fmt(e.summary.orders)} pending orders as the writer leaves them (rows, expiry keys, deadlines entries) on ${e.sales} sales over ${e.masters} masters (${e.ordersPerMaster.map(fmt).join(' / ')} orders), deadlines spread evenly over ${e.summary.windowS} s and across the sales, closed by the product's \`ExpiryListener\` (in the bench process, on a cluster client: one expired-event subscription per node, nudger every ${e.summary.nudgeMs} ms). Lateness = closed_at - expires_at from Postgres's clock; no replay runs, so every close is the listener's.`,
    '',
    table(
      [
        'cluster',
        'orders',
        'closed',
        'early',
        'p50 ms',
        'p90 ms',
        'p99 ms',
        'max ms',
        'stock back p99 ms',
        'closes/s mean / peak',
        'expired events received',
        'closed by the listener',
        'catch-up sweeps',
        'expired keys, each master',
      ],
      [
        [
          `${e.masters} masters`,
          fmt(e.summary.orders),
          fmt(e.summary.closed),
          e.summary.closedEarly,
          l.p50 ?? 'n/a',
          l.p90 ?? 'n/a',
          l.p99 ?? 'n/a',
          l.max ?? 'n/a',
          e.summary.stockBackP99Ms ?? 'n/a',
          `${fmt(e.summary.closesPerSecond.mean)} / ${fmt(e.summary.closesPerSecond.peak)}`,
          fmt(e.summary.events),
          fmt(e.summary.closedByListener),
          e.catchUps,
          e.expiredPerMaster.map(fmt).join(' / '),
        ],
      ],
    ),
    '',
    `What limits this figure: deadlines arrive at ${fmt(e.summary.orders / e.summary.windowS)}/s; a due key is expired by the nudger within one period (${e.summary.nudgeMs} ms) or by Redis's own sampling, its event reaches the listener from that master's subscription, and the close is a Postgres update plus a restore script per order on its master. ${e.catchUps === 0 ? 'No catch-up sweep ran, so every close came from an expired event.' : `${e.catchUps} catch-up sweep(s) ran (a node gained or a connection back), so some closes may have come from a sweep, not an event.`}`,
    '',
  ].join('\n');
}

/** When a run's figures were last taken: its start, or its latest `--only` rerun. */
// A rerun of the variants part alone measures nothing the other sections show: it does not make its run the newer.
const lastRun = (r: BenchResults) =>
  Math.max(
    Date.parse(r.at),
    ...(r.reruns ?? []).filter((x) => x.parts.some((p) => p !== 'variants')).map((x) => Date.parse(x.at)),
  );

export function document(saved: Partial<Record<'quick' | 'full', BenchResults>>): string {
  // The sections show the newer of the two runs: figures taken before the code changed describe older code.
  const quickNewer =
    saved.full !== undefined && saved.quick !== undefined && lastRun(saved.quick) > lastRun(saved.full);
  const r = quickNewer ? saved.quick! : (saved.full ?? saved.quick!);
  const other = r === saved.full ? saved.quick : saved.full;
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
  if (other && quickNewer) {
    out.push(
      `The same targets in the last full run (larger crowd, three rounds), whose figures were last taken ${new Date(lastRun(other)).toISOString()}, before the code measured above (${new Date(lastRun(r)).toISOString()}):`,
      '',
      headline(other),
      '',
    );
  } else if (other)
    out.push('The same targets in the latest quick run (smaller crowd, one round):', '', headline(other), '');
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
  // From whichever run measured it (a quick run's `--only variants` beside a full run's purchase part).
  const variants = r.variants ?? other?.variants;
  if (variants) out.push(variantsSection(variants));
  if (r.writer)
    out.push(
      '## 2. Order writer',
      '',
      'Queued winners made by the real purchase script, drained into Postgres with their expiry keys set (`SET ... PXAT` plus the deadlines index), each drain as its own process on fresh servers. Clock: from the moment the sale becomes visible to the drain until the last queued entry is gone.',
      '',
      writerTable(r.writer),
      '',
    );
  if (r.expiry) {
    const e = r.expiry;
    const rows = [
      ...(e.timeliness?.phases ?? []).map((s) => ({
        label: `flashsale spread, ${s.label} (timeliness bench)`,
        s,
        extra: '',
      })),
      ...e.spread.map((c) => ({
        label: `${c.closer} spread`,
        s: c.summary,
        extra: `${c.procs.map((p) => `${p.name} ${p.cpuPct}%`).join(', ')}; ${c.redisBytesPerOrder} B/order in Redis`,
      })),
      ...e.burst.map((c) => ({
        label: `${c.closer} burst`,
        s: c.summary,
        extra: `${c.procs.map((p) => `${p.name} ${p.cpuPct}%`).join(', ')}; ${c.redisBytesPerOrder} B/order in Redis`,
      })),
    ];
    const t = e.timeliness?.options;
    const sp = e.spread[0]?.spec;
    const b = e.burst[0]?.spec;
    out.push(
      '## 3. Expiry',
      '',
      `Spread: ${t ? `\`bench/expiry-timeliness.ts\` as it is (${t.orders} orders over ${t.windowS} s, ${t.noise} unrelated TTL keys; its second phase is its own baseline with the nudger off)` : 'the timeliness bench did not run'}; BullMQ: the same scenario${sp ? ` (${sp.orders} orders over ${sp.windowS} s, ${sp.noise} unrelated TTL keys)` : ''} with one delayed job per order, closed by a worker (concurrency 100, pool 20) doing what the listener does for an order (\`bench/baselines/bullmq-closer.ts\`). Burst: ${b ? `${b.orders} orders whose deadlines fall in the same second, ${b.noise} unrelated TTL keys` : ''}; the product's \`expiry-listener\` process against the BullMQ closer. Lateness = closed_at - expires_at from Postgres's clock; ">=" marks lower bounds (orders still open at the cutoff).`,
      '',
      expiryTable(rows),
      '',
    );
  }
  if (r.cost) {
    out.push(
      '## 4. Cost and growth',
      '',
      `Redis memory, ${r.cost.memory.winners.toLocaleString('en-US')} winners queued by the purchase script, then drained by the writer:`,
      '',
      memoryTable(r.cost.memory, r.cost.memoryWithEnd),
      '',
      'The product alone at each concurrency, then at each ratio of buyers to stock (CPU and peak RSS of each process under that load):',
      '',
      growthTable(r.cost.growth),
      '',
    );
  }
  const jwt = jwtSection();
  if (jwt) out.push(jwt);
  const cluster = r.cluster
    ? { c: r.cluster, mode: r.mode }
    : saved.quick?.cluster
      ? { c: saved.quick.cluster, mode: 'quick' as const }
      : undefined;
  if (cluster) out.push(clusterSection(cluster.c, cluster.mode));
  const limits = r.rateLimit
    ? { l: r.rateLimit, mode: r.mode }
    : saved.quick?.rateLimit
      ? { l: saved.quick.rateLimit, mode: 'quick' as const }
      : undefined;
  if (limits) out.push(rateLimitSection(limits.l, limits.mode));
  const challenge = challengeSection(r.purchase ?? saved.quick?.purchase);
  if (challenge) out.push(challenge);
  const whole = r.wholeMachine
    ? { w: r.wholeMachine, mode: r.mode }
    : saved.quick?.wholeMachine
      ? { w: saved.quick.wholeMachine, mode: 'quick' as const }
      : undefined;
  if (whole) out.push(wholeMachineSection(whole.w, whole.mode));
  const profiles = r.profile
    ? { p: r.profile, mode: r.mode }
    : saved.quick?.profile
      ? { p: saved.quick.profile, mode: 'quick' as const }
      : undefined;
  if (profiles) out.push(profileSection(profiles.p, profiles.mode));
  const events = r.events
    ? { e: r.events, mode: r.mode }
    : saved.quick?.events
      ? { e: saved.quick.events, mode: 'quick' as const }
      : undefined;
  if (events) out.push(eventsSection(events.e, events.mode));
  const outbox = r.outbox
    ? { o: r.outbox, mode: r.mode }
    : saved.quick?.outbox
      ? { o: saved.quick.outbox, mode: 'quick' as const }
      : undefined;
  if (outbox) out.push(outboxSection(outbox.o, outbox.mode));
  const room = roomSection();
  if (room) out.push(room);
  out.push('## Targets: what limits each, and what was changed', '', analysis(r), '');
  return `${out.join('\n')}\n`;
}

/**
 * BENCHMARKS.md, then the headline of README.md and docs/benchmarks.md, from the saved results (`saved`:
 * bench.json's runs, the other files read as stored). Every bench whose results they read ends here, and
 * `npm run docs:bench` alone. Returns the files written.
 */
export function writeDocuments(saved: SavedBench = loadResults().bench): string[] {
  const file = fileURLToPath(new URL('../BENCHMARKS.md', import.meta.url));
  // BENCHMARKS.md is about a run of `npm run bench`: without one there is only the headline to write.
  if (saved.full || saved.quick) writeFileSync(file, document(saved));
  return [...(saved.full || saved.quick ? [file] : []), ...writeHeadline(loadResults(saved))];
}
