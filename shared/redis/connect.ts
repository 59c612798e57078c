// Connections to Redis in its three forms: one server, a Sentinel-watched master, or a cluster.
// Everything that differs between them is here; the commands and scripts are the same on each.
import { createRequire } from 'node:module';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import type { RedisTarget } from '../config/index.js';
import { saleKeys } from './keys.js';
import type { Logger } from '../runtime/logger.js';
import { masterGuard, reviveOnEnd, sentinelOptions } from './sentinel.js';
import { SentinelReplicas } from './sentinel-replicas.js';
import { defineScripts, PER_CALL_KEYS } from './scripts.js';
import type { RedisClient } from './client.js';

export type { RedisClient } from './client.js';

/** How often a cluster client re-reads the slot map (ioredis never does unless told). */
const SLOTS_REFRESH_MS = 1000;

export function createRedis(url: string, options?: RedisOptions): Redis;
export function createRedis(target: RedisTarget, options?: RedisOptions): RedisClient;
export function createRedis(where: RedisTarget | string, options: RedisOptions = {}): RedisClient {
  const target: RedisTarget = typeof where === 'string' ? { kind: 'single', url: where } : where;
  const common: RedisOptions = {
    // Commands wait out a reconnect instead of failing the caller after 20 tries.
    maxRetriesPerRequest: null,
    retryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 6), 2000) + Math.floor(Math.random() * 100),
    // A master demoted under us (a failover) answers writes with READONLY, having run nothing:
    // reconnect (which asks the sentinels or the slot map again) and resend.
    reconnectOnError: (err) => (err.message.startsWith('READONLY') ? 2 : false),
    autoPipeliningIgnoredCommands: PER_CALL_KEYS,
    ...options,
  };
  let redis: RedisClient;
  if (target.kind === 'single') {
    redis = new Redis(target.url, common);
  } else if (target.kind === 'sentinel') {
    redis = new Redis({ ...common, ...sentinelOptions(target), ...masterGuard(target.allowedMasters) });
    reviveOnEnd(redis);
  } else {
    const { username, password, tls } = target.auth;
    const { enableAutoPipelining: _unused, ...perNode } = common;
    redis = new Cluster(target.nodes, {
      redisOptions: { ...perNode, username, password, ...(tls ? { tls: {} } : {}) },
      enableOfflineQueue: options.enableOfflineQueue ?? true,
      // Never on a cluster, whatever the caller asks: ioredis 6.0.0 answers an auto-pipeline that
      // runs out of redirections (a script refused with TRYAGAIN for as long as its slot is half
      // moved: 16 tries, 1.6 s) with an empty result list, and its callback then throws where no
      // caller can catch it, ending the process. A command sent on its own is refused as it should be.
      enableAutoPipelining: false,
      autoPipeliningIgnoredCommands: PER_CALL_KEYS,
      // Every command goes to its slot's master; replicas are for failover only.
      scaleReads: 'master',
      slotsRefreshInterval: SLOTS_REFRESH_MS,
      clusterRetryStrategy: (times) => Math.min(100 * times, 2000),
    });
  }
  defineScripts(redis);
  return redis;
}

/** The setting that names this Redis, for a message that says what to fix. */
export const redisSetting = (target: RedisTarget): string =>
  ({ single: 'REDIS_URL', cluster: 'REDIS_CLUSTER_NODES', sentinel: 'REDIS_SENTINELS' })[target.kind];

/** Where this Redis is, for a message: host:port, the cluster's seed nodes, or the sentinels and the master's name. */
export function redisAddress(target: RedisTarget): string {
  const list = (nodes: { host: string; port: number }[]) => nodes.map((n) => `${n.host}:${n.port}`).join(',');
  if (target.kind === 'single') {
    const url = new URL(target.url);
    return `${url.hostname || '127.0.0.1'}:${url.port || 6379}`;
  }
  return target.kind === 'cluster'
    ? `cluster ${list(target.nodes)}`
    : `master "${target.name}" of sentinels ${list(target.sentinels)}`;
}

