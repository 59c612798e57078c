// Comparison 3: expiry. The spread case is bench/expiry-timeliness.ts itself (run as it is, its
// JSON read back); beside it, the same scenario closed by BullMQ delayed jobs, and a burst (N
// orders whose deadlines fall in the same second) closed by each. Lateness and close rates come
// from Postgres timestamps through the timeliness bench's own stats (bench/stats.ts).
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Pool } from '../shared/runtime/db.js';
import { saleKeys } from '../shared/redis/keys.js';
import { acknowledgeBatch } from '../shared/pipeline/writer-scripts.js';
import { createSale, parseSaleInput } from '../shared/sales/sale.js';
import { CLOSE_QUEUE } from './baselines/common.js';
import {
  BENCH_PRICE,
  Cleanup,
  cli,
  freshDatabase,
  freshRedis,
  progress,
  sleep,
  spawnNode,
  tsScript,
  type BenchPostgres,
} from './harness.js';
import { Monitor, type ProcCost } from './procstat.js';
import { lateness, redisCounters, summarize, type Summary } from './stats.js';

export type Closer = 'flashsale' | 'bullmq';
export interface CaseSpec {
  kind: 'spread' | 'burst';
  orders: number;
  windowS: number;
  noise: number;
  leadS: number;
  graceS: number;
}
export interface CaseResult {
  closer: Closer;
  spec: CaseSpec;
  summary: Summary;
  procs: ProcCost[];
  redisBytesPerOrder: number;
}

/** The timeliness bench's own presets (bench/expiry-timeliness.ts), so the BullMQ run matches it. */
export const TIMELINESS_PRESET = {
  quick: { orders: 20_000, windowS: 60, noise: 200_000 },
  full: { orders: 100_000, windowS: 300, noise: 1_000_000 },
};

const NOISE_LUA = `for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  redis.call('SET', 'bench:noise:' .. i, 'x', 'EX', tonumber(ARGV[3]) + i % 3600)
end`;

async function usedMemory(redis: Redis): Promise<number> {
  return Number(/^used_memory:(\d+)/m.exec(await redis.info('memory'))?.[1] ?? 0);
}

/** Pending rows in Postgres, each bought one payment window before its deadline. */
async function insertPending(
  pool: Pool,
  saleId: string,
  batch: { orderId: string; expiresAt: number }[],
  windowS: number,
  seq0: number,
): Promise<void> {
  await pool.query(
    `insert into orders (id, sale_id, user_id, qty, status, seq, purchased_at, created_at, expires_at)
     select t.id, $1, 'user-' || t.seq, 1, 'pending', t.seq, e.at - make_interval(secs => $5), e.at - make_interval(secs => $5), e.at
     from unnest($2::text[], $3::bigint[], $4::bigint[]) as t(id, seq, expires_ms)
     cross join lateral (select timestamptz 'epoch' + t.expires_ms * interval '1 millisecond' as at) e`,
    [saleId, batch.map((o) => o.orderId), batch.map((_, i) => seq0 + i + 1), batch.map((o) => o.expiresAt), windowS],
  );
}

