// The notes under the tables: for each target, by how much it was missed, what limits it (from
// `node --cpu-prof` profiles, Redis INFO commandstats and EXPLAIN ANALYZE, taken while building
// this bench) and what was changed in the product because of it. Figures come from the run.
import { roundRatio, targets, type BenchResults } from './report.js';
import type { DesignResult } from './purchase.js';

const n = (v: number) => Math.round(v).toLocaleString('en-US');
const find = (rs: DesignResult[] | undefined, d: string) => rs?.find((r) => r.design === d);
/** CPU microseconds one request cost the server process (its share of a core over its rate). */
const usPerRequest = (d: DesignResult) => {
  const cpu = d.load.procs.find((p) => p.name === 'server')?.cpuPct ?? 0;
  return Math.round((cpu / 100 / d.load.rps) * 1e6);
};
const missedBy = (measured: number, target: number, higherIsBetter: boolean) =>
  higherIsBetter
    ? `${Math.round((1 - measured / target) * 100)}% short`
    : `${Math.round((measured / target - 1) * 100)}% over`;

function purchaseNotes(r: BenchResults): string[] {
  const p = r.purchase;
  const fs = find(p?.crowd, 'flashsale');
  const hello = find(p?.crowd, 'hello');
  const lock = find(p?.crowd, 'rowlock');
  const fsNo = find(p?.crowd, 'flashsale-nomem');
  const lockNo = find(p?.crowd, 'rowlock-nomem');
  const fsAll = find(p?.allWin, 'flashsale');
  const lockAll = find(p?.allWin, 'rowlock');
  if (!p || !fs || !hello) return [];
  const ratio = roundRatio(fs, hello).median;
  const helloAll = find(p?.allWin, 'hello');
  const allRatio = fsAll && helloAll ? roundRatio(fsAll, helloAll).median : null;
  const sell = (d?: DesignResult) => (d?.outcome && d.outcome.selloutS > 0 ? d.outcome.orders / d.outcome.selloutS : 0);
  const cpu = (d: DesignResult | undefined, name: string) => d?.load.procs.find((q) => q.name === name)?.cpuPct ?? 0;
  const out = [
    `**Sold-out crowd against the ceiling** (${Math.round(ratio * 100)}%, ${ratio >= 0.85 ? 'met' : missedBy(ratio, 0.85, true)} of 85%). Both servers keep one core busy, so the ratio is the`,
    `CPU one request costs: about ${usPerRequest(fs)} µs for this endpoint against ${usPerRequest(hello)} µs for the hello-world route (median rounds). The profile`,
    'puts a third of the CPU in the `writev` that sends each answer, which on loopback also runs the receiving side of',
    "TCP and costs the ceiling the same. What was changed this round, from profiles of the sold-out crowd (V8's CPU and",
    'sampling heap profilers started once the stock was gone, 50,000 answers, both servers side by side):',
    '- A sale the process knows sold out is answered in `onRequest`, once the buyer is known, before the body is read,',
    '  parsed, checked and given an in-flight slot (the answer holds whatever the body says; no buyer is still 401, a',
    '  malformed sale id still 400). This was most of the difference: busy CPU for the 50,000 answers went to 9.9 s',
    '  against 10.0 s for the ceiling, which parses its body.',
    '- The sold-out memory let every request in once it ran out, until the first answer came back, and was set from',
    "  the request's start: under load the round trip outlasted the memory and most of a crowd went to Redis (Redis",
    "  script calls during such a crowd on a loaded machine, every process's: 34,116 before, 5,271 after; API",
    '  allocations per answer 20.5 to 12.0 KB). Now one request asks Redis while the others are still answered from',
    '  memory, and its answer decides; stock that comes back still clears the memory at once.',
    "- The latency histogram's series are bound once per route, method and status (`shared/runtime/bound-histogram.ts`, the",
    "  same text as prom-client's), and purchase outcomes are tallies added to their counter when it is read:",
    "  prom-client hashed and checked the labels and made a closure on every request (4-5% of the API's CPU).",
    '- A body with one colon cannot repeat a key: the duplicate-key scan is skipped for it.',
    'Not done: dropping the histogram, the shedding or the limits (features).',
    '',
  ];
  if (fsAll && helloAll && allRatio !== null) {
    out.push(
      `**Every buyer wins against the ceiling** (${Math.round(allRatio * 100)}%, ${allRatio >= 0.5 ? 'met' : missedBy(allRatio, 0.5, true)} of 50%). Here the API does not keep a core busy (${cpu(fsAll, 'server')}%): the`,
      `writer (${cpu(fsAll, 'writer')}%), Redis (${cpu(fsAll, 'redis')}%), Postgres (${cpu(fsAll, 'postgres')}%) and wrk share the two cores with it. Per win the API`,
      `spends about ${usPerRequest(fsAll)} µs of CPU against ${usPerRequest(helloAll)} µs for the ceiling; section 9 shows the same under PM2 with both cores`,
      'given to API instances, where the whole machine is the limit. Changed for it this round: a win is one Redis round',
      'trip, not two: purchase.lua counts the per-buyer rate limit itself (same `429 rate_limited` with `Retry-After`;',
      "the counter is now per buyer and sale, `{sale:<id>}:rl:<buyer>`, so it lives in the sale's Cluster slot); and the",
      "script names the sale's keys from its prefix, one declared key instead of eleven (the allocation profile of a win",
      "had ioredis building each command's text as its largest item, 3.4 KB of 24 KB per win). What limits it now (the",
      'profile of a win): garbage collection 13%, ioredis 12% (a command object, a promise and a timeout per call),',
      "fastify's body parsing and schema checks, and the answer's write.",
      '',
      '',
    );
  }
  if (lock) {
    out.push(
      `**Against the Postgres row lock** (${roundRatio(fs, lock).median.toFixed(1)}x on the whole crowd, target 10x). Every design gets the`,
      "product's 200 ms sold-out memory, so once the stock is gone the row-lock server answers most of the crowd from",
      'memory as cheaply as this endpoint does, and the crowd-wide ratio mostly measures the HTTP stack. The designs',
      `differ while the stock sells: this endpoint took ${fs.outcome?.selloutS} s to sell ${n(p.settings.stock)} units, the row lock ${lock.outcome?.selloutS} s`,
      `(${(sell(fs) / Math.max(1, sell(lock))).toFixed(1)}x the orders per second; its p99 is ${lock.load.latencyMs.p99} ms because 500 buyers queue on one row's lock).`,
    );
    if (fsNo && lockNo)
      out.push(
        `Without the memory (the textbook row-lock server) every buyer is a transaction: ${roundRatio(fsNo, lockNo).median.toFixed(1)}x (${n(fsNo.load.rps)} against ${n(lockNo.load.rps)} req/s).`,
      );
    if (fsAll && lockAll)
      out.push(
        `When every buyer wins, ${roundRatio(fsAll, lockAll).median.toFixed(1)}x (${n(fsAll.load.rps)} against ${n(lockAll.load.rps)} req/s): the row lock is bound by Postgres (one core busy), each order holding the stock row for its UPDATE and COMMIT.`,
      );
    out.push('');
  }
  const queue = find(p.crowd, 'enqueue');
  if (queue) {
    const r = roundRatio(fs, queue).median;
    out.push(
      `**Against a BullMQ job per request** (${r.toFixed(2)}x, ${r >= 2 ? 'met' : missedBy(r, 2, true)}). Adding a job is one Redis script, about as cheap as`,
      "this endpoint's purchase script, so the HTTP side of the two is close; the difference is what the answer means.",
      `The enqueue API told ${n(queue.accepted)} buyers "queued" before its worker's sold-out flag reached it, ${n(queue.accepted - (queue.outcome?.orders ?? 0))} of whom`,
      `learned later that they had lost; the worker needed ${queue.outcome?.selloutS} s to sell the stock (this endpoint ${fs.outcome?.selloutS} s) and ${queue.settleS} s after the`,
      "last answer to decide every buyer. Its throughput is bounded by the worker's row-lock transactions (Postgres busiest).",
      '',
    );
  }
  out.push(
    `**p99 at concurrency ${p.settings.connections}** (sold-out crowd ${fs.load.latencyMs.p99} ms, ${fs.load.latencyMs.p99 <= 50 ? 'met' : missedBy(fs.load.latencyMs.p99, 50, false)}${fsAll ? `; every buyer wins ${fsAll.load.latencyMs.p99} ms, ${fsAll.load.latencyMs.p99 <= 50 ? 'met' : missedBy(fsAll.load.latencyMs.p99, 50, false)}` : ''}; the ceiling's own p99 was ${hello.load.latencyMs.p99} ms). wrk keeps ${p.settings.connections} requests in flight,`,
    `so the mean latency is ${p.settings.connections} / throughput (Little's law): ${Math.round((p.settings.connections / fs.load.rps) * 1000)} ms at ${n(fs.load.rps)} req/s. A p99 of 50 ms at this concurrency`,
    `is a throughput question: the ceiling, at ${n(hello.load.rps)} req/s, has a mean of ${Math.round((p.settings.connections / hello.load.rps) * 1000)} ms. Found on the way: Node 20 (libuv 1.45+)`,
    'accepts one connection per event-loop turn, so buyers who connect while the process is busy wait seconds to be',
    'accepted (the row "connecting during the load" in section 4). The bench opens every connection before the crowd',
    'starts (a 1 s hold in `bench/wrk/purchase.lua`), as buyers waiting on the page would be; in production PM2 cluster',
    "mode accepts in its primary process, and a proxy's keep-alive upstream connections avoid the burst.",
  );
  return out;
}

