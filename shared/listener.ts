// Daemon two: closes unpaid orders when their expiry key fires `expired`. Events are a latency
// hint, not a guarantee (the replay's sweep is); to make them timely, a nudger touches keys whose
// deadline has come, since Redis only emits `expired` when it actually deletes a key.
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Config } from './config.js';
import { delay } from './daemon.js';
import type { Pool } from './db.js';
import { closeDue, closeOverdue, restore, stillPending } from './expiry.js';
import { EXPIRED_PATTERN, parseExpiryKey, probeKey, SALES_REGISTRY } from './keys.js';
import type { Logger } from './logger.js';
import { countBackendError, metrics, observeClosed } from './metrics.js';
import { touchDue } from './redis.js';

/** Expiry keys one touch_due call looks at. */
const NUDGE_BATCH = 1000;
/** Most orders one close statement takes; a burst of deadlines closes in fewer, larger statements. */
const CLOSE_BATCH = 2000;

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
  closed = 0;
  restored = 0;
  events = 0;

  constructor(private readonly deps: ListenerDeps) {}

  async start(): Promise<void> {
    const { redis, subscriber, logger } = this.deps;
    subscriber.on('pmessage', (_pattern: string, _channel: string, key: string) => {
      const probe = this.probes.get(key);
      if (probe) probe();
      else this.onExpired(key);
    });
    // ioredis resubscribes by itself after a reconnect; events in the gap are lost, so catch up
    // at once (a restarted Redis also forgot a CONFIG SET, so check the flags again).
    let first = true;
    subscriber.on('ready', () => {
      if (first) return;
      logger.warn('subscription reconnected: catching up on missed expiries');
      this.track(ensureExpiredEvents(redis, () => this.probeEvents()).then(() => this.catchUp()));
    });
    await subscriber.psubscribe(EXPIRED_PATTERN);
    first = false;
    await ensureExpiredEvents(redis, () => this.probeEvents());
    this.nudging = this.nudgeLoop();
    logger.info({ pattern: EXPIRED_PATTERN }, 'listening for expired order keys');
  }

  async stop(): Promise<void> {
    this.abort.abort();
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
    this.track(this.close(ids));
  }

  private track(p: Promise<unknown>): void {
    const tracked = p.then(
      () => {},
      (err: unknown) => {
        countBackendError(err);
        this.deps.logger.error({ err }, 'closing expired orders failed; the replay will retry');
      },
    );
    this.inFlight.add(tracked);
    void tracked.finally(() => this.inFlight.delete(tracked));
  }

  private async close(ids: string[]): Promise<void> {
    const { pool, redis, logger } = this.deps;
    const closed = await closeDue(pool, ids);
    const units = await restore(pool, redis, closed);
    observeClosed('listener', closed, units);
    this.closed += closed.length;
    this.restored += units;
    if (closed.length < ids.length) {
      // Redis's clock may run a hair ahead of Postgres's: retry those at their deadline.
      for (const o of await stillPending(pool, ids)) {
        const wait = Math.max(1, o.expiresAt - Date.now() + 1);
        setTimeout(() => this.abort.signal.aborted || this.track(this.close([o.id])), wait).unref();
      }
    }
    if (closed.length > 0) logger.debug({ closed: closed.length }, 'orders expired by event');
  }

  private async catchUp(): Promise<void> {
    const { pool, redis } = this.deps;
    for (;;) {
      const closed = await closeOverdue(pool, 1000);
      const units = await restore(pool, redis, closed);
      observeClosed('listener', closed, units);
      this.closed += closed.length;
      this.restored += units;
      if (closed.length < 1000) return;
    }
  }

  private async nudgeLoop(): Promise<void> {
    const { redis, logger, config } = this.deps;
    while (!this.abort.signal.aborted) {
      try {
        const saleIds = await redis.smembers(SALES_REGISTRY);
        const now = Date.now();
        // A whole batch gone means more may be due (a burst of deadlines in the same second):
        // touch again at once rather than one batch per tick, which capped closes at 10k/s.
        await Promise.all(saleIds.map(async (id) => {
          let gone = NUDGE_BATCH;
          while (gone === NUDGE_BATCH && !this.abort.signal.aborted) gone = await touchDue(redis, id, now, NUDGE_BATCH);
        }));
      } catch (err) {
        logger.warn({ err }, 'touching due expiry keys failed');
      }
      await delay(config.expiryNudgeMs, this.abort.signal);
    }
  }
}
