// What the product needs of a Redis, checked by every process at start: keys must never be
// evicted (a lost stock counter, buy count or expiry key is silent data loss), and the data should
// survive a restart (AOF, or a replica to fail over to).
import type { Redis } from 'ioredis';
import { masterNodes, nodeName, type RedisClient } from './connect.js';
import type { Logger } from '../runtime/logger.js';

/** A setting's value, or null where CONFIG is refused (managed Redis, renamed or ACL-denied). */
export async function configGet(redis: RedisClient, name: string): Promise<string | null> {
  try {
    const res = (await redis.config('GET', name)) as string[];
    return res[1] ?? '';
  } catch {
    return null;
  }
}

/** Throws (exit 1) on an evicting Redis; warns where a setting cannot be read or nothing persists. Every master of a cluster is checked. */
export async function checkRedisSettings(redis: RedisClient, logger: Logger): Promise<void> {
  const masters = masterNodes(redis);
  for (const node of masters)
    await checkNode(node, masters.length > 1 ? logger.child({ node: nodeName(node) }) : logger);
}

async function checkNode(redis: Redis, logger: Logger): Promise<void> {
  const policy = await configGet(redis, 'maxmemory-policy');
  if (policy === null) {
    logger.warn(
      "cannot read maxmemory-policy (CONFIG is refused): make sure it is noeviction in redis.conf or your provider's Redis parameters; with eviction, Redis may drop stock counters, buyers' counts and expiry keys",
    );
  } else if (policy !== 'noeviction') {
    throw new Error(
      `Redis maxmemory-policy is ${policy}: set maxmemory-policy noeviction (redis.conf, your provider's Redis parameters, or CONFIG SET maxmemory-policy noeviction); with eviction, Redis may drop stock counters, buyers' counts and expiry keys`,
    );
  }
  const aof = await configGet(redis, 'appendonly');
  const replicas = Number(/connected_slaves:(\d+)/.exec(await redis.info('replication').catch(() => ''))?.[1] ?? 0);
  if (replicas > 0) return;
  if (aof === null) {
    logger.warn(
      "cannot read appendonly (CONFIG is refused): make sure Redis persists its data (appendonly yes) or has a replica; without either, a restart loses stock counters, buyers' counts and winners answered 202 but not yet written",
    );
  } else if (aof !== 'yes') {
    logger.warn(
      "Redis has neither AOF (appendonly yes) nor a replica: a restart loses stock counters, buyers' counts and winners answered 202 but not yet written; set appendonly yes",
    );
  } else {
    // everysec sends replies before the write when a background fsync is slow (up to 2 s).
    const fsync = await configGet(redis, 'appendfsync');
    if (fsync !== null && fsync !== 'always')
      logger.warn(
        `Redis appends with appendfsync ${fsync} and has no replica: if the Redis process dies while its disk is slow, up to 2 s of purchases already answered 202 are lost; set appendfsync always, or run a replica with REDIS_MIN_REPLICAS_ACK=1`,
      );
  }
}
