// The admission loop needs Postgres only to learn which sales have a room; the rooms themselves
// live in Redis. A Postgres outage must not stop it handing out passes for the sales it knows.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { AdmissionLoop, SALES_REFRESH_MS } from '../shared/admission/loop.js';
import { delay } from '../shared/runtime/daemon.js';
import { saleKeys } from '../shared/redis/keys.js';
import { joinQueue, Phase } from '../shared/admission/room/room.js';
import { testEnv, type TestEnv } from './support/env.js';
import { newSale, redisNow } from './support/fixtures.js';

let env: TestEnv;
before(async () => {
  env = await testEnv({}, { ownPostgres: true });
});
after(() => env.close());

test('admission: with Postgres down the loop keeps admitting for the sales it knows, and learns of new ones once Postgres is back', async () => {
  // Rooms started a second ago by Redis's clock: a step has the passes for everyone in line.
  const startedASecondAgo = async () => new Date((await redisNow(env.redis)) - 1000).toISOString();
  const s = await newSale(env, {
    stock: 10,
    admission: 'queue',
    admitRatePerSecond: 100,
    admitOverbook: 1,
    passSeconds: 60,
    startsAt: await startedASecondAgo(),
  });
  for (const b of ['b1', 'b2', 'b3']) await joinQueue(env.redis, s.id, b);
  const loop = new AdmissionLoop({ pool: env.pool, redis: env.redis, logger: env.logger });
  await loop.refreshSales();
  await env.stopPostgres();
  // Past the refresh interval: this tick's re-read of the sales fails.
  await delay(SALES_REFRESH_MS + 50);
  const ticks = await loop.tick();
  assert.deepEqual(
    ticks.map((t) => [t.saleId, t.phase, t.admitted]),
    [[s.id, Phase.Open, 3]],
  );
  assert.equal(await env.redis.hget(saleKeys(s.id).room, 'admitted'), '3');

  await env.startPostgres();
  const later = await newSale(env, {
    stock: 10,
    admission: 'queue',
    admitRatePerSecond: 100,
    admitOverbook: 1,
    passSeconds: 60,
    startsAt: await startedASecondAgo(),
  });
  await joinQueue(env.redis, later.id, 'c1');
  await delay(SALES_REFRESH_MS + 50);
  // The re-read goes on beside the ticks; a tick after it has finished steps the new sale too.
  for (let i = 0; i < 100 && (await env.redis.hget(saleKeys(later.id).room, 'admitted')) !== '1'; i++) {
    await loop.tick();
    await delay(20);
  }
  assert.equal(await env.redis.hget(saleKeys(later.id).room, 'admitted'), '1');
  await loop.stop();
});
