// Which replicas a Sentinel master's writes must reach before they count (REDIS_MIN_REPLICAS_ACK).
//
// A graceful SENTINEL FAILOVER promotes one replica while the old master keeps taking writes until
// the clients move (+switch-master, when the failover ends); its other replicas still acknowledge
// them, then resync from the new master and drop them. With 2 replicas and WAIT 1, 8 of 10,984
// acknowledged purchases were lost that way here. So on Sentinel a write counts once every replica
// the sentinels see healthy has it (at least REDIS_MIN_REPLICAS_ACK): the one being promoted is
// among them, and it stops acknowledging the old master the moment it is promoted. A replica the
// sentinels see down stops being waited for, so losing one costs at most down-after-milliseconds
// (plus their INFO period) of refused purchases, not the sale.
import { Redis } from 'ioredis';
import type { HostPort, RedisTarget } from '../config/index.js';
import type { Logger } from '../runtime/logger.js';

/** How often the sentinels are asked; the view only ever errs towards waiting for more replicas. */
const POLL_MS = 500;

type SentinelTarget = Extract<RedisTarget, { kind: 'sentinel' }>;

export class SentinelReplicas {
  private healthyNow = 0;
  private next = 0;
  private timer: NodeJS.Timeout | undefined;
  private polling: Promise<void> = Promise.resolve();
  private readonly sentinels: Redis[];

  constructor(
    private readonly target: SentinelTarget,
    private readonly logger: Logger,
  ) {
    this.sentinels = target.sentinels.map(
      (s: HostPort) =>
        new Redis({
          host: s.host,
          port: s.port,
          password: target.sentinelPassword,
          lazyConnect: true,
          enableOfflineQueue: false,
          maxRetriesPerRequest: 0,
          retryStrategy: () => 1000,
          connectTimeout: 1000,
          ...(target.auth.tls ? { tls: {} } : {}),
        }),
    );
    for (const s of this.sentinels) s.on('error', () => {});
  }

  /** Replicas to wait for now: the last count the sentinels gave (never lowered by a failed poll). */
  healthy(): number {
    return this.healthyNow;
  }

  async start(): Promise<void> {
    await this.poll();
    this.timer = setInterval(() => (this.polling = this.poll()), POLL_MS).unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.polling;
    for (const s of this.sentinels) s.disconnect();
  }

  /** Asks the sentinels in turn until one answers; a sentinel that cannot be reached leaves the count as it was. */
  private async poll(): Promise<void> {
    for (let tried = 0; tried < this.sentinels.length; tried++) {
      const sentinel = this.sentinels[this.next]!;
      try {
        if (sentinel.status === 'wait') await sentinel.connect();
        const replicas = (await sentinel.call('SENTINEL', 'REPLICAS', this.target.name)) as unknown[];
        this.healthyNow = replicas.map(fields).filter(counts).length;
        return;
      } catch (err) {
        this.logger.debug(
          { err: (err as Error).message, sentinel: `${sentinel.options.host}:${sentinel.options.port}` },
          'sentinel replicas: a sentinel did not answer',
        );
        this.next = (this.next + 1) % this.sentinels.length;
      }
    }
  }
}

/** A replica the sentinels could promote: up, and in sync, or the one being promoted right now. */
function counts(r: Record<string, string>): boolean {
  const flags = (r.flags ?? '').split(',');
  if (flags.some((f) => f === 's_down' || f === 'o_down' || f === 'disconnected')) return false;
  return flags.includes('promoted') || r['master-link-status'] === 'ok';
}

/** One entry of SENTINEL REPLICAS: a flat list of names and values (RESP2) or a map (RESP3). */
function fields(entry: unknown): Record<string, string> {
  if (!Array.isArray(entry)) return entry as Record<string, string>;
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < entry.length; i += 2) out[String(entry[i])] = String(entry[i + 1]);
  return out;
}
