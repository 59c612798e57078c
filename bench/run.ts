// `npm run bench [-- --quick] [--only purchase,variants,writer,expiry,cost,cluster,ratelimit,machine,profile,events,outbox] [--render]`: starts its own
// Postgres and Redis servers, runs each comparison, saves bench/results/bench.json and writes
// BENCHMARKS.md and the headline of README.md and docs/benchmarks.md (--render, which is
// `npm run docs:bench`: only rewrites them from the saved results).
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { relative } from 'node:path';
import { parseArgs } from 'node:util';
import { writeDocuments } from './document.js';
import type { SavedBench } from './headline.js';
import { runCluster } from './cluster.js';
import { measureMemory, runGrowth } from './cost.js';
import { runEvents } from './events.js';
import { runOutbox } from './outbox.js';
import { runCase, runTimeliness, TIMELINESS_PRESET, type CaseSpec } from './expiry.js';
import { Cleanup, progress, startBenchPostgres } from './harness.js';
import { WRK_INSTALL, wrkVersion } from './load.js';
import { machine } from './machine.js';
import { runPurchase } from './purchase.js';
import { runProfiles } from './profiles.js';
import { runRateLimit } from './rate-limit.js';
import type { BenchResults } from './report.js';
import { runWholeMachine } from './whole-machine.js';
import { runVariants } from './variants.js';
import { runWriter } from './writer.js';
import { execFileSync } from 'node:child_process';

const { values: flags } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string' },
    render: { type: 'boolean', default: false },
  },
});
const quick = flags.quick;
const resultsFile = new URL('./results/bench.json', import.meta.url);
if (flags.render) {
  // --render: the documents again from the saved results, without running anything.
  console.log(
    `written: ${writeDocuments()
      .map((f) => relative(process.cwd(), f))
      .join(', ')}`,
  );
  process.exit(0);
}
const parts = new Set(
  (flags.only ?? 'purchase,variants,writer,expiry,cost,cluster,ratelimit,machine,profile,events,outbox').split(','),
);

const P = quick
  ? {
      purchase: { stock: 2_500, buyers: 50_000, connections: 500, rounds: 1, warmupBuyers: 10_000 },
      allWin: { stock: 10_000, buyers: 10_000, connections: 500, rounds: 1, warmupBuyers: 5_000 },
      rateLimit: {
        crowd: { stock: 2_500, buyers: 50_000, connections: 500, rounds: 5, warmupBuyers: 10_000 },
        allWin: { stock: 20_000, buyers: 20_000, connections: 500, rounds: 5, warmupBuyers: 5_000 },
      },
      writer: {
        winners: 50_000,
        baselineWinners: 5_000,
        drains: [
          { batchSize: 1000, concurrency: 2 },
          { batchSize: 1000, concurrency: 1 },
        ],
        rounds: 1,
      },
      // The timeliness bench's own presets take minutes even with --quick: a shorter custom run.
      timelinessArgs: [
        '--orders',
        '10000',
        '--window-s',
        '20',
        '--noise',
        '100000',
        '--baseline-orders',
        '2000',
        '--baseline-window-s',
        '10',
        '--grace-s',
        '10',
        '--lead-s',
        '5',
      ],
      spread: { kind: 'spread', orders: 10_000, windowS: 20, noise: 100_000, leadS: 8, graceS: 10 } as CaseSpec,
      burst: { kind: 'burst', orders: 20_000, windowS: 300, noise: 100_000, leadS: 10, graceS: 20 } as CaseSpec,
      growth: {
        buyers: 20_000,
        stock: 1_000,
        concurrencies: [100, 500, 2000],
        ratios: [1, 10, 100],
        warmupBuyers: 5_000,
      },
      memoryWinners: 20_000,
      profile: { buyers: 20_000, connections: 500, tableOrders: 100_000 },
      cluster: {
        buyers: 20_000,
        warmupBuyers: 5_000,
        connections: 500,
        rounds: 2,
        sales: 30,
        expiry: { orders: 5_000, windowS: 5, leadS: 6, graceS: 20 },
      },
      machine: {
        crowd: { stock: 2_500, buyers: 50_000, connections: 500, rounds: 3, warmupBuyers: 10_000 },
        allWin: { stock: 40_000, buyers: 40_000, connections: 500, rounds: 3, warmupBuyers: 5_000 },
      },
      events: { events: 5_000, rounds: 3 },
      outbox: { rounds: 20, batches: 10, batchSize: 1_000 },
    }
  : {
      purchase: { stock: 10_000, buyers: 200_000, connections: 500, rounds: 3, warmupBuyers: 20_000 },
      allWin: { stock: 40_000, buyers: 40_000, connections: 500, rounds: 3, warmupBuyers: 10_000 },
      rateLimit: {
        crowd: { stock: 10_000, buyers: 200_000, connections: 500, rounds: 3, warmupBuyers: 20_000 },
        allWin: { stock: 40_000, buyers: 40_000, connections: 500, rounds: 3, warmupBuyers: 10_000 },
      },
      writer: {
        winners: 100_000,
        baselineWinners: 20_000,
        drains: [
          { batchSize: 1000, concurrency: 2 },
          { batchSize: 1000, concurrency: 1 },
          { batchSize: 1000, concurrency: 4 },
          { batchSize: 5000, concurrency: 2 },
        ],
        rounds: 3,
      },
      timelinessArgs: [] as string[],
      spread: { kind: 'spread', ...TIMELINESS_PRESET.full, leadS: 40, graceS: 60 } as CaseSpec,
      burst: {
        kind: 'burst',
        orders: 50_000,
        windowS: 300,
        noise: TIMELINESS_PRESET.full.noise,
        leadS: 30,
        graceS: 60,
      } as CaseSpec,
      growth: {
        buyers: 200_000,
        stock: 10_000,
        concurrencies: [100, 500, 2000],
        ratios: [1, 10, 100],
        warmupBuyers: 20_000,
      },
      memoryWinners: 100_000,
      profile: { buyers: 40_000, connections: 500, tableOrders: 200_000 },
      cluster: {
        buyers: 40_000,
        warmupBuyers: 10_000,
        connections: 500,
        rounds: 3,
        sales: 30,
        expiry: { orders: 20_000, windowS: 5, leadS: 10, graceS: 30 },
      },
      machine: {
        crowd: { stock: 10_000, buyers: 200_000, connections: 500, rounds: 3, warmupBuyers: 20_000 },
        allWin: { stock: 100_000, buyers: 100_000, connections: 500, rounds: 3, warmupBuyers: 10_000 },
      },
      events: { events: 20_000, rounds: 3 },
      outbox: { rounds: 40, batches: 20, batchSize: 1_000 },
    };

