// What a 202 means when Redis fails over. Replication is asynchronous: a master that dies before
// its replicas have a write loses it, and a buyer answered 202 would have no reservation. With
// REDIS_MIN_REPLICAS_ACK=N a write counts only once WAIT says N replicas have it.
//
// WAIT covers every earlier write on its connection, and blocks that connection until it returns.
// So confirmations are group commits: one WAIT in flight per node connection confirms every write
// whose reply came before it was sent; writes that finish meanwhile ride on the next one.
//
// It covers writes on *that* connection only: a WAIT answered after the connection was replaced
// (a reconnect, a Sentinel client following +switch-master, a cluster slot now served by another
// node) says nothing about a write made before, which the old master may have taken alone and a
// failover then lost. Such a write counts as unconfirmed. A Sentinel failover under purchases
// lost 6 acknowledged purchases this way before the check.
//
// A master with fewer replicas online than REDIS_MIN_REPLICAS_ACK can confirm nothing however long
// it is waited for (replica-watch.ts): its writes are answered `unreplicated` instead, which the
// writer, the listener and cancels take as done (the degraded mode) and a purchase does not.
import { Cluster, type Redis } from 'ioredis';
import { UnavailableError } from '../runtime/errors.js';
import { saleNode, type RedisClient } from './connect.js';
import type { ReplicaWatch } from './replica-watch.js';

/** A WAIT's answer: how many replicas have the writes, and how many were required when it was sent. */
export interface Acks {
  acked: number;
  required: number;
  /** The node that took the writes is a master short of replicas, so none could confirm them: the degraded mode. */
  unreplicated?: boolean;
}

interface Waiter {
  /** The connection's generation when the write's reply came. */
  epoch: number;
  resolve(acks: Acks): void;
  reject(err: unknown): void;
}

interface Group {
  inFlight: boolean;
  waiting: Waiter[];
}

export class ReplicaAcks {
  private readonly groups = new Map<Redis, Group>();
  /** Per node connection, how many times it has (re)connected. */
  private readonly epochs = new WeakMap<Redis, number>();

  constructor(
    private readonly redis: RedisClient,
    readonly replicas: number,
    readonly timeoutMs: number,
    /** Replicas that must have a write beyond `replicas`, where the topology says so (Sentinel). */
    private readonly healthy: () => number = () => 0,
    /** Which masters are short of replicas (the degraded mode); without it, every write waits. */
    private readonly watch?: ReplicaWatch,
  ) {
    if (redis instanceof Cluster) {
      redis.on('+node', (node: Redis) => this.track(node));
      for (const node of redis.nodes()) this.track(node);
    } else {
      this.track(redis);
    }
  }

  /**
   * How many replicas have every write this client made to `saleId`'s node before this call (up to
   * the number required, waiting at most `timeoutMs`). Call it as soon as the write's reply is in.
   */
  acked(saleId: string): Promise<Acks> {
    const node = this.nodeOf(saleId);
    let group = this.groups.get(node);
    if (!group) this.groups.set(node, (group = { inFlight: false, waiting: [] }));
    const g = group;
    return new Promise<Acks>((resolve, reject) => {
      g.waiting.push({ epoch: this.epochs.get(node) ?? 0, resolve, reject });
      if (!g.inFlight) this.send(node, g);
    });
  }

  /** Whether the sale's master was short of replicas at the last look: a purchase there is refused before it reserves. */
  unreplicated(saleId: string): boolean {
    return this.watch?.unreplicated(saleId) ?? false;
  }

  private track(node: Redis): void {
    if (this.epochs.has(node)) return;
    this.epochs.set(node, 0);
    node.on('ready', () => this.epochs.set(node, this.epochs.get(node)! + 1));
  }

  /** The connection that serves the sale's slot now (the one server, or the Sentinel master). */
  private nodeOf(saleId: string): Redis {
    if (!(this.redis instanceof Cluster)) return this.redis;
    const node = saleNode(this.redis, saleId);
    if (!node) throw new UnavailableError(`no master is known for sale ${saleId}'s slot`);
    this.track(node);
    return node;
  }

  private send(node: Redis, g: Group): void {
    const batch = g.waiting;
    g.waiting = [];
    g.inFlight = true;
    const required = Math.max(this.replicas, this.healthy());
    this.ask(node, required)
      .then(
        ({ acked, unreplicated }) => {
          // A write made on an earlier connection may have gone to another server: never degraded.
          const epoch = this.epochs.get(node);
          for (const w of batch)
            w.resolve(w.epoch === epoch ? { acked, required, unreplicated } : { acked: 0, required });
        },
        (err: unknown) => {
          for (const w of batch) w.reject(err);
        },
      )
      .finally(() => {
        g.inFlight = false;
        if (g.waiting.length > 0) this.send(node, g);
        else this.groups.delete(node);
      });
  }

  /**
   * WAIT, then, if it came back short, whether the node is a master short of replicas holding the
   * only copy; sent after the writes on their connection, so it speaks of the server that took them.
   * A node already known short is asked first, without a WAIT that would only time out: short but
   * not alone (its replicas are up elsewhere: Sentinel) confirms nothing, at once.
   */
  private async ask(node: Redis, required: number): Promise<{ acked: number; unreplicated?: boolean }> {
    const watch = this.watch;
    if (watch?.known(node)) {
      const { short, degraded } = await watch.look(node);
      if (short) return { acked: 0, unreplicated: degraded };
    }
    const acked = await node.wait(required, this.timeoutMs);
    if (acked < required && watch && (await watch.look(node)).degraded) return { acked, unreplicated: true };
    return { acked };
  }
}

/**
 * REDIS_MIN_REPLICAS_ACK for this client, made once where a process connects (services.ts) and
 * handed to what writes through it; undefined when it is 0 (no write waits).
 */
export function replicaAcksFor(
  redis: RedisClient,
  replicas: number,
  timeoutMs: number,
  healthy?: () => number,
  watch?: ReplicaWatch,
): ReplicaAcks | undefined {
  return replicas > 0 ? new ReplicaAcks(redis, replicas, timeoutMs, healthy, watch) : undefined;
}

/**
 * Confirms that the replicas have every write made so far to these sales (after a restore, before
 * Postgres records it as done), or throws `unavailable`, so the step is retried, never skipped.
 * A sale whose master has too few replicas to confirm anything passes unconfirmed (the degraded
 * mode); returns how many did. Without `acks` (REDIS_MIN_REPLICAS_ACK 0) there is nothing to wait for.
 */
export async function confirmReplicated(acks: ReplicaAcks | undefined, saleIds: Iterable<string>): Promise<number> {
  if (!acks) return 0;
  const answers = await Promise.all([...new Set(saleIds)].map((id) => acks.acked(id)));
  const short = answers.find((a) => a.acked < a.required && !a.unreplicated);
  if (short)
    throw new UnavailableError(
      `only ${short.acked} of ${short.required} replicas confirmed within ${acks.timeoutMs} ms`,
    );
  return answers.filter((a) => a.unreplicated).length;
}
