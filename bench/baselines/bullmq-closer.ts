// Baseline: unpaid orders closed by BullMQ delayed jobs, one job per order due at its deadline.
// The job does what the product's listener does for an order: the conditional close in Postgres
// (never before the deadline), then stock and quota back through the same idempotent restore. A
// job that fires a hair before Postgres's clock reaches the deadline is retried 20 ms later
// (the bench adds jobs with attempts and a fixed 20 ms backoff).
import { Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { createPool } from '../../shared/runtime/db.js';
import { restore } from '../../shared/orders/close.js';
import { closeDue, stillPending } from '../../shared/orders/queries.js';
import { createRedis } from '../../shared/redis/connect.js';
import { CLOSE_QUEUE, env } from './common.js';

const concurrency = Number(env('CONCURRENCY', '100'));
const pool = createPool(env('DATABASE_URL'), Number(env('POOL_SIZE', '20')));
const redis = createRedis(env('REDIS_URL'));
let closed = 0;

const worker = new Worker<{ orderId: string }>(
  CLOSE_QUEUE,
  async (job: Job<{ orderId: string }>) => {
    const done = await closeDue(pool, [job.data.orderId]);
    if (done.length === 0) {
      // Paid or closed by someone else: nothing to do. Still pending before its deadline: retry.
      if ((await stillPending(pool, [job.data.orderId])).length > 0) throw new Error('fired before the deadline');
      return;
    }
    await restore(pool, redis, done);
    closed += done.length;
  },
  {
    connection: new Redis(env('REDIS_URL'), { maxRetriesPerRequest: null }),
    concurrency,
  },
);
await worker.waitUntilReady();
process.send?.('ready');
process.on('message', (m) => {
  if (m === 'count') process.send?.({ closed });
});
process.once('SIGTERM', () => {
  void (async () => {
    for (const close of [() => worker.close(), () => redis.quit(), () => pool.end()]) await close().catch(() => {});
    process.exit(0);
  })();
});
