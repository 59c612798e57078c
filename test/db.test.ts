// A client checked out of the pool whose connection the server ends between queries (a Postgres
// restart while the replay holds its lock, or while a transaction waits on Redis): the process must
// not crash with an unhandled 'error' event, and the next query fails as `unavailable`.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { withClient, withTransaction } from '../shared/runtime/db.js';
import { classify } from '../shared/runtime/errors.js';
import { testEnv, type TestEnv } from './support/env.js';

let env: TestEnv;

before(async () => {
  env = await testEnv();
});

after(async () => {
  await env?.close();
});

/** Ends the client's connection from the server side, then waits while no query runs on it. */
async function endedWhileIdle(client: { query: (sql: string) => Promise<{ rows: { pid: number }[] }> }): Promise<void> {
  const {
    rows: [row],
  } = await client.query('select pg_backend_pid() as pid');
  await env.pool.query('select pg_terminate_backend($1)', [row!.pid]);
  await new Promise((r) => setTimeout(r, 300));
}

test('a held client whose connection the server ends between queries: no crash, the next query is unavailable, the pool goes on', async () => {
  await assert.rejects(
    withClient(env.pool, async (client) => {
      await endedWhileIdle(client);
      await client.query('select 1');
    }),
    (err) => classify(err) === 'unavailable',
  );
  await assert.rejects(
    withTransaction(env.pool, async (client) => {
      await endedWhileIdle(client);
      await client.query('select 1');
    }),
    (err) => classify(err) === 'unavailable',
  );
  // The ended clients were destroyed, not handed out again.
  for (let i = 0; i < 20; i++) assert.equal((await env.pool.query('select 1 as one')).rows[0].one, 1);
});
