// Daemon one: drains every sale's winners into Postgres orders, a batch at a time, and sets each
// order's expiry key. The batch sits in this writer's own processing list until it is written and
// acknowledged; a writer that dies holding one is re-driven by whoever sees its lease run out.
// A sale whose batch fails on its own (its row missing in Postgres, a row Postgres refuses) is set
// aside with a backoff of its own, its batch held in Redis, while every other sale keeps draining.
import type { Redis } from 'ioredis';
import type { Config } from './config.js';
import { delay } from './daemon.js';
import { postgresUnavailable, type Pool } from './db.js';
import { closeDue, restore } from './expiry.js';
import { SALES_REGISTRY, saleKeys } from './keys.js';
import { parseWinner } from './ids.js';
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

/**
 * The longest a failing sale waits between attempts (jittered up to 1.5x: under the default lease).
 * With a shorter WRITER_LEASE_MS the replay or another writer may re-drive the held batch meanwhile:
 * harmless, it goes back to the winners list whole.
 */
const SALE_BACKOFF_CAP_MS = 5000;

/** Errors that are every sale's problem: a server away, not one sale's batch refused. */
function unavailable(err: unknown): boolean {
  if (postgresUnavailable(err)) return true;
  return /^(OOM|LOADING|BUSY|READONLY|MASTERDOWN|CLUSTERDOWN|TRYAGAIN)\b|connection is closed/i.test(String((err as Error | null)?.message ?? ''));
}

interface HeldSale {
  failures: number;
  retryAt: number;
}

export class OrderWriter {
  private readonly abort = new AbortController();
  /** Sales whose last batch failed on its own, and when to try each again. */
  private readonly held = new Map<string, HeldSale>();
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

  /** One pass over every sale; returns how many orders it wrote. `now` decides which set-aside sales are due again. */
  async drainOnce(now = Date.now()): Promise<number> {
    const { redis, config } = this.deps;
    const saleIds = await redis.smembers(SALES_REGISTRY);
    if (now - this.lastRecovery > config.writerLeaseMs / 2) {
      this.lastRecovery = now;
      await recoverDeadWriters(redis, saleIds, now, config.writerId);
    }
    let total = 0;
    if (now - this.lastGauge > 1000) {
      this.lastGauge = now;
      for (const saleId of saleIds) metrics.winnersQueued.set({ sale: saleId }, await redis.llen(saleKeys(saleId).winners));
    }
    const registered = new Set(saleIds);
    for (const saleId of this.held.keys()) if (!registered.has(saleId)) this.held.delete(saleId);
    for (const saleId of saleIds) {
      // Stop between batches, never inside one: a batch in hand is finished before exit.
      if (this.abort.signal.aborted) break;
      const held = this.held.get(saleId);
      if (held && held.retryAt > now) continue;
      try {
        total += await this.writeBatch(saleId);
      } catch (err) {
        // A server away fails every sale alike: the whole loop backs off rather than try each.
        if (unavailable(err)) throw err;
        this.setAside(saleId, err, held, now);
        continue;
      }
      if (held) {
        this.held.delete(saleId);
        this.deps.logger.info({ saleId, failures: held.failures }, 'sale writes again');
      }
    }
    return total;
  }

  /** One sale's batch failed: it stays in this writer's processing list, tried again after a backoff. */
  private setAside(saleId: string, err: unknown, held: HeldSale | undefined, now: number): void {
    const failures = (held?.failures ?? 0) + 1;
    const backoffMs = Math.round(Math.min(100 * 2 ** failures, SALE_BACKOFF_CAP_MS) * (0.5 + Math.random()));
    this.held.set(saleId, { failures, retryAt: now + backoffMs });
    metrics.writerSaleFailures.inc({ sale: saleId });
    // Once per attempt, and attempts are spaced by the backoff: no log line per pass.
    this.deps.logger.error(
      { err, saleId, failures, retryInMs: backoffMs, alert: 'SALE_WRITE_FAILED' },
      'SALE WRITE FAILED: its winners stay queued in Redis and are retried; the other sales keep draining',
    );
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