export async function runCase(pg: BenchPostgres, closer: Closer, spec: CaseSpec): Promise<CaseResult> {
  const cleanup = new Cleanup();
  const label = `${closer} ${spec.kind}`;
  try {
    const db = await freshDatabase(pg.url, `bench_expiry_${closer}`);
    cleanup.add(() => db.pool.end());
    const r = await freshRedis(cleanup);
    const runS = spec.leadS + spec.windowS + spec.graceS + 600;
    progress(`[${label}] filling ${spec.noise} unrelated TTL keys`);
    for (let from = 1; from <= spec.noise; from += 50_000)
      await r.redis.eval(NOISE_LUA, 0, from, Math.min(from + 49_999, spec.noise), runS);
    const saleId = `expiry-${spec.kind}`;
    await createSale(
      db.pool,
      r.redis,
      parseSaleInput({
        id: saleId,
        name: saleId,
        stock: spec.orders,
        ...BENCH_PRICE,
        paymentWindowSeconds: spec.windowS,
      }),
    );
    const env = { DATABASE_URL: db.url, REDIS_URL: r.url };
    const proc =
      closer === 'flashsale'
        ? await spawnNode('expiry-listener', cli('expiry-listener'), env, cleanup)
        : await spawnNode('bullmq-closer', tsScript('bench/baselines/bullmq-closer.ts'), env, cleanup);
    let queue: Queue | null = null;
    if (closer === 'bullmq') {
      const connection = r.redis.duplicate({ maxRetriesPerRequest: null });
      connection.on('error', () => {});
      cleanup.add(() => connection.quit());
      // BullMQ leaves a connection it was given open: closed above, after the queue.
      queue = new Queue(CLOSE_QUEUE, { connection });
      cleanup.add(() => queue?.close());
    }

    const memBefore = await usedMemory(r.redis);
    const firstDeadline = Date.now() + spec.leadS * 1000;
    const spanMs = spec.kind === 'burst' ? 1000 : spec.windowS * 1000;
    progress(
      `[${label}] seeding ${spec.orders} pending orders, deadlines over ${spanMs / 1000} s from +${spec.leadS} s`,
    );
    for (let from = 0; from < spec.orders; from += 1000) {
      const batch = Array.from({ length: Math.min(1000, spec.orders - from) }, (_, j) => ({
        orderId: `${saleId}.${randomUUID()}`,
        expiresAt: firstDeadline + Math.floor(((from + j) * spanMs) / spec.orders),
      }));
      await insertPending(db.pool, saleId, batch, spec.windowS, from);
      if (queue) {
        const now = Date.now();
        await queue.addBulk(
          batch.map((o) => ({
            name: 'close',
            data: { orderId: o.orderId },
            opts: {
              jobId: o.orderId,
              delay: o.expiresAt - now,
              attempts: 100,
              backoff: { type: 'fixed', delay: 20 },
              removeOnComplete: true,
              removeOnFail: true,
            },
          })),
        );
      } else {
        // As the writer leaves them: an expiry key firing at the deadline and its deadlines entry.
        await acknowledgeBatch(r.redis, saleId, 'bench-seed', batch, []);
      }
    }
    if (Date.now() >= firstDeadline) throw new Error(`[${label}] seeding overran the first deadline: raise the lead`);
    const redisBytesPerOrder = Math.round(((await usedMemory(r.redis)) - memBefore) / spec.orders);
    // Seeding squeezes a payment window of inserts into seconds; on a live table autovacuum would
    // have analyzed them by the deadline. Without statistics the planner takes the partial due
    // index for closeDue and scans every due order per batch (see BENCHMARKS.md).
    await db.pool.query('analyze orders');
    await r.redis.decrby(saleKeys(saleId).available, spec.orders);
    progress(`[${label}] seeded, ${firstDeadline - Date.now()} ms before the first deadline`);

    const before = await redisCounters(r.redis);
    const monitor = new Monitor([
      { name: closer === 'flashsale' ? 'listener' : 'closer', pid: proc.pid },
      { name: 'redis', pid: r.pid },
      { name: 'postgres', pid: pg.pid, tree: true },
    ]);
    while (Date.now() < firstDeadline - 500) await sleep(200);
    monitor.start();
    const cutoff = firstDeadline + spanMs + spec.graceS * 1000;
    const open = async () =>
      (
        await db.pool.query<{ n: number }>(
          'select count(*)::int as n from orders where sale_id = $1 and restored_at is null',
          [saleId],
        )
      ).rows[0]!.n;
    while (Date.now() < cutoff && (await open()) > 0) await sleep(200);
    const procs = monitor.stop();
    const after = await redisCounters(r.redis);
    const available = Number(await r.redis.get(saleKeys(saleId).available));
    const rows = await lateness(db.pool, saleId);
    const summary = summarize(
      { label, orders: spec.orders, windowS: spanMs / 1000, nudgeMs: closer === 'flashsale' ? 100 : 0 },
      rows,
      Math.min(Date.now(), cutoff),
      {
        closedByListener: rows.filter((x) => x.closedMs !== null).length,
        events: 0,
        available,
        redis: { before, after },
      },
    );
    progress(
      `[${label}] closed ${summary.closed}/${spec.orders}, p99 ${summary.lateMs.p99} ms, max ${summary.lateMs.max} ms, early ${summary.closedEarly}, ${summary.closesPerSecond.mean}/s`,
    );
    return { closer, spec, summary, procs, redisBytesPerOrder };
  } finally {
    await cleanup.run();
  }
}

export interface TimelinessRun {
  options: Record<string, number>;
  phases: Summary[];
  exitCode: number | null;
}
/** bench/results/expiry-timeliness.json: the latest run of each mode (quick, full, custom). */
export type SavedTimeliness = Record<string, { at: string; options: Record<string, number>; phases: Summary[] }>;

/**
 * bench/expiry-timeliness.ts as it is, in its own process, with `args` (none: its full preset);
 * its results come back from the JSON it writes, under the mode it names them by.
 */
export async function runTimeliness(args: string[]): Promise<TimelinessRun> {
  const mode = args.length === 0 ? 'full' : args.length === 1 && args[0] === '--quick' ? 'quick' : 'custom';
  progress(`expiry: running bench/expiry-timeliness.ts ${args.join(' ')}`);
  const startedAt = new Date().toISOString();
  const child = spawn(process.execPath, ['--import', 'tsx', 'bench/expiry-timeliness.ts', ...args], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const exitCode = await new Promise<number | null>((res) => child.once('exit', (c) => res(c)));
  const file = new URL('./results/expiry-timeliness.json', import.meta.url);
  const saved = JSON.parse(readFileSync(file, 'utf8')) as SavedTimeliness;
  const run = saved[mode];
  if (!run || run.at < startedAt)
    throw new Error(`bench/expiry-timeliness.ts wrote no "${mode}" result (exit ${exitCode})`);
  return { options: run.options, phases: run.phases, exitCode };
}
