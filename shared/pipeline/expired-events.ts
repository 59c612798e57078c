// Where expired events come from. Redis publishes `expired` only to subscribers of the master that
// deletes the key: one server or a Sentinel master needs one subscription; a cluster needs one per
// node, kept in step with its slot map (a failover or a reshard changes who the masters are).
// Replicas are subscribed too: they emit nothing until promoted, and from then on at once.
// notify-keyspace-events is not replicated, so it is checked (or set) on every node subscribed to,
// and whenever a master is gained or a connection comes back the owner is told to catch up, since
// events sent before a subscription are lost.
import { randomUUID } from 'node:crypto';
import { Cluster, Redis } from 'ioredis';
import { delay } from '../runtime/daemon.js';
import { EXPIRED_PATTERN, probeKey } from '../redis/keys.js';
import type { Logger } from '../runtime/logger.js';
import { duplicateRedis, nodeName, type RedisClient } from '../redis/connect.js';

/** How often the set of subscribers is compared with the slot map, besides every refresh. */
const SYNC_MS = 1000;
/** How long a probe key may take to raise its expired event where CONFIG is refused. */
const PROBE_MS = 3000;

export interface EventSourcesDeps {
  redis: RedisClient;
  logger: Logger;
  onKey(key: string): void;
  /** Events may have been missed (a master gained, a connection back): catch up. */
  onGap(): void;
}

interface Source {
  /** Commands to that node (CONFIG, the probe). */
  node: Redis;
  subscriber: Redis;
  /** Its events are known to be on since it last (re)connected. */
  ensured: boolean;
}

export class ExpiredEventSources {
  private readonly sources = new Map<string, Source>();
  private readonly probes = new Map<string, () => void>();
  private masters = new Set<string>();
  private syncing: Promise<void> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly resync = () => {
    this.syncing = this.syncing.then(() => this.sync(false));
  };
  private readonly commandsBack = () => {
    // A restarted server or a promoted Sentinel replica forgot (or never had) a CONFIG SET.
    for (const s of this.sources.values()) s.ensured = false;
    this.resync();
  };

  constructor(private readonly deps: EventSourcesDeps) {}

  get cluster(): Cluster | undefined {
    return this.deps.redis instanceof Cluster ? this.deps.redis : undefined;
  }

  /** Subscribes everywhere and makes sure events are on; fails if a node has them off and refuses to turn them on. */
  async start(): Promise<void> {
    await this.sync(true);
    const { redis } = this.deps;
    if (this.cluster) this.cluster.on('refresh', this.resync).on('+node', this.resync).on('-node', this.resync);
    else redis.on('ready', this.commandsBack);
    this.timer = setInterval(this.resync, SYNC_MS).unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    const { redis } = this.deps;
    if (this.cluster) this.cluster.off('refresh', this.resync).off('+node', this.resync).off('-node', this.resync);
    else redis.off('ready', this.commandsBack);
    await this.syncing;
    await Promise.all([...this.sources.keys()].map((key) => this.drop(key)));
  }

  /** Nodes subscribed to now, as host:port (or `server` for one server or a Sentinel master). */
  subscribed(): string[] {
    return [...this.sources.keys()];
  }

  private async sync(strict: boolean): Promise<void> {
    if (this.stopped) return;
    const { logger } = this.deps;
    let gap = false;
    const cluster = this.cluster;
    const wanted = new Map<string, Redis>(
      cluster ? cluster.nodes('all').map((n) => [nodeName(n), n]) : [['server', this.deps.redis as Redis]],
    );
    const masters = new Set(cluster ? cluster.nodes('master').map(nodeName) : ['server']);
    for (const key of this.sources.keys()) if (!wanted.has(key)) await this.drop(key);
    for (const [key, node] of wanted) {
      try {
        if (!this.sources.has(key)) await this.add(key, node);
        const source = this.sources.get(key)!;
        const gained = masters.has(key) && !this.masters.has(key);
        if (source.ensured && !gained) continue;
        // Only a master can prove by a probe that its events arrive; a replica that refuses CONFIG
        // is checked when it is promoted.
        if (masters.has(key)) await this.ensure(key, source.node);
        else await ensureExpiredEvents(source.node, async () => true);
        if (gained || !source.ensured) gap = true;
        source.ensured = true;
        if (gained && !strict) logger.info({ node: key }, 'expired events: a new master is subscribed to');
      } catch (err) {
        if (strict) throw err;
        masters.delete(key); // not counted as gained until its events are known to be on
        logger.error(
          { err, node: key },
          'expired events: cannot subscribe to or enable events on a node; trying again',
        );
      }
    }
    this.masters = masters;
    if (gap && !strict) this.deps.onGap();
  }

