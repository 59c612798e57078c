// Builds the connections a process needs from the config and closes them in reverse order.
import type { RedisOptions } from 'ioredis';
import type { RedisClient } from '../redis/connect.js';
import { requireServers, type Config } from '../config/index.js';
import { closeAll, delay, withTimeout } from './daemon.js';
import { createPool, type Pool } from './db.js';
import { UnavailableError } from './errors.js';
import type { Logger } from './logger.js';
import { countBackendError } from './metrics.js';
import { createRedis, pingMasters, quitRedis, redisAddress, redisSetting, sentinelReplicas } from '../redis/connect.js';
import { checkRedisSettings } from '../redis/settings.js';
import { ReplicaWatch } from '../redis/replica-watch.js';
import { replicaAcksFor, type ReplicaAcks } from '../redis/replication.js';
import { MasterNotAllowed } from '../redis/sentinel.js';

export interface Connections {
  pool: Pool;
  redis: RedisClient;
  /** What writes through `redis` wait for before they count (REDIS_MIN_REPLICAS_ACK); undefined at 0. */
  replicaAcks: ReplicaAcks | undefined;
  close(): Promise<void>;
}

/**
 * Connects to both servers, waiting up to STARTUP_TIMEOUT_MS for them to answer (processes and
 * servers often start together), then fails with a message that says which one and why.
 */
export async function connect(
  config: Config,
  logger: Logger,
  opts: { poolSize?: number; redis?: RedisOptions } = {},
): Promise<Connections> {
  const { databaseUrl, redis: target } = requireServers(config);
  const pool = createPool(databaseUrl, opts.poolSize ?? 10);
  pool.on('error', (err) => countBackendError(err, 'postgres'));
  const redis = createRedis(target, opts.redis);
  const replicas = sentinelReplicas(target, config.redisMinReplicasAck, logger);
  const watch =
    config.redisMinReplicasAck > 0
      ? new ReplicaWatch(redis, config.redisMinReplicasAck, logger, replicas && ((node) => replicas.sole(node)))
      : undefined;
  const replicaAcks = replicaAcksFor(
    redis,
    config.redisMinReplicasAck,
    config.redisWaitTimeoutMs,
    replicas && (() => replicas.healthy()),
    watch,
  );
  const where = redisSetting(target);
  let lastRedisError = '';
  redis.on('error', (err) => {
    countBackendError(err, 'redis');
    // A master outside REDIS_SENTINEL_ALLOWED_HOSTS is a setting or an attack, not an outage.
    if (err instanceof MasterNotAllowed)
      logger.error({ err: err.message, alert: 'SENTINEL_MASTER_REFUSED' }, 'redis master refused');
    else if (err.message !== lastRedisError) logger.warn({ err: err.message }, 'redis connection error');
    lastRedisError = err.message;
  });
  const close = () =>
    closeAll(logger, [
      ['replica watch', () => watch?.stop()],
      ['sentinels', () => replicas?.stop()],
      ['redis', () => quitRedis(redis)],
      ['postgres', () => pool.end()],
    ]);
  try {
    const waiting = { timeoutMs: config.startupTimeoutMs, logger };
    await waitUntil(
      { ...waiting, server: `Postgres at ${postgresAddress(databaseUrl)}` },
      () => pool.query('select 1'),
      (err) => `Postgres at DATABASE_URL is unusable: ${err}`,
    );
    // The connection's own error (NOAUTH, WRONGPASS, ECONNREFUSED) says more than a command's
    // ("Stream isn't writeable" where commands are not queued).
    const redisError = (err: string) => {
      const said = lastRedisError || err;
      const noPassword = target.kind === 'single' && /^NOAUTH/.test(said) && new URL(target.url).password === '';
      return noPassword ? `${said} (REDIS_URL carries no password: redis://:password@host:6379)` : said;
    };
    await waitUntil(
      { ...waiting, server: `Redis at ${redisAddress(target)}` },
      () => withTimeout(pingMasters(redis), 2000, 'no answer within 2 s'),
      (err) => `Redis at ${where} is unusable: ${redisError(err)}`,
      () => lastRedisError,
    );
    await checkRedisSettings(redis, logger);
    await replicas?.start();
    await watch?.start();
  } catch (err) {
    await watch?.stop();
    await replicas?.stop();
    // Not quit(): on a connection that never came up it waits forever, and with nothing else
    // pending the process would end with exit code 0.
    redis.disconnect();
    await pool.end().catch(() => {});
    throw err;
  }
  return { pool, redis, replicaAcks, close };
}

/** Where a Postgres URL points, for a message: host:port (the socket directory, for a local socket). */
function postgresAddress(databaseUrl: string): string {
  const url = new URL(databaseUrl);
  return `${url.hostname || url.searchParams.get('host')}:${url.port || 5432}`;
}

/** Seconds between the lines that say a start is still waiting for a server. */
const PROGRESS_EVERY_MS = 5000;

/**
 * Probes until the server answers, or fails with `message` after `timeoutMs`. Every 5 s it says what
 * it waits for and the last error: a start that waits on a server is never silent.
 */
async function waitUntil(
  opts: { timeoutMs: number; logger: Logger; server: string },
  probe: () => Promise<unknown>,
  message: (err: string) => string,
  lastError: () => string = () => '',
): Promise<void> {
  const started = Date.now();
  let report = started + PROGRESS_EVERY_MS;
  for (let attempt = 0; ; attempt++) {
    try {
      await probe();
      return;
    } catch (err) {
      const now = Date.now();
      // Two tries at least: the first may fail before the connection has said why (its error event).
      if (now >= started + opts.timeoutMs && attempt > 0) throw new UnavailableError(message((err as Error).message));
      if (now >= report) {
        const waited = `${Math.floor((now - started) / 1000)} of ${Math.round(opts.timeoutMs / 1000)} s`;
        opts.logger.warn(
          { err: lastError() || (err as Error).message },
          `waiting for ${opts.server}, ${waited} (STARTUP_TIMEOUT_MS)`,
        );
        report += PROGRESS_EVERY_MS;
      }
      await delay(Math.min(100 * 2 ** attempt, 1000));
    }
  }
}