const wrk = wrkVersion();
if (
  !wrk &&
  (parts.has('purchase') ||
    parts.has('cost') ||
    parts.has('cluster') ||
    parts.has('ratelimit') ||
    parts.has('machine') ||
    parts.has('profile'))
) {
  console.error(
    `wrk (the load generator) is not installed. Install it with:\n\n  ${WRK_INSTALL}\n\nor run only the parts that need no load generator: npm run bench -- --only writer,expiry`,
  );
  process.exit(2);
}
const redisVersion =
  execFileSync('redis-server', ['--version'], { encoding: 'utf8' }).match(/v=(\S+)/)?.[1] ?? 'unknown';

const cleanup = new Cleanup();
for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.once(signal, () => void cleanup.run().finally(() => process.exit(130)));
const started = performance.now();
try {
  const pg = await startBenchPostgres(cleanup);
  const results: BenchResults = {
    mode: quick ? 'quick' : 'full',
    at: new Date().toISOString(),
    seconds: 0,
    machine: machine({ 'redis-server': redisVersion, postgres: pg.version, wrk: wrk ?? 'not installed' }),
  };
  progress(
    `bench (${results.mode}): ${[...parts].join(', ')}; load average ${results.machine.loadAvgAtStart.join(' ')}`,
  );
  if (parts.has('purchase')) {
    // Without the sold-out memory every buyer reaches Redis or Postgres: the full run only (minutes).
    const crowd = await runPurchase(pg, P.purchase, [
      'hello',
      'flashsale',
      'rowlock',
      'enqueue',
      ...(quick ? [] : (['flashsale-nomem', 'rowlock-nomem'] as const)),
    ]);
    const allWin = await runPurchase(pg, P.allWin, ['hello', 'flashsale', 'rowlock', 'enqueue']);
    results.purchase = { settings: P.purchase, crowd, allWin, allWinSettings: P.allWin };
  }
  // Beside the purchase part, with its crowds: 12 variants against one, two rounds even in --quick (a ratio of one run each would be noise).
  if (parts.has('variants'))
    results.variants = await runVariants(pg, [
      { ...P.purchase, rounds: Math.max(2, P.purchase.rounds) },
      { ...P.allWin, rounds: Math.max(2, P.allWin.rounds) },
    ]);
  if (parts.has('writer')) results.writer = await runWriter(pg, P.writer);
  if (parts.has('expiry')) {
    const timeliness = await runTimeliness(P.timelinessArgs).catch((err: Error) => {
      progress(`timeliness bench failed: ${err.message}`);
      return null;
    });
    const spread = [await runCase(pg, 'bullmq', P.spread)];
    const burst = [await runCase(pg, 'flashsale', P.burst), await runCase(pg, 'bullmq', P.burst)];
    results.expiry = { timeliness, spread, burst };
  }
  if (parts.has('cost')) {
    const memory = await measureMemory(pg, P.memoryWinners);
    const memoryWithEnd = await measureMemory(pg, P.memoryWinners, true);
    const growth = await runGrowth(pg, P.growth);
    results.cost = { memory, memoryWithEnd, growth };
  }
  if (parts.has('cluster')) results.cluster = await runCluster(pg, P.cluster);
  if (parts.has('profile')) results.profile = await runProfiles(pg, P.profile);
  if (parts.has('ratelimit')) results.rateLimit = await runRateLimit(pg, P.rateLimit.crowd, P.rateLimit.allWin);
  if (parts.has('events')) results.events = await runEvents(pg, P.events);
  if (parts.has('outbox')) results.outbox = await runOutbox(pg, P.outbox);
  if (parts.has('machine')) results.wholeMachine = await runWholeMachine(pg, P.machine.crowd, P.machine.allWin);
  results.seconds = Math.round((performance.now() - started) / 1000);

  mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
  const file = resultsFile;
  const saved = existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as SavedBench) : {};
  // A partial run (--only) replaces its parts in the last run of the same mode and is noted there.
  const last = saved[results.mode];
  saved[results.mode] =
    flags.only && last
      ? {
          ...last,
          ...results,
          at: last.at,
          seconds: last.seconds,
          machine: last.machine,
          reruns: [
            ...(last.reruns ?? []),
            {
              parts: [...parts],
              at: results.at,
              seconds: results.seconds,
              loadAvgAtStart: results.machine.loadAvgAtStart,
            },
          ],
        }
      : results;
  writeFileSync(file, `${JSON.stringify(saved, null, 2)}\n`);
  writeDocuments(saved);
  progress(`wrote bench/results/bench.json, BENCHMARKS.md and the README's headline in ${results.seconds} s`);
} finally {
  await cleanup.run();
}
