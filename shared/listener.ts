// Daemon two: closes unpaid orders when their expiry key fires `expired`. Events are a latency
// hint, not a guarantee (the replay's sweep is); to make them timely, a nudger touches keys whose
// deadline has come, since Redis only emits `expired` when it actually deletes a key. A failed
// close or nudge is retried by what failed (daemon.ts Retries); a bug that keeps failing makes the
// listener give up (`failed`), and its process exits 1.
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Config } from './config.js';
import { delay, failureSignal, Retries } from './daemon.js';
import type { Pool } from './db.js';
import { CLOSE_BATCH, closeOrders, sweepOverdue } from './expiry.js';
import { EXPIRED_PATTERN, parseExpiryKey, probeKey, SALES_REGISTRY } from './keys.js';
import type { Logger } from './logger.js';
import { metrics } from './metrics.js';
import { stillPending } from './order-queries.js';
import { touchDue } from './redis.js';

/** Expiry keys one touch_due call looks at. */
const NUDGE_BATCH = 1000;

export interface ListenerDeps {
  pool: Pool;
  redis: Redis;
  /** A connection of its own: a subscribed connection can run nothing else. */
  subscriber: Redis;
  logger: Logger;
  config: Pick<Config, 'expiryNudgeMs'>;
}

/** How long a probe key may take to raise its expired event where CONFIG is refused. */
const PROBE_MS = 3000;

/**
 * Makes sure Redis emits expired events (flags E and x). Sets them where CONFIG is allowed; where
 * it is refused (managed Redis, a renamed command, an ACL), `probe` tells whether events arrive
 * all the same; otherwise fails with the exact line to add.
 */
export async function ensureExpiredEvents(redis: Redis, probe: () => Promise<boolean>): Promise<string> {
  let flags: string;
  try {
    const res = (await redis.config('GET', 'notify-keyspace-events')) as string[];
    flags = res[1] ?? '';
  } catch (err) {
    if (await probe()) return '(CONFIG refused; a probe key raised its expired event)';
    throw new Error(`cannot read notify-keyspace-events (${(err as Error).message}) and a probe key expired without an event: add "notify-keyspace-events Ex" to redis.conf or your provider's Redis parameters`);
  }
  const hasEvents = flags.includes('E');
  const hasExpired = flags.includes('x') || flags.includes('A');
  if (hasEvents && hasExpired) return flags;
  const wanted = `${flags}${hasEvents ? '' : 'E'}${hasExpired ? '' : 'x'}`;
  try {
    await redis.config('SET', 'notify-keyspace-events', wanted);
  } catch (err) {
    throw new Error(`Redis refused CONFIG SET notify-keyspace-events ${wanted} (${(err as Error).message}): add "notify-keyspace-events ${wanted}" to redis.conf or your provider's Redis parameters`);
  }
  return wanted;
}

