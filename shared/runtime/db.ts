import pg from 'pg';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;

// Bigints (counts, seq) come back as JS numbers: every value we keep fits in 2^53.
pg.types.setTypeParser(20, (v) => Number(v));

/**
 * Every commit of ours is flushed to the WAL before Postgres acknowledges it, whatever the
 * server's default: with `synchronous_commit=off` a crash loses commits already acknowledged, and
 * the writer drops a batch from Redis as soon as its insert is acknowledged. One flush per batch.
 */
const DURABLE_COMMITS = '-c synchronous_commit=on';

/** pg takes `options` from the URL over the pool's own: add ours to what the URL carries. */
function connectionConfig(url: string): { connectionString: string; options?: string } {
  if (/[?&]options=/.test(url)) {
    return {
      connectionString: url.replace(
        /([?&]options=)([^&#]*)/,
        (_, key: string, value: string) => `${key}${value}${encodeURIComponent(` ${DURABLE_COMMITS}`)}`,
      ),
    };
  }
  return { connectionString: url, options: DURABLE_COMMITS };
}

export function createPool(url: string, max = 10): Pool {
  const pool = new pg.Pool({ ...connectionConfig(url), max, connectionTimeoutMillis: 10_000 });
  // An idle client losing its connection (Postgres restart) must not crash the process.
  pool.on('error', () => {});
  return pool;
}

/**
 * Runs fn on one client checked out of the pool. pg-pool takes its error listener off a client it
 * hands out, so a server that ends the connection while we hold the client between queries (a
 * Postgres restart while the replay holds its lock, or a transaction waits on Redis) would emit an
 * unhandled 'error' and crash the process. Here the error is kept: the next query on the client
 * fails as `unavailable`, and the client is destroyed on release instead of going back to the pool.
 */
export async function withClient<T>(pool: Pool, fn: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let lost: Error | undefined;
  const onError = (err: Error) => {
    lost = err;
  };
  client.on('error', onError);
  try {
    return await fn(client);
  } finally {
    client.off('error', onError);
    client.release(lost);
  }
}

/** Postgres's clock: what a time chosen for the record (a sale's default start) is read from, not the host's. */
export async function databaseNow(pool: Pool): Promise<Date> {
  return (await pool.query<{ now: Date }>('select now()')).rows[0]!.now;
}

/** Runs fn in one transaction on one checked-out client. */
export function withTransaction<T>(pool: Pool, fn: (client: PoolClient) => Promise<T>): Promise<T> {
  return withClient(pool, async (client) => {
    try {
      await client.query('begin');
      const result = await fn(client);
      await client.query('commit');
      return result;
    } catch (err) {
      await client.query('rollback').catch(() => {});
      throw err;
    }
  });
}
