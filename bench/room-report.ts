// Section 11 of BENCHMARKS.md, from bench/results/room.json (written by `npm run bench:room`, bench/room.ts).
import { existsSync, readFileSync } from 'node:fs';
import type { LoadResult } from './load.js';
import type { Machine } from './machine.js';
import { table } from './report.js';
import type { FanoutResult } from './room-fanout.js';

export interface JoinRun {
  round: number;
  width: number;
  buyers: number;
  load: LoadResult;
  joined: number;
  members: number;
  encoding: string;
  apiCpuUs: number;
  queueBytes: number;
  roomBytes: number;
  usedMemoryDelta: number;
  bytesPerBuyer: number;
  usedBytesPerBuyer: number;
}
export interface PurchaseRun {
  round: number;
  withPass: boolean;
  buyers: number;
  load: LoadResult;
  won: number;
  apiCpuUs: number;
}
export interface ZsetSize {
  width: number;
  members: number;
  encoding: string;
  bytes: number;
  bytesPerMember: number;
}

export interface RoomResults {
  mode: 'quick' | 'full';
  at: string;
  seconds: number;
  settings: {
    buyers: number;
    rounds: number;
    streams: number;
    ticks: number;
    connections: number;
    widths: number[];
    streamsPerApi: number;
  };
  machine: Machine;
  joins: JoinRun[];
  purchases: PurchaseRun[];
  zsets: ZsetSize[];
  fanout: FanoutResult[];
  /** When the fan-out was run again alone (`--only fanout`): its figures are from then. */
  fanoutRun?: { at: string; seconds: number; loadAvgAtStart: number[] };
}

const n = (x: number) => Math.round(x).toLocaleString('en-US');
export const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
const statuses = (l: LoadResult) =>
  Object.entries(l.statuses)
    .map(([k, v]) => `${n(v)} × ${k}`)
    .join(', ');
const span = (xs: number[]) =>
  Math.min(...xs) === Math.max(...xs) ? `${xs[0]}` : `${Math.min(...xs)}-${Math.max(...xs)}`;
export const TARGET_BYTES = 150;
export const TARGET_LAG_MS = 2000;

/** The run of median throughput among `runs`, with every round's figure beside it. */
function pick<T extends { load: LoadResult }>(runs: T[]): { m: T; rps: string; p99: string } {
  const m = [...runs].sort((a, b) => a.load.rps - b.load.rps)[Math.floor((runs.length - 1) / 2)]!;
  return { m, rps: runs.map((x) => n(x.load.rps)).join(' / '), p99: runs.map((x) => x.load.latencyMs.p99).join(' / ') };
}

function loadRoom(): RoomResults | undefined {
  const file = new URL('./results/room.json', import.meta.url);
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as RoomResults) : undefined;
}

/** What the section's targets and the README's headline read: medians over the rounds, ratios round by round. */
export function roomFigures(r: RoomResults) {
  const plain = r.purchases.filter((p) => !p.withPass);
  const passed = r.purchases.filter((p) => p.withPass);
  // Ratios round by round (the runs of a round ran back to back), then their median.
  const perRound = (f: (round: number) => number | undefined) =>
    [...new Set(r.purchases.map((p) => p.round))].map(f).filter((x): x is number => x !== undefined);
  const rpsRatio = perRound((k) => {
    const a = plain.find((p) => p.round === k);
    const b = passed.find((p) => p.round === k);
    return a && b ? b.load.rps / a.load.rps : undefined;
  });
  const joins = (w: number) => {
    const runs = r.joins.filter((j) => j.width === w);
    const cpuVsPurchase = perRound((k) => {
      const a = runs.find((x) => x.round === k);
      const b = plain.find((p) => p.round === k);
      return a && b ? a.apiCpuUs / b.apiCpuUs : undefined;
    });
    return {
      runs,
      cpuUs: median(runs.map((x) => x.apiCpuUs)),
      cpuVsPurchase,
      bytes: median(runs.map((x) => x.bytesPerBuyer)),
    };
  };
  return {
    plain,
    passed,
    rpsRatio,
    joins,
    cpuPlain: median(plain.map((x) => x.apiCpuUs)),
    cpuPass: median(passed.map((x) => x.apiCpuUs)),
    big: r.fanout.find((f) => f.streams >= 50_000) ?? r.fanout[r.fanout.length - 1],
    one: r.fanout.find((f) => f.apis === 1),
  };
}

