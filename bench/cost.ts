// Comparison 4: cost and growth of the product. Redis memory per queued winner and per pending
// order (INFO used_memory deltas, and MEMORY USAGE of one of each key), for a sale without end and
// one with an end (its buyer counts expire, which costs memory of its own), and throughput and p99
// of the purchase path as concurrency and the crowd-to-stock ratio grow.
import type { Redis } from 'ioredis';
import { saleKeys, SALES_REGISTRY } from '../shared/redis/keys.js';
import { createSale, parseSaleInput } from '../shared/sales/sale.js';
import {
  BENCH_PRICE,
  Cleanup,
  cli,
  freshDatabase,
  freshRedis,
  progress,
  sleep,
  spawnNode,
  type BenchPostgres,
} from './harness.js';
import { runOnce, type DesignResult } from './purchase.js';
import { seedWinners } from './writer.js';

export interface MemoryResult {
  winners: number;
  /** Whether the sale had an end (absent in results saved before both were measured: it had none). */
  withEnd?: boolean;
  bytesPerQueuedWinner: number;
  bytesPerPendingOrder: number;
  /** MEMORY USAGE of one key of each kind, and the per-entry share of the sale's shared structures. */
  keys: Record<string, number>;
}

const used = async (redis: Redis) => Number(/^used_memory:(\d+)/m.exec(await redis.info('memory'))?.[1] ?? 0);

/** N winners queued by the real purchase script, then drained by the real writer; `withEnd`: the sale ends in two hours. */
export async function measureMemory(pg: BenchPostgres, n: number, withEnd = false): Promise<MemoryResult> {
  const cleanup = new Cleanup();
  try {
    const db = await freshDatabase(pg.url, 'bench_memory');
    cleanup.add(() => db.pool.end());
    const r = await freshRedis(cleanup);
    const saleId = 'mem';
    const endsAt = withEnd ? { endsAt: new Date(Date.now() + 2 * 3_600_000).toISOString() } : {};
    await createSale(
      db.pool,
      r.redis,
      parseSaleInput({ id: saleId, name: saleId, stock: n, ...BENCH_PRICE, paymentWindowSeconds: 3600, ...endsAt }),
    );
    await r.redis.srem(SALES_REGISTRY, saleId);
    const base = await used(r.redis);
    await seedWinners(r.redis, saleId, n);
    const queued = await used(r.redis);
    const k = saleKeys(saleId);
    const [entry] = await r.redis.lrange(k.winners, 0, 0);
    const orderId = entry!.split('|')[0]!;
    const keys: Record<string, number> = {
      'buyer counts hash, per entry': Math.round(
        Number(await r.redis.memory('USAGE', k.buyCounts, 'SAMPLES', '0')) / n,
      ),
      'winners list, per entry': Math.round(Number(await r.redis.memory('USAGE', k.winners, 'SAMPLES', '0')) / n),
      'queued hash, per entry': Math.round(Number(await r.redis.memory('USAGE', k.queued, 'SAMPLES', '0')) / n),
      'purchased set, per entry': Math.round(Number(await r.redis.memory('USAGE', k.purchased, 'SAMPLES', '0')) / n),
    };
    const writer = await spawnNode(
      'order-writer',
      cli('order-writer'),
      { DATABASE_URL: db.url, REDIS_URL: r.url },
      cleanup,
    );
    await r.redis.sadd(SALES_REGISTRY, saleId);
    while ((await r.redis.hlen(k.queued)) > 0 || (await r.redis.llen(k.winners)) > 0) await sleep(50);
    await writer.stop();
    const pending = await used(r.redis);
    keys['expiry key (SET PXAT)'] = Number(await r.redis.memory('USAGE', k.expiry(orderId)));
    keys['deadlines zset, per entry'] = Math.round(
      Number(await r.redis.memory('USAGE', k.deadlines, 'SAMPLES', '0')) / n,
    );
    progress(
      `memory: ${n} winners, sale ${withEnd ? 'with' : 'without'} end: ${Math.round((queued - base) / n)} B queued, ${Math.round((pending - base) / n)} B pending`,
    );
    return {
      winners: n,
      withEnd,
      bytesPerQueuedWinner: Math.round((queued - base) / n),
      bytesPerPendingOrder: Math.round((pending - base) / n),
      keys,
    };
  } finally {
    await cleanup.run();
  }
}

export interface GrowthRow {
  axis: 'concurrency' | 'crowd' | 'connecting';
  value: string;
  stock: number;
  buyers: number;
  connections: number;
  result: DesignResult;
}

/** The product alone: the same purchase run at each concurrency, then at each buyers-to-stock ratio. */
export async function runGrowth(
  pg: BenchPostgres,
  s: { buyers: number; stock: number; concurrencies: number[]; ratios: number[]; warmupBuyers: number },
): Promise<GrowthRow[]> {
  const rows: GrowthRow[] = [];
  for (const c of s.concurrencies) {
    progress(`growth: concurrency ${c}, stock ${s.stock}, ${s.buyers} buyers`);
    const result = await runOnce('flashsale', pg, {
      stock: s.stock,
      buyers: s.buyers,
      connections: c,
      warmupBuyers: s.warmupBuyers,
    });
    rows.push({ axis: 'concurrency', value: String(c), stock: s.stock, buyers: s.buyers, connections: c, result });
  }
  // The crowd connecting while the process is already busy instead of before the sale opens:
  // Node accepts one connection per event-loop turn, so late connections wait to be accepted.
  progress(`growth: concurrency 500, buyers connecting during the load`);
  const cold = await runOnce('flashsale', pg, {
    stock: s.stock,
    buyers: s.buyers,
    connections: 500,
    warmupBuyers: s.warmupBuyers,
    holdMs: 0,
  });
  rows.push({
    axis: 'connecting',
    value: 'during the load',
    stock: s.stock,
    buyers: s.buyers,
    connections: 500,
    result: cold,
  });
  for (const ratio of s.ratios) {
    const stock = Math.max(1, Math.round(s.buyers / ratio));
    progress(`growth: ${ratio}x buyers per unit, stock ${stock}, ${s.buyers} buyers`);
    const result = await runOnce('flashsale', pg, {
      stock,
      buyers: s.buyers,
      connections: 500,
      warmupBuyers: s.warmupBuyers,
    });
    rows.push({ axis: 'crowd', value: `${ratio}x`, stock, buyers: s.buyers, connections: 500, result });
  }
  return rows;
}