function growthNotes(r: BenchResults): string[] {
  const c2000 = r.cost?.growth.find((g) => g.axis === 'concurrency' && g.value === '2000');
  if (!c2000) return [];
  const busy = c2000.result.load.statuses['429'] ?? 0;
  return [
    `**Concurrency 2,000.** With \`MAX_INFLIGHT=1000\` the API sheds what it cannot hold: ${n(busy)} of ${n(c2000.buyers)} answers were \`429 busy\``,
    `(by design: a retry beats a queue), at p99 ${n(c2000.result.load.latencyMs.p99)} ms. Found on the way: Node listens with an accept queue of 511; a`,
    'crowd of 2,000 connecting at once overflowed it (the kernel counts ListenOverflows), and every dropped connection',
    'was retried by TCP 1, 3, 7 s later, which is where multi-second maxima at this concurrency came from. The API now',
    'listens with a backlog of 4,096 (Linux caps it at `net.core.somaxconn`); the baselines use the same.',
  ];
}

function writerNotes(r: BenchResults): string[] {
  const main = r.writer?.find((w) => w.batchSize === 1000 && (w.concurrency ?? 2) === 2);
  const single = r.writer?.find((w) => w.batchSize === 1000 && w.concurrency === 1);
  if (!main) return [];
  const cpu = (name: string) => main.procs.find((q) => q.name === name)?.cpuPct ?? 0;
  // CPU time per order: a process's share of a core over the drain, per order drained.
  const usOf = (name: string) => ((cpu(name) / 100) * main.seconds * 1e6) / main.orders;
  const usPerOrder = usOf('writer') + usOf('redis') + usOf('postgres');
  return [
    `**Order writer** (${n(main.perSecond)} orders/s with two batches in flight, ${main.perSecond >= 60_000 ? 'met' : missedBy(main.perSecond, 60_000, true)} of 60,000${single ? `; one in flight ${n(single.perSecond)}` : ''}).`,
    "Per batch of 1,000 a writer claims (Lua), inserts (one statement), then acknowledges (Lua) with the batch's order",
    'events sent right behind it on the same connection. What was changed this round, measured side by side:',
    "- ack.lua moves a batch's ids into the deadlines index and out of the purchased set with one `ZADD` and one `SREM`",
    '  per 500 orders, not one of each per order, and takes each pending id once: Redis CPU per acknowledgement of',
    '  1,000 from 14.8 to 10.0 ms; about 7.7 ms of the rest is the `SET ... PXAT` per order (the expiry keys are the design).',
    '- A new batch is a plain insert, with `on conflict do nothing` only after a duplicate (a re-driven batch, or a queued',
    '  order its buyer cancelled): the conflict check before and after each row cost a fifth more (EXPLAIN at 100,000',
    '  rows: 15,095 to 11,101 buffer hits, 6,062 to 5,059 WAL records; Postgres CPU per batch -20%).',
    "- The order events no longer take a round trip of their own queued behind the other writer's script.",
    '- Earlier: `WRITER_CONCURRENCY` (default 2); one `FOR KEY SHARE` read of the sale per statement instead of the',
    "  foreign key; deadlines as epoch milliseconds; expiry key names built from the sale's prefix.",
    `The target is in orders per second, not a ratio, so it moves with the machine: in this run the hello-world ceiling answered ${n(find(r.purchase?.crowd, 'hello')?.load.rps ?? 0)} req/s`,
    '(45,787 in the full run of 2026-11-22, where the writer drained 42,535 orders/s before these changes); against the',
    'one-at-a-time drain of the same run, the ratio in the table above.',
    `What limits it now: CPU per order across three processes on two cores (writer ${cpu('writer')}%, Redis ${cpu('redis')}%, Postgres ${cpu('postgres')}% of a core`,
    'in the median round): the four indexes the insert maintains (each used by a query), the durable commit, and one',
    '`SET` per order in Redis. COPY was not tried (a new client dependency, and it cannot skip ids already written).',
    `At this round's cost, ${n(usPerOrder)} µs of CPU per order across the three processes (Postgres ${n(usOf('postgres'))} µs), 60,000 orders/s`,
    `would keep ${(usPerOrder * 0.06).toFixed(1)} cores busy (Postgres alone ${(usOf('postgres') * 0.06).toFixed(1)}); the machine has ${r.machine.cores}. Timed per step (2026-11-26, a`,
    "batch of 1,000, two in flight): the insert is about 60% of a batch's time and the acknowledgement 30%; with four",
    "in flight the inserts wait on each other's index pages (`LWLock:BufferContent` in `pg_stat_activity`), which is",
    'why more batches in flight do not drain faster.',
  ];
}

