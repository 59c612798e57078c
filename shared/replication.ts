// What a 202 means when Redis fails over. Replication is asynchronous: a master that dies before
// its replicas have a write loses it, and a buyer answered 202 would have no reservation. With
// REDIS_MIN_REPLICAS_ACK=N a write counts only once WAIT says N replicas have it.
//
// WAIT covers every earlier write on its connection, and blocks that connection until it returns.
// So confirmations are group commits: one WAIT in flight per connection (per sale on a cluster,
// whose keys are on one node's connection) confirms every write whose reply came before it was
// sent; writes that finish meanwhile ride on the next one.
import { Cluster } from 'ioredis';
import { UnavailableError } from './errors.js';
import { saleKeys } from './keys.js';
import type { RedisClient } from './redis.js';

/** A WAIT's answer: how many replicas have the writes, and how many were required when it was sent. */
export interface Acks {
  acked: number;
  required: number;
}

interface Waiter {
  resolve(acks: Acks): void;
  reject(err: unknown): void;
}

interface Group {
  inFlight: boolean;
  waiting: Waiter[];
}

export class ReplicaAcks {
  private readonly groups = new Map<string, Group>();

  constructor(
    private readonly redis: RedisClient,
    readonly replicas: number,
    readonly timeoutMs: number,
    /** Replicas that must have a write beyond `replicas`, where the topology says so (Sentinel). */
    private readonly healthy: () => number = () => 0,
  ) {}

  /**
   * How many replicas have every write this client made to `saleId`'s node before this call (up to
   * the number required, waiting at most `timeoutMs`). Call it once the write's reply is in.
   */
  acked(saleId: string): Promise<Acks> {
    const key = this.redis instanceof Cluster ? saleId : '';
    let group = this.groups.get(key);
    if (!group) this.groups.set(key, (group = { inFlight: false, waiting: [] }));
    const g = group;
    return new Promise<Acks>((resolve, reject) => {
      g.waiting.push({ resolve, reject });
      if (!g.inFlight) this.send(key, g, saleId);
    });
  }

  private send(key: string, g: Group, saleId: string): void {
    const batch = g.waiting;
    g.waiting = [];
    g.inFlight = true;
    const required = Math.max(this.replicas, this.healthy());
    this.wait(saleId, required).then(
      (acked) => batch.forEach((w) => w.resolve({ acked, required })),
      (err: unknown) => batch.forEach((w) => w.reject(err)),
    ).finally(() => {
      g.inFlight = false;
      if (g.waiting.length > 0) this.send(key, g, saleId);
      else this.groups.delete(key);
    });
  }

  private async wait(saleId: string, replicas: number): Promise<number> {
    if (!(this.redis instanceof Cluster)) return this.redis.wait(replicas, this.timeoutMs);
    // WAIT names no key: a key of the sale in the same pipeline sends it to that sale's node.
    const res = (await this.redis.pipeline().exists(saleKeys(saleId).meta).wait(replicas, this.timeoutMs).exec()) ?? [];
    for (const [err] of res) if (err) throw err;
    return res[1]![1] as number;
  }
}

const required = new WeakMap<RedisClient, ReplicaAcks>();

/** REDIS_MIN_REPLICAS_ACK for this client: every process sets it once, where it connects. */
export function requireReplicaAcks(redis: RedisClient, replicas: number, timeoutMs: number, healthy?: () => number): void {
  if (replicas > 0) required.set(redis, new ReplicaAcks(redis, replicas, timeoutMs, healthy));
}

/** The confirmation this client's writes need, if any. */
export const replicaAcksOf = (redis: RedisClient): ReplicaAcks | undefined => required.get(redis);

/**
 * Confirms that the replicas have every write made so far to these sales (after a restore, before
 * Postgres records it as done), or throws `unavailable`, so the step is retried, never skipped.
 */
export async function confirmReplicated(redis: RedisClient, saleIds: Iterable<string>): Promise<void> {
  const acks = replicaAcksOf(redis);
  if (!acks) return;
  const answers = await Promise.all([...new Set(saleIds)].map((id) => acks.acked(id)));
  const short = answers.find((a) => a.acked < a.required);
  if (short) throw new UnavailableError(`only ${short.acked} of ${short.required} replicas confirmed within ${acks.timeoutMs} ms`);
}