export class ExpiryListener {
  private readonly abort = new AbortController();
  private readonly inFlight = new Set<Promise<void>>();
  private buffer: string[] = [];
  private nudging: Promise<void> | undefined;
  private flushScheduled = false;
  /** Probe keys awaiting their expired event, with what to call when it comes. */
  private readonly probes = new Map<string, () => void>();
  private onCommandsReady: (() => void) | undefined;
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
    const { redis, subscriber, logger } = this.deps;
    subscriber.on('pmessage', (_pattern: string, _channel: string, key: string) => {
      const probe = this.probes.get(key);
      if (probe) probe();
      else this.onExpired(key);
    });
    // ioredis resubscribes by itself after a reconnect; events in the gap are lost, so catch up
    // at once. A restarted Redis forgot a CONFIG SET, and a promoted replica never had it (CONFIG
    // is not replicated): check the flags again whenever either connection comes back, since
    // after a failover they reach the new master one after the other.
    let first = true;
    const reconnected = (which: string) => () => {
      if (first) return;
      logger.warn({ connection: which }, 'reconnected: checking expired events and catching up on missed expiries');
      this.track(async () => {
        await ensureExpiredEvents(redis, () => this.probeEvents());
        await this.catchUp();
      });
    };
    subscriber.on('ready', reconnected('subscriber'));
    // The command connection is shared with others in the process: stop() takes this back.
    this.onCommandsReady = reconnected('commands');
    redis.on('ready', this.onCommandsReady);
    await subscriber.psubscribe(EXPIRED_PATTERN);
    first = false;
    await ensureExpiredEvents(redis, () => this.probeEvents());
    this.nudging = this.nudgeLoop();
    logger.info({ pattern: EXPIRED_PATTERN }, 'listening for expired order keys');
  }

  async stop(): Promise<void> {
    this.abort.abort();
    if (this.onCommandsReady) this.deps.redis.off('ready', this.onCommandsReady);
    await this.deps.subscriber.punsubscribe(EXPIRED_PATTERN).catch(() => {});
    await this.nudging;
    this.flush();
    await Promise.all([...this.inFlight]);
  }

  /** Makes a key expire and waits for its event: proof that events arrive when CONFIG cannot show it. */
  private async probeEvents(): Promise<boolean> {
    const { redis } = this.deps;
    const key = probeKey(randomUUID());
    let seen = false;
    this.probes.set(key, () => (seen = true));
    try {
      await redis.set(key, '1', 'PX', 1);
      // Redis deletes an expired key (and emits the event) when it is touched or sampled.
      for (const until = Date.now() + PROBE_MS; !seen && Date.now() < until;) {
        await delay(20);
        await redis.exists(key);
      }
      return seen;
    } finally {
      this.probes.delete(key);
    }
  }

  private onExpired(key: string): void {
    const parsed = parseExpiryKey(key);
    if (!parsed) return;
    this.events++;
    metrics.expiryEvents.inc();
    this.buffer.push(parsed.orderId);
    if (this.buffer.length >= CLOSE_BATCH) this.flush();
    else if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(() => this.flush());
    }
  }

  private flush(): void {
    this.flushScheduled = false;
    if (this.buffer.length === 0) return;
    const ids = this.buffer;
    this.buffer = [];
    this.track(() => this.close(ids));
  }

  /** Runs a close in the background; a failure runs it again after the backoff its class gets. */
  private track(task: () => Promise<void>): void {
    const tracked = task().then(
      () => this.closeRetries.succeeded(),
      (err: unknown) => {
        const retryInMs = this.closeRetries.failed(err, 'closing expired orders failed');
        if (retryInMs !== null) this.later(retryInMs, () => this.track(task));
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
    const { closed, restored } = await closeOrders(pool, redis, ids, 'listener');
    this.closed += closed.length;
    this.restored += restored;
    if (closed.length < ids.length) {
      // Redis's clock may run a hair ahead of Postgres's: retry those at their deadline.
      for (const o of await stillPending(pool, ids)) {
        this.later(Math.max(1, o.expiresAt - Date.now() + 1), () => this.track(() => this.close([o.id])));
      }
    }
    if (closed.length > 0) logger.debug({ closed: closed.length }, 'orders expired by event');
  }

  private async catchUp(): Promise<void> {
    const { closed, restored } = await sweepOverdue(this.deps.pool, this.deps.redis, 'listener');
    this.closed += closed;
    this.restored += restored;
  }

  private async nudgeLoop(): Promise<void> {
    const { redis, config } = this.deps;
    while (!this.abort.signal.aborted) {
      let wait: number | null = config.expiryNudgeMs;
      try {
        const saleIds = await redis.smembers(SALES_REGISTRY);
        const now = Date.now();
        // A whole batch gone means more may be due (a burst of deadlines in the same second):
        // touch again at once rather than one batch per tick, which capped closes at 10k/s.
        await Promise.all(saleIds.map(async (id) => {
          let gone = NUDGE_BATCH;
          while (gone === NUDGE_BATCH && !this.abort.signal.aborted) gone = await touchDue(redis, id, now, NUDGE_BATCH);
        }));
        this.nudgeRetries.succeeded();
      } catch (err) {
        wait = this.nudgeRetries.failed(err, 'touching due expiry keys failed');
        if (wait === null) return;
      }
      await delay(wait, this.abort.signal);
    }
  }
}
