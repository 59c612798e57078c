// Baseline: the enqueue-a-job-per-request design. The HTTP handler adds one BullMQ job per buyer
// and answers 202 with the job id once Redis has it; a separate worker process decides later
// (enqueue-worker.ts). The worker raises a sold-out flag in Redis, which this process reads every
// SOLD_OUT_CACHE_MS in the background, the same staleness as the product's sold-out memory.
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { HttpError } from '../../shared/runtime/errors.js';
import { baseApp, buyerOf, env, PURCHASE_QUEUE, serve, soldOutKey } from './common.js';

const connection = new Redis(env('REDIS_URL'), { maxRetriesPerRequest: null, enableAutoPipelining: true });
const queue = new Queue(PURCHASE_QUEUE, {
  connection,
  defaultJobOptions: {
    removeOnComplete: true,
    removeOnFail: 10_000,
    attempts: 5,
    backoff: { type: 'exponential', delay: 50 },
  },
});
const soldOut = new Set<string>();
const watched = new Set<string>();
const refresh = setInterval(
  () => {
    for (const saleId of watched) {
      void connection.exists(soldOutKey(saleId)).then(
        (n) => (n === 1 ? soldOut.add(saleId) : soldOut.delete(saleId)),
        () => {},
      );
    }
  },
  Number(process.env.SOLD_OUT_CACHE_MS ?? 200),
);

const app = baseApp();
app.post('/api/sales/:saleId/purchases', async (req, reply) => {
  const { saleId, userId, qty } = buyerOf(req);
  watched.add(saleId);
  if (soldOut.has(saleId)) throw new HttpError('sold_out');
  const job = await queue.add('buy', { saleId, userId, qty, at: Date.now() });
  return reply.code(202).send({ orderId: job.id, status: 'queued' });
});
await serve(app, [async () => clearInterval(refresh), () => queue.close(), () => connection.quit()]);
