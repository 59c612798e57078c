// Daemon one: drains every sale's winners into Postgres orders, a batch at a time, and sets each
// order's expiry key. The batch sits in this writer's own processing list until it is written and
// acknowledged; a writer that dies holding one is re-driven by whoever sees its lease run out.
// A sale whose batch fails on its own (its row missing in Postgres, a row Postgres refuses) is set
// aside with a backoff of its own, its batch held in Redis, while every other sale keeps draining.
// A failed pass is retried by what failed (daemon.ts Retries): a server away without limit, a bug
// in our own code a few times in a row, then the writer gives up and its process exits 1.
import type { RedisClient } from '../redis/connect.js';
import type { Config } from '../config/index.js';
import { backoffMs, delay, failureSignal, Retries, RETRY_DEFAULTS, type RetryOptions } from '../runtime/daemon.js';
import type { Pool } from '../runtime/db.js';
import { backendOf, classify } from '../runtime/errors.js';
import { closeOrders } from '../orders/close.js';
import { SALES_REGISTRY, saleKeys } from '../redis/keys.js';
import { parseWinner } from '../runtime/ids.js';
import type { Logger } from '../runtime/logger.js';
import { writeOrders } from '../orders/queries.js';
import { metrics } from '../runtime/metrics.js';
import { publishOrderEvents } from '../orders/events.js';
import { acknowledgeBatch, claimBatch } from './writer-scripts.js';
import { confirmReplicated, type ReplicaAcks } from '../redis/replication.js';
import { recoverDeadWriters } from './lease.js';

export interface WriterDeps {
  pool: Pool;
  redis: RedisClient;
  /** REDIS_MIN_REPLICAS_ACK's confirmation of `redis`'s writes (services.ts connect); undefined at 0. */
  replicaAcks?: ReplicaAcks;
  logger: Logger;
  config: Pick<Config, 'writerId' | 'writerBatchSize' | 'writerLeaseMs' | 'writerIdleMs'>;
  /** How failed passes are retried (tests shorten the backoff). */
  retry?: RetryOptions;
}

/**
 * The longest a failing sale waits between attempts (jittered up to 1.5x: under the default lease).
 * With a shorter WRITER_LEASE_MS the replay or another writer may re-drive the held batch meanwhile:
 * harmless, it goes back to the winners list whole.
 */
const SALE_BACKOFF_CAP_MS = 5000;

/** A batch the sale's own state refused: its row is missing in Postgres. */
class SaleNotWritten extends Error {}

/**
 * One sale's problem: its row is missing, or a server answered and refused its batch. Anything
 * else is every sale's: a server away, or a bug in our own code (retried, then the writer gives up).
 */
