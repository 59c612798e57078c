// "Nothing changed", made checkable: every Redis key and every row of sales and orders, compared
// byte for byte before and after a request that must change nothing.
import type { RedisClient } from '../../shared/redis/connect.js';
import type { TestEnv } from './env.js';

export interface StateSnapshot {
  databases: string[];
  redis: Record<string, { type: string; expiresAt: number; value: unknown; dump: string }>;
  sales: string[];
  orders: string[];
}

async function redisValue(r: RedisClient, key: string, type: string): Promise<unknown> {
  switch (type) {
    case 'string':
      return r.get(key);
    case 'hash':
      return r.hgetall(key);
    case 'list':
      return r.lrange(key, 0, -1);
    case 'set':
      return (await r.smembers(key)).sort();
    case 'zset':
      return r.zrange(key, '0', '-1', 'WITHSCORES');
    case 'stream':
      return r.xrange(key, '-', '+');
    default:
      return null; // the dump still covers it
  }
}

/**
 * Every Redis key (value, absolute expiry and DUMP) and every row of sales and orders, all columns:
 * what "nothing changed" is checked against. `skip` leaves out keys that change by design.
 */
export async function stateSnapshot(env: TestEnv, skip?: (key: string) => boolean): Promise<StateSnapshot> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await env.redis.scan(cursor, 'COUNT', 1000);
    cursor = next;
    keys.push(...batch.filter((k) => !skip?.(k)));
  } while (cursor !== '0');
  const redis: StateSnapshot['redis'] = {};
  for (const key of keys.sort()) {
    const type = await env.redis.type(key);
    redis[key] = {
      type,
      expiresAt: await env.redis.pexpiretime(key),
      value: await redisValue(env.redis, key, type),
      dump: (await env.redis.dumpBuffer(key)).toString('hex'),
    };
  }
  // SCAN sees one database; a write anywhere else shows up here.
  const databases = (await env.redis.info('keyspace'))
    .split('\n')
    .filter((l) => /^db\d+:/.test(l))
    .map((l) => l.split(':')[0]!);
  // Row text keeps microseconds that a JS Date would drop.
  const rows = async (table: 'sales' | 'orders') =>
    (await env.pool.query<{ r: string }>(`select row_to_json(t)::text as r from ${table} t order by id`)).rows.map(
      (x) => x.r,
    );
  return { databases, redis, sales: await rows('sales'), orders: await rows('orders') };
}
