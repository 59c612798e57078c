// Daemon one: drains every sale's winners into Postgres orders, a batch at a time, and sets each
// order's expiry key. The batch sits in this writer's own processing list until it is written and
// acknowledged; a writer that dies holding one is re-driven by whoever sees its lease run out.
import type { Redis } from 'ioredis';
import type { Config } from './config.js';
import { delay } from './daemon.js';
import type { Pool } from './db.js';
import { closeDue, restore } from './expiry.js';
import { parseWinner, SALES_REGISTRY, saleKeys } from './keys.js';
import type { Logger } from './logger.js';
import { writeOrders } from './orders.js';
import { countBackendError, metrics, observeClosed } from './metrics.js';
import { ackBatch, claimBatch, recoverWriter } from './redis.js';

export interface WriterDeps {
  pool: Pool;
  redis: Redis;
  logger: Logger;
  config: Pick<Config, 'writerId' | 'writerBatchSize' | 'writerLeaseMs' | 'writerIdleMs'>;
}

/** Moves the batches of writers whose lease ran out back to the winners lists. */
export async function recoverDeadWriters(redis: Redis, saleIds: string[], now = Date.now(), except?: string): Promise<number> {
  let moved = 0;
  for (const saleId of saleIds) {
    const dead = await redis.zrangebyscore(saleKeys(saleId).writers, '-inf', now);
    for (const writerId of dead) {
      if (writerId !== except) moved += await recoverWriter(redis, saleId, writerId, now);
    }
  }
  return moved;
}

export class OrderWriter {
  private readonly abort = new AbortController();
  private running: Promise<void> | undefined;
  private lastRecovery = 0;
  private lastGauge = 0;
  written = 0;

  constructor(private readonly deps: WriterDeps) {}

  start(): void {
    this.running ??= this.loop();
  }

  stop(): Promise<void> {
    this.abort.abort();
    return this.running ?? Promise.resolve();
  }

  private async loop(): Promise<void> {
    const { logger, config } = this.deps;
    let failures = 0;
    while (!this.abort.signal.aborted) {
      try {
        const n = await this.drainOnce();
        failures = 0;
        if (n === 0) await delay(config.writerIdleMs, this.abort.signal);
      } catch (err) {
        failures++;
        countBackendError(err);
        logger.error({ err }, 'order writer pass failed');
        await delay(Math.min(100 * 2 ** failures, 5000) * (0.5 + Math.random()), this.abort.signal);
      }
    }
  }

  /** One pass over every sale; returns how many orders it wrote. */
  async drainOnce(): Promise<number> {
    const { redis, config } = this.deps;
    const saleIds = await redis.smembers(SALES_REGISTRY);
    const now = Date.now();
    if (now - this.lastRecovery > config.writerLeaseMs / 2) {
      this.lastRecovery = now;
      await recoverDeadWriters(redis, saleIds, now, config.writerId);
    }
    let total = 0;
    if (now - this.lastGauge > 1000) {
      this.lastGauge = now;
      for (const saleId of saleIds) metrics.winnersQueued.set({ sale: saleId }, await redis.llen(saleKeys(saleId).winners));
    }
    for (const saleId of saleIds) {
      // Stop between batches, never inside one: a batch in hand is finished before exit.
      if (this.abort.signal.aborted) break;
      total += await this.writeBatch(saleId);
    }
    return total;
  }

  private async writeBatch(saleId: string): Promise<number> {
    const { pool, redis, logger, config } = this.deps;
    const entries = await claimBatch(redis, saleId, config.writerId, config.writerBatchSize, Date.now() + config.writerLeaseMs);
    if (entries.length === 0) return 0;
    // A re-driven batch may repeat an entry; one row per order id.
    const winners = [...new Map(entries.map((e) => parseWinner(e)).map((w) => [w.orderId, w])).values()];
    const orderIds = winners.map((w) => w.orderId);
    const rows = await writeOrders(pool, saleId, winners);
    if (rows.length !== orderIds.length) {
      // The sale row is missing in Postgres: keep the batch in hand rather than drop winners.
      throw new Error(`sale ${saleId}: wrote ${rows.length} of ${orderIds.length} orders; is the sale in Postgres?`);
    }
    const now = Date.now();
    const pending = rows.filter((r) => r.status === 'pending');
    await ackBatch(redis, saleId, config.writerId, now, pending.map((r) => ({ orderId: r.id, expiresAt: r.expiresAt })), orderIds);
    // Deadlines already past (this batch waited out its window): close now, no key was set.
    const overdue = pending.filter((r) => r.expiresAt <= now).map((r) => r.id);
    if (overdue.length > 0) {
      const closed = await closeDue(pool, overdue);
      observeClosed('writer', closed, await restore(pool, redis, closed));
    }
    this.written += orderIds.length;
    metrics.ordersWritten.inc(orderIds.length);
    metrics.batchSize.observe(orderIds.length);
    logger.debug({ saleId, batch: orderIds.length }, 'batch written');
    return orderIds.length;
  }
}