function salesOwn(err: unknown): boolean {
  if (classify(err) === 'unavailable') return false;
  return err instanceof SaleNotWritten || backendOf(err) !== 'unknown';
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
  private readonly fatal = failureSignal();
  private readonly retries: Retries;
  private lastRecovery = 0;
  private lastGauge = 0;
  /** Rejects when the writer gives up: a bug that failed every retry (see Retries). */
  readonly failed = this.fatal.failed;
  written = 0;
  /** Units this writer gave back itself: orders whose deadline had passed by the time their batch was written. */
  restored = 0;

  constructor(private readonly deps: WriterDeps) {
    this.retries = new Retries(deps.logger, this.fatal.fail, deps.retry ?? RETRY_DEFAULTS);
  }

  start(): void {
    this.running ??= this.loop();
  }

  stop(): Promise<void> {
    this.abort.abort();
    return this.running ?? Promise.resolve();
  }

  private async loop(): Promise<void> {
    const { config } = this.deps;
    while (!this.abort.signal.aborted) {
      try {
        const n = await this.drainOnce();
        this.retries.succeeded();
        if (n === 0) await delay(config.writerIdleMs, this.abort.signal);
      } catch (err) {
        const retryInMs = this.retries.failed(err, 'order writer pass failed');
        if (retryInMs === null) return;
        await delay(retryInMs, this.abort.signal);
      }
    }
  }

  /** One pass over every sale; returns how many orders it wrote. `now` decides which set-aside sales are due again. */
  async drainOnce(now = Date.now()): Promise<number> {
    const { redis, config } = this.deps;
    const saleIds = await redis.smembers(SALES_REGISTRY);
    if (now - this.lastRecovery > config.writerLeaseMs / 2) {
      this.lastRecovery = now;
      await recoverDeadWriters(redis, saleIds, config.writerId);
    }
    let total = 0;
    if (now - this.lastGauge > 1000) {
      this.lastGauge = now;
      for (const saleId of saleIds)
        metrics.winnersQueued.set({ sale: saleId }, await redis.llen(saleKeys(saleId).winners));
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
        if (!salesOwn(err)) throw err;
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
    const retryInMs = backoffMs(failures, RETRY_DEFAULTS.baseMs, SALE_BACKOFF_CAP_MS);
    this.held.set(saleId, { failures, retryAt: now + retryInMs });
    metrics.writerSaleFailures.inc({ sale: saleId });
    // Once per attempt, and attempts are spaced by the backoff: no log line per pass.
    this.deps.logger.error(
      { err, saleId, failures, retryInMs, alert: 'SALE_WRITE_FAILED' },
      'SALE WRITE FAILED: its winners stay queued in Redis and are retried; the other sales keep draining',
    );
  }

  private async writeBatch(saleId: string): Promise<number> {
    const { pool, redis, replicaAcks, logger, config } = this.deps;
    const { entries, soldOut } = await claimBatch(
      redis,
      saleId,
      config.writerId,
      config.writerBatchSize,
      config.writerLeaseMs,
    );
    if (entries.length === 0) return 0;
    // With REDIS_MIN_REPLICAS_ACK, an order is written only once the replicas have its reservation
    // (the claim came after it, so confirming the claim confirms it): a reservation a failover
    // then loses must not live on as an order, or the new master would sell its unit again. A master
    // with too few replicas to confirm anything is the only copy: its batch is written unconfirmed.
    const unreplicated = (await confirmReplicated(replicaAcks, [saleId])) > 0;
    // A re-driven batch may repeat an entry; one row per order id.
    const winners = [...new Map(entries.map((e) => parseWinner(e)).map((w) => [w.orderId, w])).values()];
    const orderIds = winners.map((w) => w.orderId);
    const rows = await writeOrders(pool, saleId, winners, soldOut);
    if (rows.length !== orderIds.length) {
      // The sale row is missing in Postgres: keep the batch in hand rather than drop winners.
      throw new SaleNotWritten(
        `sale ${saleId}: wrote ${rows.length} of ${orderIds.length} orders; is the sale in Postgres?`,
      );
    }
    const pending = rows.filter((r) => r.status === 'pending');
    // One message for the batch, sent right behind the acknowledgement on the same connection, so
    // Redis runs it once the acknowledgement is in, without a round trip of its own queued behind
    // the other writers' scripts. A fresh batch shares one deadline: one date to format. An order
    // ack.lua finds overdue is announced pending, then closed below.
    const dates = new Map<number, string>();
    const dateOf = (ms: number) => dates.get(ms) ?? dates.set(ms, new Date(ms).toISOString()).get(ms)!;
    const events = pending.map((r) => ({
      orderId: r.id,
      status: 'pending_payment' as const,
      expiresAt: dateOf(r.expiresAt),
    }));
    // Deadlines already past by Redis's clock (this batch waited out its window) get no key: closed now.
    const [{ overdue }] = await Promise.all([
      acknowledgeBatch(
        redis,
        saleId,
        config.writerId,
        pending.map((r) => ({ orderId: r.id, expiresAt: r.expiresAt })),
        orderIds,
      ),
      publishOrderEvents(redis, events),
    ]);
    if (overdue.length > 0) this.restored += (await closeOrders(pool, redis, overdue, 'writer', replicaAcks)).restored;
    this.written += orderIds.length;
    metrics.ordersWritten.inc(orderIds.length);
    if (unreplicated) metrics.ordersUnreplicated.inc(orderIds.length);
    metrics.batchSize.observe(orderIds.length);
    logger.debug({ saleId, batch: orderIds.length }, 'batch written');
    return orderIds.length;
  }
}
