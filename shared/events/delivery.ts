// The delivery daemon's loop (`flashsale events`, docs/events.md): dispatch what committed, claim
// what is due to each endpoint up to EVENTS_CONCURRENCY in flight, POST each event signed per
// Standard Webhooks (shared/events/send.ts: to the address its name was checked to resolve to,
// never following a redirect), settle it. A delivery that outlives EVENTS_TIMEOUT_MS is aborted
// and retried with backoff.
import { Webhook } from 'standardwebhooks';
import type { Config } from '../config/index.js';
import type { Pool } from '../runtime/db.js';
import { backoffMs, delay, failureSignal, Retries } from '../runtime/daemon.js';
import type { Logger } from '../runtime/logger.js';
import { eventBodies, type EventBody } from './body.js';
import {
  claimDeliveries,
  delivered,
  dueTargets,
  failed,
  type Claimed,
  type Outcome,
  type Target,
} from './deliveries.js';
import { dispatchEvents } from './dispatch.js';
import { metrics } from '../runtime/metrics.js';
import { PRUNE_BATCH, pruneAttempts } from './prune.js';
import type { Resolve } from './address.js';
import { Sender } from './send.js';
import { refreshGauges } from './stats.js';

type DeliveryConfig = Pick<
  Config,
  | 'eventsRetryHorizonSeconds'
  | 'eventsRetryBaseMs'
  | 'eventsTimeoutMs'
  | 'eventsConcurrency'
  | 'eventsPollMs'
  | 'eventsAttemptsRetentionDays'
  | 'eventsAllowPrivateEndpoints'
>;

/** How often the gauges are counted again from the table. */
const GAUGES_EVERY_MS = 5000;

/** How often old delivery attempts are pruned (at start, then this often). */
const PRUNE_EVERY_MS = 60_000;

/** A delivery's retries back off to at most an hour apart. */
const RETRY_CAP_MS = 3_600_000;

/** The three Standard Webhooks headers; during a rotation the signature header holds both. */
export function signedHeaders(t: Target, id: string, payload: string, at = new Date()): Record<string, string> {
  const secrets = [t.secret, ...(t.previousSecret ? [t.previousSecret] : [])];
  return {
    'content-type': 'application/json',
    'webhook-id': id,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': secrets.map((s) => new Webhook(s).sign(id, at, payload)).join(' '),
  };
}

export class EventDelivery {
  private readonly abort = new AbortController();
  private readonly fatal = failureSignal();
  private readonly retries: Retries;
  private readonly inFlight = new Map<string, number>();
  private readonly sends = new Set<Promise<void>>();
  private readonly sender: Sender;
  /** Ends the idle wait when a send settles: its endpoint has room again. */
  private wake = new AbortController();
  private run: Promise<void> | undefined;
  private stopping: Promise<void> | undefined;
  readonly failed = this.fatal.failed;

  constructor(
    private readonly pool: Pool,
    private readonly config: DeliveryConfig,
    private readonly logger: Logger,
    /** How endpoint names resolve; the system's unless a test says otherwise. */
    resolve?: Resolve,
  ) {
    this.retries = new Retries(logger, this.fatal.fail);
    this.sender = new Sender(config.eventsAllowPrivateEndpoints, resolve);
  }

  start(): void {
    this.run ??= this.loop();
  }

  stop(): Promise<void> {
    return (this.stopping ??= (async () => {
      this.abort.abort();
      await this.run;
      await Promise.allSettled([...this.sends]);
      this.sender.close();
    })());
  }

  private async loop(): Promise<void> {
    const { signal } = this.abort;
    let counted = 0;
    let pruned = -PRUNE_EVERY_MS;
    while (!signal.aborted) {
      try {
        if (performance.now() - counted >= GAUGES_EVERY_MS) {
          await refreshGauges(this.pool);
          counted = performance.now();
        }
        if (performance.now() - pruned >= PRUNE_EVERY_MS) {
          await this.prune();
          pruned = performance.now();
        }
        this.wake = new AbortController();
        const wake = this.wake.signal;
        const dispatched = await dispatchEvents(this.pool);
        const claimed = await this.claim();
        this.retries.succeeded();
        // Woken by a send settled since this pass began: otherwise an endpoint at its concurrency
        // would get its next event only a poll later.
        if (dispatched === 0 && claimed === 0) await delay(this.config.eventsPollMs, AbortSignal.any([signal, wake]));
      } catch (err) {
        const retryInMs = this.retries.failed(err, 'event delivery pass failed');
        if (retryInMs === null) return;
        await delay(retryInMs, signal);
      }
    }
  }

  /** Batch after batch until one comes back short; a stop waits for one batch at most. */
  private async prune(): Promise<void> {
    const days = this.config.eventsAttemptsRetentionDays;
    let n = PRUNE_BATCH;
    let total = 0;
    while (n === PRUNE_BATCH && !this.abort.signal.aborted) {
      n = await pruneAttempts(this.pool, days);
      total += n;
    }
    if (total > 0) this.logger.info({ pruned: total, retentionDays: days }, 'old delivery attempts pruned');
  }

  /** Claims for every endpoint with room; returns how many it started. */
  private async claim(): Promise<number> {
    let started = 0;
    // A lease past the timeout: a claim outlives its send unless the process dies.
    const leaseMs = this.config.eventsTimeoutMs * 2 + 5000;
    for (const target of await dueTargets(this.pool)) {
      const room = this.config.eventsConcurrency - (this.inFlight.get(target.id) ?? 0);
      if (room <= 0) continue;
      const claimed = await claimDeliveries(this.pool, target.id, room, leaseMs);
      if (claimed.length === 0) continue;
      started += claimed.length;
      const bodies = new Map(
        (
          await eventBodies(
            this.pool,
            claimed.map((c) => c.eventId),
          )
        ).map((b) => [b.sequence, b]),
      );
      for (const c of claimed) this.send(target, c, bodies.get(c.eventId));
    }
    return started;
  }

  private post(t: Target, body: EventBody): Promise<Outcome> {
    const payload = JSON.stringify(body);
    return this.sender.post(
      t.url,
      signedHeaders(t, `msg_${body.sequence}`, payload),
      payload,
      this.config.eventsTimeoutMs,
    );
  }

  private send(target: Target, c: Claimed, body: EventBody | undefined): void {
    this.inFlight.set(target.id, (this.inFlight.get(target.id) ?? 0) + 1);
    const p = (async () => {
      const outcome: Outcome = body
        ? await this.post(target, body)
        : { status: null, latencyMs: 0, error: 'event not found' };
      if (outcome.error === null) {
        await delivered(this.pool, target.id, c, outcome);
        metrics.eventDeliveries.inc({ outcome: 'delivered' });
      } else {
        const retryInMs = backoffMs(c.attempt - 1, this.config.eventsRetryBaseMs, RETRY_CAP_MS);
        this.logger.warn(
          { endpointId: target.id, eventId: c.eventId, attempt: c.attempt, ...outcome, retryInMs },
          'delivery failed',
        );
        const outcomeOf = await failed(
          this.pool,
          target.id,
          c,
          outcome,
          retryInMs,
          this.config.eventsRetryHorizonSeconds,
        );
        metrics.eventDeliveries.inc({ outcome: outcomeOf });
      }
    })()
      .catch((err: unknown) =>
        this.logger.error({ err, endpointId: target.id, eventId: c.eventId }, 'settling a delivery failed'),
      )
      .finally(() => {
        this.inFlight.set(target.id, (this.inFlight.get(target.id) ?? 1) - 1);
        this.sends.delete(p);
        this.wake.abort();
      });
    this.sends.add(p);
  }
}