function expiryNotes(r: BenchResults): string[] {
  const b = r.expiry?.burst.find((c) => c.closer === 'flashsale');
  if (!b) return [];
  const p99 = b.summary.lateMs.p99 ?? 0;
  return [
    `**Expiry burst** (${n(b.spec.orders)} deadlines in one second: p99 ${n(p99)} ms, ${p99 <= 1000 ? 'met' : missedBy(p99, 1000, false)} of 1 s; ${n(b.summary.closesPerSecond.mean)} closes/s).`,
    'Profiled this round (the listener under `--cpu-prof`, its batches and nudges timed): the expired events came at',
    'about 13,000 a second, since the nudger made one `touch_due` round trip at a time (20-230 ms each under load, 6.7',
    'ms per 1,000 keys on an idle Redis) behind thousands of restore calls on the same connection; and one restore',
    "script call per order was the listener's largest cost (0.8 s of its CPU in writing and decoding calls, 0.6 s more",
    "in garbage collection). What was changed: restore.lua gives back a batch of one sale's orders per call (up to",
    '1,000; the per-order guard in the restored set is unchanged, so a resent call or a duplicate order changes',
    'nothing); the nudger reads the clock on every pass and sends 4 `touch_due` calls at once while a burst is due;',
    'the listener keeps at most 2 close statements in flight, each taking every event that came meanwhile (up to',
    '2,000), instead of up to 10 contending for the same two cores. Side by side on the same machine: p99 1,046 to',
    '686 ms, closes 22,000 to 31,000-33,000 a second. What limits it now: Postgres (about 75% of a core), where each',
    'close writes two row versions (the close, then `restored_at` once the stock is back: the record that makes a',
    "crash between the two recoverable) through the table's indexes, 5-6 WAL records per order. Setting the mark in",
    'the close itself would need the stock back before the close commits, and a close that then rolled back could',
    'let a payment waiting on the row pay an order whose unit was already back on sale: not done. With the machine',
    'loaded by other work (load average 10) one run reached p99 4.7 s: the target holds only with the cores free.',
  ];
}

