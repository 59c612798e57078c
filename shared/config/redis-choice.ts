// Which of the three Redis forms the settings name (one server, a cluster, or Sentinel), and the
// servers every command but the local stack needs.
import type { Config } from './parse.js';
import { ConfigError, type AllowedHost, type HostPort } from './values.js';

export interface RedisAuth {
  username?: string;
  password?: string;
  tls: boolean;
}

/** Where Redis is: one server, a cluster (its seed nodes), or the master a set of sentinels names. */
export type RedisTarget =
  | { kind: 'single'; url: string }
  | { kind: 'cluster'; nodes: HostPort[]; auth: RedisAuth }
  | {
      kind: 'sentinel';
      sentinels: HostPort[];
      name: string;
      sentinelPassword?: string;
      auth: RedisAuth;
      allowedMasters?: AllowedHost[];
    };

const REDIS_FORMS =
  'REDIS_URL (one server), REDIS_CLUSTER_NODES (Redis Cluster) or REDIS_SENTINELS with REDIS_SENTINEL_NAME (Sentinel)';

/** The one Redis form the settings name; anything ambiguous or half-given is refused (exit 2). */
export function redisTarget(config: Config): RedisTarget {
  const set = [
    ['REDIS_URL', config.redisUrl],
    ['REDIS_CLUSTER_NODES', config.redisClusterNodes],
    ['REDIS_SENTINELS', config.redisSentinels],
  ]
    .filter(([, v]) => v !== undefined)
    .map(([name]) => name as string);
  if (set.length > 1) throw new ConfigError(`${set.join(' and ')} are both set: set exactly one of ${REDIS_FORMS}`);
  if (config.redisSentinelName && !config.redisSentinels) {
    throw new ConfigError(
      'REDIS_SENTINEL_NAME is set without REDIS_SENTINELS: set both for Sentinel (REDIS_SENTINELS=host:port,...), or neither',
    );
  }
  const auth: RedisAuth = { username: config.redisUsername, password: config.redisPassword, tls: config.redisTls };
  if (config.redisUrl) {
    const extra = [
      ['REDIS_USERNAME', config.redisUsername],
      ['REDIS_PASSWORD', config.redisPassword],
      ['REDIS_TLS', config.redisTls || undefined],
    ]
      .filter(([, v]) => v !== undefined)
      .map(([name]) => name);
    if (extra.length > 0)
      throw new ConfigError(
        `${extra.join(', ')} apply to REDIS_CLUSTER_NODES and REDIS_SENTINELS only: with REDIS_URL put them in the URL (rediss://user:password@host:6379 for TLS)`,
      );
    return { kind: 'single', url: config.redisUrl };
  }
  if (config.redisClusterNodes) return { kind: 'cluster', nodes: config.redisClusterNodes, auth };
  if (config.redisSentinels) {
    if (!config.redisSentinelName)
      throw new ConfigError(
        "REDIS_SENTINELS is set without REDIS_SENTINEL_NAME: set it to the master's name in the sentinels' configuration (`sentinel monitor <name> ...`)",
      );
    return {
      kind: 'sentinel',
      sentinels: config.redisSentinels,
      name: config.redisSentinelName,
      sentinelPassword: config.redisSentinelPassword,
      auth,
      allowedMasters: config.redisSentinelAllowedHosts,
    };
  }
  throw new ConfigError(
    `Redis is not set: set ${REDIS_FORMS}, or pass --redis-url (or run \`flashsale dev\` for a local stack)`,
  );
}

/** Whether any Redis setting is given (commands where Redis is optional). */
export const redisConfigured = (config: Config) =>
  Boolean(config.redisUrl || config.redisClusterNodes || config.redisSentinels);

/** The servers every command but the local stack needs, with the message that says how to give them. */
export function requireServers(config: Config): { databaseUrl: string; redis: RedisTarget } {
  if (!config.databaseUrl) {
    throw new ConfigError(
      'DATABASE_URL is not set: set DATABASE_URL=postgres://user:pass@host:5432/db or pass --database-url (or run `flashsale dev` for a local stack)',
    );
  }
  return { databaseUrl: config.databaseUrl, redis: redisTarget(config) };
}
