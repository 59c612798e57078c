// The degraded mode: a master running with fewer replicas online than REDIS_MIN_REPLICAS_ACK asks
// for. Its replica died and none replaced it, or it is a replica promoted after its master was lost
// for good and has none of its own: WAIT cannot succeed until an operator attaches one, however
// long anything waits. What it holds is then the only copy there is, so:
// - purchases on its sales are refused `503 unavailable` before anything is reserved
//   (unreplicated(), from the last look: no round trip on the purchase path);
// - what it already holds is recorded anyway, once the master itself says it is short (look(),
//   asked on the connection that made the writes, after them): the writer makes its reservations
//   orders and the listener records its restores, and Postgres holds the record. On Sentinel only
//   while the sentinels also see none of its replicas up (SentinelReplicas.sole): a master whose
//   replicas a failover moved to the new master, or a partition cut off, is short but not alone.
// A replica online again ends the mode by itself. Entering and leaving it is logged once per master,
// and flashsale_redis_masters_unreplicated counts the masters in it (an alert fires at once).
import type { Redis } from 'ioredis';
import { withTimeout } from '../runtime/daemon.js';
import type { Logger } from '../runtime/logger.js';
import { metrics } from '../runtime/metrics.js';
import { masterNodes, nodeName, saleNode, type RedisClient } from './connect.js';

/** How often every master is asked; a master that does not answer keeps its last state. */
const POLL_MS = 1000;

export interface NodeReplication {
  master: boolean;
  /** Replicas in sync and streaming (`state=online`); one still loading its first copy does not count. */
  online: number;
}

/** A node's `INFO replication`, as the degraded mode reads it. */
export function parseReplication(info: string): NodeReplication {
  return { master: /^role:master\r?$/m.test(info), online: info.match(/^slave\d+:.*\bstate=online\b/gm)?.length ?? 0 };
}

/** The address a connection reaches now: for a Sentinel client, the master the sentinels named. */
export const reached = (node: Redis) =>
  node.stream?.remoteAddress ? `${node.stream.remoteAddress}:${node.stream.remotePort}` : nodeName(node);

/**
 * The replication of the master serving each sale now, asked once per master (`flashsale check`):
 * a function of a sale id, for one pass over the sales.
 */
export function salesReplication(redis: RedisClient): (saleId: string) => Promise<NodeReplication & { at: string }> {
  const asked = new Map<string, Promise<NodeReplication & { at: string }>>();
  return (saleId) => {
    const node = saleNode(redis, saleId);
    if (!node) return Promise.resolve({ at: 'no master in the slot map', master: false, online: 0 });
    const name = nodeName(node);
    let answer = asked.get(name);
    if (!answer)
      asked.set(
        name,
        (answer = node.info('replication').then((info) => ({ ...parseReplication(info), at: reached(node) }))),
      );
    return answer;
  };
}

export class ReplicaWatch {
  /** Masters short of replicas at the last look, by connection name: their address and replicas online. */
  private readonly short = new Map<string, { at: string; online: number }>();
  private timer: NodeJS.Timeout | undefined;
  private polling: Promise<void> = Promise.resolve();

  constructor(
    private readonly redis: RedisClient,
    readonly min: number,
    private readonly logger: Logger,
    /**
     * Whether what a short master holds is the only copy, where the topology can say (on Sentinel,
     * SentinelReplicas.sole): a master whose replicas are up elsewhere is not drained unconfirmed.
     */
    private readonly sole: (node: Redis) => Promise<boolean> = async () => true,
  ) {}

  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => (this.polling = this.refresh()), POLL_MS).unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.polling;
  }

  /** Whether the sale's master was short of replicas at the last look. */
  unreplicated(saleId: string): boolean {
    if (this.short.size === 0) return false;
    const node = saleNode(this.redis, saleId);
    return node !== undefined && this.short.has(nodeName(node));
  }

  /** Whether this node was short of replicas at the last look. */
  known(node: Redis): boolean {
    return this.short.has(nodeName(node));
  }

  /**
   * Asks the node now: is it a master with fewer replicas online than `min` (short: no WAIT can
   * succeed), and is what it holds then the only copy (degraded: its writes count unconfirmed)?
   * Short is enough to refuse its purchases (record); not to take its writes as done.
   */
  async look(node: Redis): Promise<{ short: boolean; degraded: boolean }> {
    const r = parseReplication(await node.info('replication'));
    this.record(node, r);
    const short = r.master && r.online < this.min;
    return { short, degraded: short && (await this.sole(node)) };
  }

  /** Looks at every master now (the timer does, every second). */
  async refresh(): Promise<void> {
    const masters = masterNodes(this.redis);
    const names = new Set(masters.map(nodeName));
    // A node no longer serving slots (failed over, removed) is no master of ours.
    for (const name of this.short.keys()) if (!names.has(name)) this.short.delete(name);
    await Promise.all(
      masters.map(async (node) => {
        try {
          // A command to a master away waits for its reconnect: a look is never held up by it.
          this.record(node, parseReplication(await withTimeout(node.info('replication'), POLL_MS, 'no answer')));
        } catch {
          // Away: failing over, or down. Its purchases fail as for any server away.
        }
      }),
    );
    metrics.mastersUnreplicated.set(this.short.size);
  }

  private record(node: Redis, r: NodeReplication): void {
    const name = nodeName(node);
    const was = this.short.get(name);
    if (r.master && r.online < this.min) {
      const at = reached(node);
      this.short.set(name, { at, online: r.online });
      if (!was) {
        this.logger.warn(
          { master: at, replicas: r.online, required: this.min, alert: 'MASTER_WITHOUT_REPLICA' },
          'MASTER WITHOUT REPLICA: its purchases are answered 503 and what it holds is written to Postgres unconfirmed until a replica is online again',
        );
      }
    } else if (was) {
      this.short.delete(name);
      this.logger.info(
        { master: was.at, replicas: r.online },
        'master has its replicas again: purchases and confirmations as usual',
      );
    }
    metrics.mastersUnreplicated.set(this.short.size);
  }
}
