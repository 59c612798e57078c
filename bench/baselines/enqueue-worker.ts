// The enqueue design's worker: takes purchase jobs and decides each with the row-lock transaction
// (the same code as the row-lock baseline), CONCURRENCY jobs at once on a pool of as many
// connections. Sets the sold-out flag the API reads.
import { Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { createPool } from '../../shared/runtime/db.js';
import { HttpError } from '../../shared/runtime/errors.js';
import { env, PURCHASE_QUEUE, soldOutKey } from './common.js';
import { rowLockPurchase } from './rowlock-tx.js';

const concurrency = Number(env('CONCURRENCY', '20'));
const pool = createPool(env('DATABASE_URL'), concurrency);
const redis = new Redis(env('REDIS_URL'), { maxRetriesPerRequest: null });

type Buy = { saleId: string; userId: string; qty: number };
const worker = new Worker<Buy, string>(
  PURCHASE_QUEUE,
  async (job: Job<Buy>) => {
    const { saleId, userId, qty } = job.data;
    try {
      return await rowLockPurchase(pool, saleId, userId, qty);
    } catch (err) {
      // A refusal is a decision, not a failure: the job completes with it.
      if (!(err instanceof HttpError) || err.status >= 500) throw err;
      if (err.code === 'sold_out') await redis.set(soldOutKey(saleId), '1');
      return err.code;
    }
  },
  { connection: new Redis(env('REDIS_URL'), { maxRetriesPerRequest: null }), concurrency },
);
await worker.waitUntilReady();
process.send?.('ready');
process.once('SIGTERM', () => {
  void (async () => {
    for (const close of [() => worker.close(), () => redis.quit(), () => pool.end()]) await close().catch(() => {});
    process.exit(0);
  })();
});
