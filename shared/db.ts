import pg from 'pg';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;

// Bigints (counts, seq) come back as JS numbers: every value we keep fits in 2^53.
pg.types.setTypeParser(20, (v) => Number(v));

export function createPool(url: string, max = 10): Pool {
  const pool = new pg.Pool({ connectionString: url, max, connectionTimeoutMillis: 10_000 });
  // An idle client losing its connection (Postgres restart) must not crash the process.
  pool.on('error', () => {});
  return pool;
}

/** Runs fn in one transaction on one checked-out client. */
export async function withTransaction<T>(pool: Pool, fn: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    const result = await fn(client);
    await client.query('commit');
    return result;
  } catch (err) {
    await client.query('rollback').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}