export function roomSection(): string | undefined {
  const r = loadRoom();
  if (!r) return undefined;
  const s = r.settings;
  const m = r.machine;
  const { plain, passed, rpsRatio, joins, cpuPlain, cpuPass, big, one } = roomFigures(r);
  const fc = pick(plain);
  const pass = pick(passed);
  const joinRows = s.widths.map((w) => {
    const { runs, cpuUs, cpuVsPurchase, bytes } = joins(w);
    const { m: j, rps, p99 } = pick(runs);
    return [
      `${w}`,
      n(j.load.rps),
      j.load.latencyMs.p50,
      j.load.latencyMs.p99,
      statuses(j.load),
      n(cpuUs),
      cpuVsPurchase.length ? `${median(cpuVsPurchase).toFixed(2)}x` : '-',
      rps,
      p99,
      n(bytes),
      n(median(runs.map((x) => x.usedBytesPerBuyer))),
      `${j.encoding}${j.roomBytes ? `, room hash ${n(j.roomBytes)} B` : ' (no room hash before the opening)'}`,
      `${j.load.procs.map((x) => `${x.name} ${x.cpuPct}%`).join(', ')}; machine ${j.load.machineCpuPct ?? '?'}%`,
    ];
  });
  const bytes24 = joins(24).bytes;
  const bytes36 = joins(36).bytes;
  const z = (w: number, big: boolean) =>
    r.zsets.find((x) => x.width === w && (big ? x.members > 128 : x.members <= 128));
  const z8 = z(8, true);
  const z24 = z(24, true);
  const z36 = z(36, true);
  const lp = z(24, false);
  const purchaseRows = [fc, pass].map(({ m: p, rps, p99 }) => [
    p.withPass ? 'queue sale, every buyer with a pass' : 'first-come sale (no pass)',
    n(p.load.rps),
    p.withPass
      ? `${median(rpsRatio).toFixed(2)}x (rounds ${rpsRatio.map((x) => `${x.toFixed(2)}x`).join(', ')})`
      : '1.00x',
    p.load.latencyMs.p50,
    p.load.latencyMs.p99,
    p.load.latencyMs.max,
    statuses(p.load),
    n(p.withPass ? cpuPass : cpuPlain),
    rps,
    p99,
    `${p.load.procs.map((x) => `${x.name} ${x.cpuPct}%`).join(', ')}; machine ${p.load.machineCpuPct ?? '?'}%`,
  ]);
  const apiPcts = r.purchases.map((x) => x.load.procs.find((q) => q.name === 'api')?.cpuPct ?? 0);
  const machinePcts = r.purchases.map((x) => x.load.machineCpuPct ?? 0);
  const fanRows = r.fanout.map((f: FanoutResult) => [
    `${n(f.streams)} streams, ${f.apis} API process${f.apis > 1 ? 'es' : ''}`,
    `${f.openS} s`,
    n(f.lagMs),
    f.ticks.map((t) => n(t.lagMs)).join(' / '),
    f.ticks.map((t) => (t.publishedMs === undefined ? '?' : n(t.publishedMs))).join(' / '),
    f.ticks.map((t) => (t.afterPublishMs === undefined ? '?' : n(t.afterPublishMs))).join(' / '),
    n(f.updatesPerS),
    f.ticks.map((t) => `${n(t.received)}/${n(t.owed)}`).join(', '),
    n(f.apiCpuUsPerUpdate),
    f.ticks.map((t) => t.apiCpuPct.join('+')).join(' / '),
    f.apiRssMb.map(n).join(' / '),
  ]);
  const meets = (ok: boolean) => (ok ? 'met' : '**missed**');
  return [
    '## 11. Waiting room',
    '',
    `\`npm run bench:room\` (\`bench/room.ts\`, ${r.mode} run; raw figures \`bench/results/room.json\`): the product's API and order writer as their own processes on a fresh redis-server and Postgres, wrk (one thread, ${s.connections} connections, every request a new buyer) as the crowd, ${s.rounds} round(s) with joins and both purchases interleaved, the median round shown and every round listed. Run ${r.at}, ${Math.round(r.seconds / 60)} min, on ${m.cores} × ${m.cpu}, Node ${m.node}, redis-server ${m.versions['redis-server'] ?? '?'}; load average ${m.loadAvgAtStart.join(' / ')} at the start (the machine is shared: only ratios within this run mean anything).`,
    '',
    `**Join.** ${n(s.buyers)} buyers join one queue sale each round (\`POST /api/sales/:id/queue\`, the room still in its pre-queue: join_queue.lua draws each place from the sale's seed), once with ${s.widths.join('-character and once with ')}-character buyer ids (a 24-character id such as a MongoDB ObjectId's hex, and a UUID's length). API CPU per join: the API process's CPU from /proc over the run, divided by the joins; "vs a purchase": against a winning first-come purchase's CPU in the same round (the purchase table below). Redis bytes per buyer: MEMORY USAGE (SAMPLES 0) of the sale's queue zset plus its room hash, over the buyers; and the INFO used_memory delta over the run, over the buyers.`,
    '',
    table(
      [
        'id length',
        'joins/s',
        'p50 ms',
        'p99 ms',
        'answers',
        'API CPU µs per join',
        'vs a purchase',
        'rounds joins/s',
        'rounds p99 ms',
        'Redis B per buyer (MEMORY USAGE)',
        'B per buyer (used_memory)',
        'encoding',
        'CPU % of a core',
      ],
      joinRows,
    ),
    '',
    `Target ≤ ${TARGET_BYTES} B per waiting buyer: ${meets(bytes24 <= TARGET_BYTES)} with 24-character ids (${n(bytes24)} B), ${meets(bytes36 <= TARGET_BYTES)} with 36 (${n(bytes36)} B). The used_memory delta moves with whatever else Redis allocated during the run (client buffers, the AOF buffer), so MEMORY USAGE of the keys is the figure the target is read against. A room of thousands is a skiplist zset (past 128 members Redis leaves the listpack): per member an sds string of the id (3-byte header + id + NUL, in a jemalloc size class: 32 B for 24 characters, 48 B for 36), a skiplist node (ele pointer, score, backward pointer and 16 B per level, 1.33 levels on average: 48 or 64 B classes), a dict entry (24 B) and its share of the dict's power-of-two bucket array (8 B a bucket). The structure, not the id, dominates:${z8 && z24 && z36 ? ` the same zset filled directly with ${n(z24.members)} members holds ${z8.bytesPerMember} B per member with 8-character members, ${z24.bytesPerMember} B with 24 and ${z36.bytesPerMember} B with 36, so about ${Math.round(z8.bytesPerMember - 16)} B per member is skiplist and dict whatever the id` : ''}${lp ? `; a zset of ${lp.members} members, still a listpack, takes ${lp.bytesPerMember} B per 24-character member` : ''}. If the target had to come down further, the member is the one lever: an 8-byte digest of the buyer id as the member (the id kept only for admitted buyers, in the passes zset) would save the difference between the rows above; a listpack of 50,000 members is no option (each insert moves the whole buffer). Nothing is changed in shared/: the key layout is the product's.`,
    '',
    `**Purchase with a pass against without.** The same crowd (${n(s.buyers)} buyers, 24-character ids, stock = buyers, so every buyer wins and does the full work) against a first-come sale and against the round's queue sale after one admission tick handed every joined buyer a pass; each pass signed by the API's own key (\`Challenges.pass\`, as \`GET .../queue/me\` signs them) and sent in \`flashsale-purchase-token\`. With a pass the API checks its HMAC and purchase.lua checks and spends the buyer's entry in the passes zset. The order writer drains each sale before the next run.`,
    '',
    table(
      [
        'sale',
        'purchases/s',
        'vs first-come (round by round)',
        'p50 ms',
        'p99 ms',
        'max ms',
        'answers',
        'API CPU µs per purchase',
        'rounds purchases/s',
        'rounds p99 ms',
        'CPU % of a core',
      ],
      purchaseRows,
    ),
    '',
    `A pass cost ${n(cpuPass - cpuPlain)} µs of API CPU per purchase in this run (median ${n(cpuPass)} against ${n(cpuPlain)} µs; the HMAC check of the pass, and in purchase.lua a ZSCORE and a ZADD on the passes zset). What limits the throughput here is not the API: it used ${span(apiPcts)}% of a core while the whole machine was ${span(machinePcts)}% busy (of ${m.cores * 100}%), so other work on the machine held the cores and the purchases/s ratio carries that noise; the CPU per purchase is the steadier comparison.`,
    '',
    `**Stream fan-out.**${r.fanoutRun ? ` Run again alone (\`--only fanout\`) at ${r.fanoutRun.at}, ${Math.round(r.fanoutRun.seconds / 60)} min, load average ${r.fanoutRun.loadAvgAtStart.join(' / ')}: its figures are from then, on fresh servers with this room the only sale.` : ''} A room of ${n(s.streams)} waiting buyers (admission rate 50/s, the default), opened by a tick; then each buyer holds \`GET .../queue/events\` open: raw sockets from ${big ? big.clients : '?'} client processes (\`bench/room-client.ts\`, one loopback address each), spread evenly over the API processes. This process then runs the admission loop's own tick (\`AdmissionLoop.tick\`: admit.lua, then one PUBLISH) ${s.ticks} times, each at least ${1.2} s after the previous tick's last update (a stream writes a position that only moved at most once a second). Lag: from the tick's start (before admit.lua) until the last open stream received that tick's update (clients match it by its \`waiting\` count); updates/s: streams updated over that lag. One API process can hold at most about ${n(s.streamsPerApi)} streams on this machine: the hard limit of open files per process is 20,000 (\`ulimit -Hn\`) and the bench cannot raise it${s.streams > s.streamsPerApi ? `, so ${n(s.streams)} streams ran over several API processes on their own ports, as PM2's instances would hold them (each with its own subscription to the admission channel)` : ''}.`,
    '',
    table(
      [
        'setup',
        'streams opened in',
        'lag of the last stream, median ms',
        'lag per tick ms',
        'message heard per tick ms',
        'last stream after the message, per tick ms',
        'updates/s, median',
        'updated / owed per tick',
        'API CPU µs per update',
        'API CPU % per tick',
        'API peak RSS MB',
      ],
      fanRows,
    ),
    '',
    big
      ? `Target ≤ ${n(TARGET_LAG_MS)} ms for the last of ${n(big.streams)} buyers: ${meets(big.lagMs <= TARGET_LAG_MS)} (median ${n(big.lagMs)} ms over ${big.ticks.length} ticks, worst ${n(Math.max(...big.ticks.map((t) => t.lagMs)))} ms)${one && one !== big ? `; ${n(one.streams)} streams on one API process: median ${n(one.lagMs)} ms, worst ${n(Math.max(...one.ticks.map((t) => t.lagMs)))} ms` : ''}. What limits it: each update is, per stream, a view built from the tick, one JSON.stringify and one socket write on its API process's event loop (shared/http/routes/admission/room-events.ts): ${n(big.apiCpuUsPerUpdate)} µs of API CPU per update here${one && one !== big ? ` (${n(one.apiCpuUsPerUpdate)} µs with one process)` : ''}, so one tick to ${n(big.streams)} streams is about ${((big.apiCpuUsPerUpdate * big.streams) / 1e6).toFixed(1)} s of API CPU, at best ${((big.apiCpuUsPerUpdate * big.streams) / 1e6 / m.cores).toFixed(1)} s on ${m.cores} cores if nothing else ran. Nothing else running is not what this machine gave: the API processes got ${span(big.ticks.flatMap((t) => t.apiCpuPct))}% of a core each during the ticks, with the load average at ${(r.fanoutRun?.loadAvgAtStart ?? m.loadAvgAtStart).join(' / ')} when ${r.fanoutRun ? 'the streams part' : 'the run'} started; the lag is that CPU stretched over the share the processes were given. The "message heard" column (when ${"a subscriber in the bench process received the tick's PUBLISH"}) separates the tick itself (lease, the loop's sales re-read from Postgres each second, admit.lua for every unsettled queue sale, then the PUBLISH) from the fan-out after it.`
      : '',
    '',
  ].join('\n');
}