/**
 * Replicas a write must reach beyond REDIS_MIN_REPLICAS_ACK, where the form says so: on Sentinel
 * every replica the sentinels see healthy (see sentinel-replicas.ts); none elsewhere, or at 0.
 */
export const sentinelReplicas = (
  target: RedisTarget,
  minReplicasAck: number,
  logger: Logger,
): SentinelReplicas | undefined =>
  target.kind === 'sentinel' && minReplicasAck > 0 ? new SentinelReplicas(target, logger) : undefined;

/**
 * Closes a connection once the replies it waits for are in. quit() alone leaves a Sentinel
 * client's failover detector connected to the sentinels (ioredis 6), reconnecting forever and
 * keeping the process alive; disconnect() after it closes those too.
 */
export async function quitRedis(redis: RedisClient): Promise<void> {
  try {
    await redis.quit();
  } finally {
    redis.disconnect();
  }
}

/**
 * A connection for subscriptions that carry hints (stock back on sale, order transitions): it may
 * wait for a connection (offline queue, no command timeout), and ioredis reconnects by itself, so
 * each distinct connection failure is logged once, not at every retry, until it is back.
 */
export function hintSubscriber(redis: RedisClient, logger: Logger, what: string): RedisClient {
  const subscriber = duplicateRedis(redis, { enableOfflineQueue: true, commandTimeout: undefined });
  let lastError = '';
  subscriber.on('error', (err: Error) => {
    if (err.message !== lastError) logger.warn({ err: err.message }, `${what} connection error`);
    lastError = err.message;
  });
  subscriber.on('ready', () => {
    lastError = ''; // the next outage is news again
  });
  return subscriber;
}

/** Another connection to the same Redis (a subscriber), with `options` on top and our scripts defined. */
export function duplicateRedis(redis: RedisClient, options: RedisOptions = {}): RedisClient {
  // ioredis's duplicate() leaves out the commands defineCommand made: our scripts are defined again.
  if (redis instanceof Cluster) {
    const { enableOfflineQueue = redis.options.enableOfflineQueue } = options;
    const copy = redis.duplicate([], {
      enableOfflineQueue,
      redisOptions: { ...redis.options.redisOptions, ...options },
    });
    defineScripts(copy);
    return copy;
  }
  const copy = redis.duplicate(options);
  defineScripts(copy);
  return copy.options.sentinels ? reviveOnEnd(copy) : copy;
}

/** The masters' connections: a cluster's, as its slot map knows them now, or the one server. */
export function masterNodes(redis: RedisClient): Redis[] {
  return redis instanceof Cluster ? redis.nodes('master') : [redis];
}

/** A node as the slot map names it: host:port. */
export const nodeName = (node: Redis) => `${node.options.host}:${node.options.port}`;

/** Redis Cluster's key-to-slot function (CRC16 of the hash tag), as ioredis itself computes it. */
const calculateSlot = createRequire(import.meta.url)('cluster-key-slot') as (key: string) => number;

/**
 * The connection that serves a sale's slot now: the one server, the Sentinel master, or the
 * cluster master the slot map names (undefined when it names none). Every key of a sale is there.
 */
export function saleNode(redis: RedisClient, saleId: string): Redis | undefined {
  if (!(redis instanceof Cluster)) return redis;
  const owner = redis.slots[calculateSlot(saleKeys(saleId).meta)]?.[0];
  return owner === undefined ? undefined : redis.nodes('master').find((n) => nodeName(n) === owner);
}

/**
 * Every master answers: one server's PING, or on a cluster each master's (a cluster is only as
 * ready as its least available master, since any sale may live there).
 */
export async function pingMasters(redis: RedisClient): Promise<void> {
  if (!(redis instanceof Cluster)) {
    await redis.ping();
    return;
  }
  if (redis.status !== 'ready') throw new Error(`the cluster connection is ${redis.status}`);
  const masters = redis.nodes('master');
  if (masters.length === 0) throw new Error('the cluster has no master in its slot map');
  await Promise.all(
    masters.map((node) =>
      node.ping().catch((err: Error) => {
        throw new Error(`master ${nodeName(node)}: ${err.message}`);
      }),
    ),
  );
}
