// REDIS_MIN_REPLICAS_ACK on one server: a reservation no replica confirmed is answered 503, and the
// writer does not make it an order until a replica has it (a failover could still lose it, and an
// order whose reservation the new master never saw would let that unit be sold twice); a restore no
// replica confirmed is not recorded, and the listener runs it again once one does.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { Redis } from 'ioredis';
import { startApi } from '../daemons/api.js';
import { classify } from '../shared/errors.js';
import { saleKeys } from '../shared/keys.js';
import { createRedis } from '../shared/redis/connect.js';
import { ExpiryListener } from '../shared/listener.js';
import { OrderWriter } from '../shared/writer.js';
import { startRedis } from '../tools/local-stack.js';
import { assertConserved, testEnv, type TestEnv } from './support/env.js';
import { newSale, orderCount, waitFor } from './support/fixtures.js';
import { http } from './support/http.js';

let env: TestEnv;
let api: Awaited<ReturnType<typeof startApi>>;
let dir: string;
const stops: (() => Promise<void>)[] = [];

/** A replica of the env's server, in sync: a connection to it, and its stop. */
async function replica(name: string): Promise<{ link: Redis; stop(): Promise<void> }> {
  const server = await startRedis(join(dir, name), { args: ['--replicaof', '127.0.0.1', String(env.redisServer.port)] });
  const link = createRedis(server.url);
  let stopped: Promise<void> | undefined;
  const stop = () => (stopped ??= (link.disconnect(), server.stop()));
  stops.push(stop);
  await inSync(link);
  return { link, stop };
}

/**
 * In sync as both sides see it: the replica's link is up, the master counts it online, and it has
 * acknowledged a write made now. After a full sync the master starts the command stream only at the
 * replica's first acknowledgement (up to a second later); until then a WAIT after a write fails. A
 * PUBLISH is replicated, and WAIT covers it.
 */
const inSync = (link: Redis) => waitFor('the replica in sync', async () =>
  /master_link_status:up/.test(await link.info('replication')) && /connected_slaves:1\b[\s\S]*state=online/.test(await env.redis.info('replication'))
  && (await env.redis.publish('test:replica-sync', '1'), await env.redis.wait(1, 100)) === 1, 20_000, 100);

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'flashsale-replica-'));
  env = await testEnv({ redisMinReplicasAck: 1, redisWaitTimeoutMs: 200 });
  api = await startApi(env.config, env.logger);
});

after(async () => {
  await api?.stop();
  for (const stop of stops) await stop();
  await env?.close();
  rmSync(dir, { recursive: true, force: true });
});

test('REDIS_MIN_REPLICAS_ACK=1 without a replica: 503 with the order id, no order written until a replica has the reservation', async () => {
  const sale = await newSale(env, { stock: 10 });
  const res = await http(api.port, 'POST', `/api/sales/${sale.id}/purchases`, { body: { qty: 1 }, user: 'alice' });
  assert.equal(res.status, 503, JSON.stringify(res.body));
  assert.equal(res.body.error, 'unavailable');
  const orderId = /Order (\S+) was reserved but only 0 of 1 Redis replicas/.exec(String(res.body.message))?.[1];
  assert.ok(orderId, String(res.body.message));
  // The reservation itself is kept in Redis, as a 503 may leave it.
  assert.equal(await env.redis.get(saleKeys(sale.id).available), '9');

  const writer = new OrderWriter({ pool: env.pool, redis: env.redis, replicaAcks: env.replicaAcks, logger: env.logger, config: { ...env.config, writerId: 'replica-test' } });
  await assert.rejects(writer.drainOnce(), (err) => classify(err) === 'unavailable' && /0 of 1 replicas/.test((err as Error).message));
  assert.equal(await orderCount(env, sale.id), 0, 'no order while no replica has its reservation');

  const { stop } = await replica('replica-1');
  assert.equal(await writer.drainOnce(), 1);
  const row = await env.pool.query<{ id: string; status: string }>('select id, status from orders where sale_id = $1', [sale.id]);
  assert.deepEqual(row.rows, [{ id: orderId, status: 'pending' }]);
  await assertConserved(env, [sale]);
  await stop();
});

test('a restore no replica confirmed is not recorded; the listener runs it again once a replica has it', async () => {
  const sale = await newSale(env, { stock: 10, paymentWindowSeconds: 1, maxPerOrder: 2, perUserLimit: 2 });
  const { link } = await replica('replica-2');
  const res = await http(api.port, 'POST', `/api/sales/${sale.id}/purchases`, { body: { qty: 2 }, user: 'bob' });
  assert.equal(res.status, 202, JSON.stringify(res.body));
  const writer = new OrderWriter({ pool: env.pool, redis: env.redis, replicaAcks: env.replicaAcks, logger: env.logger, config: { ...env.config, writerId: 'replica-test-2' } });
  await waitFor('the order written', async () => (await writer.drainOnce()) > 0 || (await orderCount(env, sale.id)) > 0);
  // The replica leaves: nothing the listener restores can be confirmed now.
  await link.replicaof('NO', 'ONE');
  await waitFor('the master without replicas', async () => /connected_slaves:0/.test(await env.redis.info('replication')));
  const listener = new ExpiryListener({ pool: env.pool, redis: env.redis, replicaAcks: env.replicaAcks, logger: env.logger, config: env.config });
  await listener.start();
  stops.push(() => listener.stop());
  const order = async () => (await env.pool.query<{ status: string; restored: boolean }>('select status, restored_at is not null as restored from orders where id = $1', [res.body.orderId])).rows[0];
  await waitFor('the order closed', async () => (await order())?.status === 'expired');
  await new Promise((r) => setTimeout(r, 1000));
  assert.deepEqual(await order(), { status: 'expired', restored: false }, 'a restore is recorded only once a replica confirms it');
  // Back in sync: the listener's retry records the restore, and the stock is back once.
  await link.replicaof('127.0.0.1', String(env.redisServer.port));
  await inSync(link);
  await waitFor('the restore recorded', async () => (await order())?.restored, 20_000, 100);
  assert.equal(await env.redis.get(saleKeys(sale.id).available), '10');
  await assertConserved(env, [sale]);
});
