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
//
// The same view decides whether a master short of replicas may be drained unconfirmed (the
// degraded mode, replica-watch.ts): only while the sentinels hold it as the one copy (sole()).
import { Redis } from 'ioredis';
import type { HostPort, RedisTarget } from '../config/index.js';
import { withTimeout } from '../runtime/daemon.js';
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
  private readonly connecting = new Map<Redis, Promise<void>>();

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

  /**
   * Whether what `node` holds is the only copy, as the sentinels see it now: a majority of them
   * answer, and every one that does names it master (by run id), sees it up with no failover under
   * way, and sees none of its replicas up. Asked after the writes it is to vouch for. A master short
   * of replicas that are up is not alone: a graceful failover has promoted one and moved the others
   * (the old master keeps taking writes until the clients move, and those writes never reach the
   * new one), or a partition cuts it off from them. Writing what it holds to Postgres then records
   * reservations the new master never had and sells again: available + pending + paid came to
   * 100,001 of 100,000 that way. Those writes wait instead, and are retried.
   */
  async sole(node: Redis): Promise<boolean> {
    const runId = /^run_id:(\w+)/m.exec(await node.info('server'))?.[1];
    const views = await Promise.all(this.sentinels.map((s) => this.view(s).catch(() => undefined)));
    const answers = views.filter((v) => v !== undefined);
    if (answers.length <= this.sentinels.length / 2) return false;
    return answers.every((v) => v.master.flags === 'master' && v.master.runid === runId && !v.replicas.some(up));
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
        await this.connected(sentinel);
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

  /** Connects a sentinel on first use; two callers at once share the attempt (a second connect() throws). */
  private connected(sentinel: Redis): Promise<unknown> {
    if (sentinel.status !== 'wait') return Promise.resolve();
    let attempt = this.connecting.get(sentinel);
    if (!attempt) this.connecting.set(sentinel, (attempt = sentinel.connect()));
    return attempt;
  }

  /** One sentinel's view of the master and its replicas, within POLL_MS (a partitioned sentinel hangs). */
  private async view(sentinel: Redis): Promise<{ master: Record<string, string>; replicas: Record<string, string>[] }> {
    await this.connected(sentinel);
    const [master, replicas] = await withTimeout(
      Promise.all([
        sentinel.call('SENTINEL', 'MASTER', this.target.name),
        sentinel.call('SENTINEL', 'REPLICAS', this.target.name) as Promise<unknown[]>,
      ]),
      POLL_MS,
      'no answer',
    );
    return { master: fields(master), replicas: replicas.map(fields) };
  }
}

/** A replica the sentinels can reach: one that could be (or is being) promoted. */
function up(r: Record<string, string>): boolean {
  return !(r.flags ?? '').split(',').some((f) => f === 's_down' || f === 'o_down' || f === 'disconnected');
}

/** A replica the sentinels could promote: up, and in sync, or the one being promoted right now. */
function counts(r: Record<string, string>): boolean {
  return up(r) && ((r.flags ?? '').split(',').includes('promoted') || r['master-link-status'] === 'ok');
}

/** One entry of SENTINEL REPLICAS: a flat list of names and values (RESP2) or a map (RESP3). */
function fields(entry: unknown): Record<string, string> {
  if (!Array.isArray(entry)) return entry as Record<string, string>;
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < entry.length; i += 2) out[String(entry[i])] = String(entry[i + 1]);
  return out;
}