  private async add(key: string, node: Redis): Promise<void> {
    const subscriber = this.cluster
      ? new Redis({
          ...this.cluster.options.redisOptions,
          host: node.options.host,
          port: node.options.port,
          enableOfflineQueue: true,
        })
      : (duplicateRedis(this.deps.redis) as Redis);
    const source: Source = { node: this.cluster ? node : (this.deps.redis as Redis), subscriber, ensured: false };
    let first = true;
    subscriber.on('error', (err: Error) =>
      this.deps.logger.debug({ err: err.message, node: key }, 'expired events: subscriber connection error'),
    );
    subscriber.on('pmessage', (_pattern: string, _channel: string, k: string) => {
      const probe = this.probes.get(k);
      if (probe) probe();
      else this.deps.onKey(k);
    });
    // ioredis resubscribes by itself after a reconnect; what came in the gap is caught up.
    subscriber.on('ready', () => {
      if (first) return;
      source.ensured = false;
      this.resync();
    });
    this.sources.set(key, source);
    await subscriber.psubscribe(EXPIRED_PATTERN);
    first = false;
  }

  private async drop(key: string): Promise<void> {
    const source = this.sources.get(key);
    if (!source) return;
    this.sources.delete(key);
    source.subscriber.disconnect();
  }

  private ensure(key: string, node: Redis): Promise<string> {
    return ensureExpiredEvents(node, () => this.probe(key, node));
  }

  /** Makes a key on `node` expire and waits for its event: proof that events arrive when CONFIG cannot show it. */
  private async probe(nodeKey: string, node: Redis): Promise<boolean> {
    const key = await this.probeKeyOn(nodeKey, node);
    let seen = false;
    this.probes.set(key, () => (seen = true));
    try {
      await node.set(key, '1', 'PX', 1);
      // Redis deletes an expired key (and emits the event) when it is touched or sampled.
      for (const until = Date.now() + PROBE_MS; !seen && Date.now() < until; ) {
        await delay(20);
        await node.exists(key);
      }
      return seen;
    } finally {
      this.probes.delete(key);
    }
  }

  /** A probe key that this node serves: on a cluster, one in a slot it owns. */
  private async probeKeyOn(nodeKey: string, node: Redis): Promise<string> {
    const cluster = this.cluster;
    for (let i = 0; ; i++) {
      const key = probeKey(randomUUID());
      if (!cluster) return key;
      const slot = (await node.cluster('KEYSLOT', key)) as number;
      if (cluster.slots[slot]?.[0] === nodeKey) return key;
      if (i > 200) throw new Error(`no slot of ${nodeKey} found for a probe key`);
    }
  }
}

/**
 * Makes sure a node emits expired events (flags E and x). Sets them where CONFIG is allowed; where
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
    throw new Error(
      `cannot read notify-keyspace-events (${(err as Error).message}) and a probe key expired without an event: add "notify-keyspace-events Ex" to redis.conf or your provider's Redis parameters`,
    );
  }
  const hasEvents = flags.includes('E');
  const hasExpired = flags.includes('x') || flags.includes('A');
  if (hasEvents && hasExpired) return flags;
  const wanted = `${flags}${hasEvents ? '' : 'E'}${hasExpired ? '' : 'x'}`;
  try {
    await redis.config('SET', 'notify-keyspace-events', wanted);
  } catch (err) {
    throw new Error(
      `Redis refused CONFIG SET notify-keyspace-events ${wanted} (${(err as Error).message}): add "notify-keyspace-events ${wanted}" to redis.conf or your provider's Redis parameters`,
    );
  }
  return wanted;
}