function memoryNotes(r: BenchResults): string[] {
  const m = r.cost?.memory;
  if (!m) return [];
  const t = r.cost?.memoryWithEnd;
  const worst = Math.max(m.bytesPerPendingOrder, t?.bytesPerPendingOrder ?? 0);
  const figures = t
    ? `${n(t.bytesPerPendingOrder)} B on a sale with an end, ${n(m.bytesPerPendingOrder)} B without`
    : `${n(m.bytesPerPendingOrder)} B`;
  return [
    `**Redis memory per pending order** (${figures}, ${worst <= 400 ? 'met' : missedBy(worst, 400, false)} of 400 B; per queued winner ${n(m.bytesPerQueuedWinner)} B). Measured with`,
    '`MEMORY USAGE` per structure (section 4), then changed: order ids are `<sale>.<22 base64url characters>` instead of',
    'a 36-character uuid (each id is stored up to four times); the deadlines index holds order ids, not expiry key names;',
    'and an id lives in the purchased set while queued and in the deadlines index while pending, never both (ack.lua',
    'moves it, touch_due.lua and a payment or cancel move it back), which is where a resent purchase looks. 526 B before',
    'these changes on this machine. Buyer counts are one hash per sale with one TTL, not a key per buyer with a TTL each',
    'on a sale with an end: measured side by side with 20,000 winners, 429 B with an end and 384 B without before, 376 B',
    'and 375 B after. The release reads both formats and writes the hash only for sales whose meta asks for it (README,',
    '`LEGACY_BUY_COUNTS`: mid-upgrade an older API would otherwise let a buyer past the limit). Not cut: the',
    "queued hash's copy of each winner entry: the order view, cancels, payments and the reconciliation look winners up in it by id.",
  ];
}

export function analysis(r: BenchResults): string {
  const missed = targets(r).filter((t) => t.met === false);
  const head =
    missed.length === 0
      ? ['Every target was met in this run.']
      : [`Missed in this run: ${missed.map((t) => t.what).join('; ')}.`];
  return [
    ...head,
    '',
    ...purchaseNotes(r),
    '',
    ...growthNotes(r),
    '',
    ...writerNotes(r),
    '',
    ...memoryNotes(r),
    '',
    ...expiryNotes(r),
  ].join('\n');
}
