// Daemon two: closes unpaid orders when their expiry key fires `expired`. Events are a latency
// hint, not a guarantee (the replay's sweep is); to make them timely, a nudger touches keys whose
// deadline has come by Redis's clock (the one they fire by), since Redis only emits `expired` when
// it actually deletes a key. A failed close or nudge is retried by what failed (daemon.ts Retries);
// a bug that keeps failing makes the listener give up (`failed`), and its process exits 1.
import type { RedisClient } from '../redis/connect.js';
import type { Config } from '../config/index.js';
import { delay, failureSignal, Retries } from '../runtime/daemon.js';
import type { Pool } from '../runtime/db.js';
import { CLOSE_BATCH, finishClosed, sweepOverdue } from '../orders/close.js';
import { ExpiredEventSources } from './expired-events.js';
import { EXPIRED_PATTERN, parseExpiryKey, SALES_REGISTRY } from '../redis/keys.js';
import type { Logger } from '../runtime/logger.js';
import { metrics } from '../runtime/metrics.js';
import { closeDue, stillPending, type ClosedOrder } from '../orders/queries.js';
import { touchDue } from '../orders/scripts.js';
import type { ReplicaAcks } from '../redis/replication.js';

/** Expiry keys one touch_due call looks at. */
const NUDGE_BATCH = 1000;
/** touch_due calls sent at once while a burst is due: Redis runs them back to back, with no round trip between. */
const NUDGE_PIPELINE = 4;
/**
 * Close statements in flight at once. Events that come meanwhile wait in the buffer and go in the
 * next statement, which takes them all (up to CLOSE_BATCH): on a small machine a few large
 * statements close a burst sooner than many small ones contending for the same cores.
 */
const CLOSES_IN_FLIGHT = 2;

export interface ListenerDeps {
  pool: Pool;
  redis: RedisClient;
  /** REDIS_MIN_REPLICAS_ACK's confirmation of `redis`'s writes (services.ts connect); undefined at 0. */
  replicaAcks?: ReplicaAcks;
  logger: Logger;
  config: Pick<Config, 'expiryNudgeMs'>;
}

export class ExpiryListener {
  private readonly abort = new AbortController();
  private readonly inFlight = new Set<Promise<void>>();
  private buffer: string[] = [];
  private closing = 0;
  private nudging: Promise<void> | undefined;
  private flushScheduled = false;
  private sources: ExpiredEventSources | undefined;
  private readonly fatal = failureSignal();
  /** Closes and nudges fail and recover apart: a nudge that works says nothing of a close that does not. */
  private readonly closeRetries: Retries;
  private readonly nudgeRetries: Retries;
  /** Rejects when the listener gives up: a bug that failed every retry (see Retries). */
  readonly failed = this.fatal.failed;
  closed = 0;
  restored = 0;
  events = 0;

  constructor(private readonly deps: ListenerDeps) {
    const giveUp = (err: unknown) => {
      this.abort.abort();
      this.fatal.fail(err);
    };
    this.closeRetries = new Retries(deps.logger, giveUp);
    this.nudgeRetries = new Retries(deps.logger, giveUp);
  }

  async start(): Promise<void> {
    const { redis, logger } = this.deps;
    this.sources = new ExpiredEventSources({
      redis,
      logger,
      onKey: (key) => this.onExpired(key),
      onGap: () => {
        logger.warn('expired events: a node was gained or a connection came back; catching up on missed expiries');
        this.track(() => this.catchUp());
      },
    });
    await this.sources.start();
    this.nudging = this.nudgeLoop();
    logger.info({ pattern: EXPIRED_PATTERN, nodes: this.sources.subscribed() }, 'listening for expired order keys');
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await this.sources?.stop();
    await this.nudging;
    // A close that ends starts the next one from the buffer: wait until both are empty.
    for (this.flush(); this.inFlight.size > 0; this.flush()) await Promise.all([...this.inFlight]);
  }

  /** Nodes whose expired events this listener receives. */
  subscribed(): string[] {
    return this.sources?.subscribed() ?? [];
  }

  private onExpired(key: string): void {
    const parsed = parseExpiryKey(key);
    if (!parsed) return;
    this.events++;
    metrics.expiryEvents.inc();
    this.buffer.push(parsed.orderId);
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(() => this.flush());
    }
  }

  private flush(): void {
    this.flushScheduled = false;
    while (this.buffer.length > 0 && this.closing < CLOSES_IN_FLIGHT) {
      const ids = this.buffer.splice(0, CLOSE_BATCH);
      this.track(() => this.close(ids));
    }
  }

  /**
   * Runs a close in the background; a failure is followed, after the backoff its class gets, by a
   * sweep rather than the same task: a close that failed once Postgres had it (a restore no replica
   * confirmed, say) leaves orders expired but unrestored, which its ids would no longer select.
   */
  private track(task: () => Promise<void>): void {
    const tracked = task().then(
      () => this.closeRetries.succeeded(),
      (err: unknown) => {
        const retryInMs = this.closeRetries.failed(err, 'closing expired orders failed');
        if (retryInMs !== null) this.later(retryInMs, () => this.track(() => this.catchUp()));
      },
    );
    this.inFlight.add(tracked);
    void tracked.finally(() => this.inFlight.delete(tracked));
  }

  private later(ms: number, fn: () => void): void {
    setTimeout(() => this.abort.signal.aborted || fn(), ms).unref();
  }

  private async close(ids: string[]): Promise<void> {
    const { pool, redis, logger } = this.deps;
    let closed: ClosedOrder[];
    this.closing++;
    try {
      closed = await closeDue(pool, ids);
    } finally {
      // Postgres is free for the next batch while this one's stock goes back.
      this.closing--;
      setImmediate(() => this.flush());
    }
    this.closed += closed.length;
    const restored = await finishClosed(pool, redis, closed, 'listener', 'expired', this.deps.replicaAcks);
    this.restored += restored;
    if (closed.length < ids.length) {
      // Redis's clock may run a hair ahead of Postgres's: retry those at their deadline, by Postgres's.
      for (const o of await stillPending(pool, ids)) {
        this.later(o.inMs + 1, () => this.track(() => this.close([o.id])));
      }
    }
    if (closed.length > 0) logger.debug({ closed: closed.length }, 'orders expired by event');
  }

  private async catchUp(): Promise<void> {
    const { closed, restored } = await sweepOverdue(this.deps.pool, this.deps.redis, 'listener', this.deps.replicaAcks);
    this.closed += closed;
    this.restored += restored;
  }

  private async nudgeLoop(): Promise<void> {
    const { redis, config } = this.deps;
    while (!this.abort.signal.aborted) {
      let wait: number | null = config.expiryNudgeMs;
      try {
        const saleIds = await redis.smembers(SALES_REGISTRY);
        // A whole batch gone means more may be due (a burst of deadlines in the same second): touch
        // again at once, with Redis's clock read again, rather than one batch per tick, which capped
        // closes at 10k/s; then several calls at once, since a round trip each capped them at ~13k/s.
        // An idle sale still costs one read a tick.
        await Promise.all(
          saleIds.map(async (id) => {
            for (let width = 1; !this.abort.signal.aborted; width = NUDGE_PIPELINE) {
              if ((await touchDue(redis, id, NUDGE_BATCH, width)) < width * NUDGE_BATCH) break;
            }
          }),
        );
        this.nudgeRetries.succeeded();
      } catch (err) {
        wait = this.nudgeRetries.failed(err, 'touching due expiry keys failed');
        if (wait === null) return;
      }
      await delay(wait, this.abort.signal);
    }
  }
}
