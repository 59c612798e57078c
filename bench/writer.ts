// Comparison 2: the order writer. N queued winners (made by the real purchase script) drained into
// Postgres with their expiry keys set: the product's writer daemon against a one-at-a-time drain,
// each as its own process, on fresh servers each.
import { loadavg } from 'node:os';
import type { Redis } from 'ioredis';
import { newOrderId } from '../shared/runtime/ids.js';
import { saleKeys, SALES_REGISTRY } from '../shared/redis/keys.js';
import { purchaseScript } from '../shared/sales/scripts.js';
import { createSale, parseSaleInput } from '../shared/sales/sale.js';
import type { Pool } from '../shared/runtime/db.js';
import {
  BENCH_PRICE,
  Cleanup,
  cli,
  freshDatabase,
  freshRedis,
  progress,
  spawnNode,
  tsScript,
  until,
  type BenchPostgres,
} from './harness.js';
import { Monitor, type ProcCost } from './procstat.js';

export interface WriterResult {
  label: string;
  batchSize: number | null;
  /** Batches in flight in the writer process (WRITER_CONCURRENCY); null for the baseline. */
  concurrency?: number | null;
  orders: number;
  seconds: number;
  perSecond: number;
  expiryKeys: number;
  correct: boolean;
  procs: ProcCost[];
  /** Orders per second of every round (the figures above are the median round's). */
  rounds: number[];
  loadAvg: number;
}

const SALE = 'drain';

/** Winners as buyers leave them: one purchase.lua call each, pipelined. */
export async function seedWinners(redis: Redis, saleId: string, n: number, prefix = 'w-'): Promise<void> {
  for (let from = 0; from < n; from += 5000) {
    const calls = [];
    for (let i = from; i < Math.min(from + 5000, n); i++) {
      calls.push(
        purchaseScript(redis, {
          saleId,
          userId: `${prefix}${i}`,
          qty: 1,
          orderId: newOrderId(saleId),
          buyCountTtlSeconds: 86_400,
        }),
      );
    }
    const res = await Promise.all(calls);
    if (res.some(([code]) => code !== 1)) throw new Error('seeding winners: a purchase was refused');
  }
}

async function check(pool: Pool, redis: Redis, n: number): Promise<{ correct: boolean; expiryKeys: number }> {
  const k = saleKeys(SALE);
  const rows = (
    await pool.query<{ n: number }>('select count(*)::int as n from orders where sale_id = $1 and status = $2', [
      SALE,
      'pending',
    ])
  ).rows[0]!.n;
  const [deadlines, queued, winners] = await Promise.all([
    redis.zcard(k.deadlines),
    redis.hlen(k.queued),
    redis.llen(k.winners),
  ]);
  // Every deadline entry (an order id) must have its key (sampled: 1,000 of them).
  const sample = (await redis.zrange(k.deadlines, '0', '999')).map((id) => k.expiry(id));
  const live = sample.length ? await redis.exists(...sample) : 0;
  return {
    correct: rows === n && deadlines === n && queued === 0 && winners === 0 && live === sample.length,
    expiryKeys: deadlines,
  };
}

/** A drain to measure: the product's writer with these settings, or (batchSize null) the one-at-a-time baseline. */
export interface Drain {
  batchSize: number | null;
  concurrency: number | null;
}

/** One drain on fresh servers. */
export async function runDrain(pg: BenchPostgres, n: number, { batchSize, concurrency }: Drain): Promise<WriterResult> {
  const cleanup = new Cleanup();
  try {
    const db = await freshDatabase(pg.url, 'bench_writer');
    cleanup.add(() => db.pool.end());
    const r = await freshRedis(cleanup);
    await createSale(
      db.pool,
      r.redis,
      parseSaleInput({ id: SALE, name: SALE, stock: n, ...BENCH_PRICE, paymentWindowSeconds: 3600 }),
    );
    // Out of the registry until the clock starts: the writer finds nothing to do before then.
    await r.redis.srem(SALES_REGISTRY, SALE);
    await seedWinners(r.redis, SALE, n);
    const env = {
      DATABASE_URL: db.url,
      REDIS_URL: r.url,
      SALE_ID: SALE,
      WRITER_BATCH_SIZE: String(batchSize ?? 1),
      WRITER_CONCURRENCY: String(concurrency ?? 1),
    };
    const proc =
      batchSize === null
        ? await spawnNode('drain-one', tsScript('bench/baselines/drain-one.ts'), env, cleanup)
        : await spawnNode('order-writer', cli('order-writer'), env, cleanup);
    const loadAvg = Math.round(loadavg()[0]! * 100) / 100;
    const monitor = new Monitor([
      { name: 'writer', pid: proc.pid },
      { name: 'redis', pid: r.pid },
      { name: 'postgres', pid: pg.pid, tree: true },
    ]);
    monitor.start();
    const t0 = performance.now();
    if (batchSize === null) proc.child.send('go');
    else await r.redis.sadd(SALES_REGISTRY, SALE);
    const k = saleKeys(SALE);
    // Polled every 20 ms: the drain's clock stops here.
    await until(
      'the drain',
      1_800_000,
      async () => (await r.redis.hlen(k.queued)) === 0 && (await r.redis.llen(k.winners)) === 0,
      20,
    );
    const seconds = (performance.now() - t0) / 1000;
    const procs = monitor.stop();
    const { correct, expiryKeys } = await check(db.pool, r.redis, n);
    const label =
      batchSize === null
        ? 'one-at-a-time drain'
        : `flashsale order-writer, batch ${batchSize}, ${concurrency} in flight`;
    progress(`  ${label}: ${n} orders in ${seconds.toFixed(2)} s = ${Math.round(n / seconds)}/s, correct ${correct}`);
    return {
      label,
      batchSize,
      concurrency,
      orders: n,
      seconds: Math.round(seconds * 100) / 100,
      perSecond: Math.round(n / seconds),
      expiryKeys,
      correct,
      procs,
      rounds: [],
      loadAvg,
    };
  } finally {
    await cleanup.run();
  }
}

/**
 * Each drain `rounds` times, the drains interleaved within a round so machine noise falls on all
 * alike; per drain the round with the median rate, with every round's rate beside it.
 */
export async function runWriter(
  pg: BenchPostgres,
  opts: { winners: number; baselineWinners: number; drains: Drain[]; rounds: number },
): Promise<WriterResult[]> {
  const drains: Drain[] = [...opts.drains, { batchSize: null, concurrency: null }];
  const runs = new Map<Drain, WriterResult[]>(drains.map((d) => [d, []]));
  for (let round = 1; round <= opts.rounds; round++) {
    for (const d of drains) {
      const n = d.batchSize === null ? opts.baselineWinners : opts.winners;
      progress(
        `writer round ${round}/${opts.rounds}: draining ${n} winners ${d.batchSize === null ? 'one at a time' : `in batches of ${d.batchSize}, ${d.concurrency} in flight`}`,
      );
      runs.get(d)!.push(await runDrain(pg, n, d));
    }
  }
  return drains.map((d) => {
    const all = runs.get(d)!;
    const median = [...all].sort((x, y) => x.perSecond - y.perSecond)[Math.floor((all.length - 1) / 2)]!;
    return { ...median, rounds: all.map((r) => r.perSecond), correct: all.every((r) => r.correct) };
  });
}
