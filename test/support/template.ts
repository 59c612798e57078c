// One migrated database per run (test/run.ts makes it), cloned by each test file: CREATE DATABASE
// ... TEMPLATE copies its files in one statement, where migrating costs every migration's DDL again.
import pg from 'pg';
import { createPool } from '../../shared/runtime/db.js';
import { migrate } from '../../shared/runtime/migrate.js';

/** The template's name, set by test/run.ts for the files it runs against its Postgres. */
export const TEMPLATE_ENV = 'FLASHSALE_TEST_TEMPLATE';

/** Creates `name` in the server at `adminUrl` and migrates it; no connection to it is left open. */
export async function createTemplate(adminUrl: string, name: string): Promise<void> {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`create database ${name}`);
  } finally {
    await admin.end();
  }
  const pool = createPool(adminUrl.replace(/\/[^/]*$/, `/${name}`), 1);
  try {
    await migrate(pool);
  } finally {
    // Postgres refuses to copy a template anyone is connected to.
    await pool.end();
  }
}
