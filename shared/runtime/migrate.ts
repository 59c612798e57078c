// Forward-only migrations from sql/NNNN_name.sql. Each runs in a transaction that first inserts
// its id: two processes migrating at once collide on that key, so none is applied twice.
import { readdirSync, readFileSync } from 'node:fs';
import type { Pool } from './db.js';
import { withTransaction } from './db.js';
import type { Logger } from './logger.js';

const sqlDir = new URL('../../sql/', import.meta.url);

function sqlFiles(): string[] {
  return readdirSync(sqlDir)
    .filter((f) => /^\d{4}_.+\.sql$/.test(f))
    .sort();
}

/** Applies every migration not yet applied, in order; with `through`, none after that one (a test builds an older schema so). */
export async function migrate(pool: Pool, logger?: Logger, opts: { through?: string } = {}): Promise<string[]> {
  await pool
    .query('create table if not exists migrations (id text primary key, applied_at timestamptz not null default now())')
    .catch((err: { code?: string }) => {
      // Two processes creating the table at once: the loser sees a unique violation; the table exists.
      if (err.code !== '23505' && err.code !== '42P07') throw err;
    });
  const applied: string[] = [];
  for (const file of sqlFiles()) {
    const id = file.replace(/\.sql$/, '');
    if (opts.through !== undefined && id > opts.through) break;
    const done = await withTransaction(pool, async (client) => {
      const claim = await client.query('insert into migrations (id) values ($1) on conflict do nothing', [id]);
      if (claim.rowCount === 0) return false;
      await client.query(readFileSync(new URL(file, sqlDir), 'utf8'));
      return true;
    });
    if (done) {
      applied.push(id);
      logger?.info({ migration: id }, 'migration applied');
    }
  }
  return applied;
}
