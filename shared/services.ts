// Builds the connections a process needs from the config and closes them in reverse order.
import type { Redis, RedisOptions } from 'ioredis';
import { requireServers, type Config } from './config.js';
import { closeAll } from './daemon.js';
import { createPool, type Pool } from './db.js';
import type { Logger } from './logger.js';
import { createRedis } from './redis.js';

export interface Connections {
  pool: Pool;
  redis: Redis;
  close(): Promise<void>;
}

/** Connects to both servers and checks both answer, failing with a message that says what is wrong. */
export async function connect(config: Config, logger: Logger, opts: { poolSize?: number; redis?: RedisOptions } = {}): Promise<Connections> {
  const { databaseUrl, redisUrl } = requireServers(config);
  const pool = createPool(databaseUrl, opts.poolSize ?? 10);
  const redis = createRedis(redisUrl, opts.redis);
  redis.on('error', (err) => logger.warn({ err: err.message }, 'redis connection error'));
  const close = () => closeAll(logger, [['redis', () => redis.quit()], ['postgres', () => pool.end()]]);
  try {
    await pool.query('select 1').catch((err: Error) => {
      throw new Error(`Postgres at DATABASE_URL is unusable: ${err.message}`);
    });
    await withTimeout(redis.ping(), 10_000, 'Redis at REDIS_URL did not answer within 10 s');
  } catch (err) {
    await close();
    throw err;
  }
  return { pool, redis, close };
}

function withTimeout<T>(p: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p,
    new Promise<never>((_, rej) => {
      timer = setTimeout(() => rej(new Error(message)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
