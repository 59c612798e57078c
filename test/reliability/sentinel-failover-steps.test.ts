// A Sentinel master left without replicas that are still up is not in the degraded mode: what it
// holds is not written to Postgres unconfirmed (shared/redis/sentinel-replicas.ts, sole()). Driven
// step by step, as a graceful SENTINEL FAILOVER and a partition would leave it, with the sentinels
// held still so that they neither finish nor undo the steps meanwhile:
// - a partition cuts the master off from both replicas: its batch waits, and is written once the
//   replicas are back and confirm it;
// - a failover promotes one replica, a purchase is reserved on the old master (answered 503: only
//   the other replica confirmed it), then the other replica is moved to the new master: the writer
//   refuses the old master's batch, so Postgres holds no order the new master would sell again.
// The degraded mode itself, with the replicas gone for good, is test/reliability/master-lost.test.ts.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { OrderWriter } from '../../shared/pipeline/writer.js';
import { Purchaser } from '../../shared/purchase/purchaser.js';
import { saleKeys } from '../../shared/redis/keys.js';
import { HttpError } from '../../shared/runtime/errors.js';
import { AdminConnections, unusedPort } from '../../tools/redis-cluster.js';
import { startSentinels, type LocalSentinels } from '../../tools/redis-sentinel.js';
import { testEnv, type TestEnv } from '../support/env.js';
import { newSale, waitFor } from '../support/fixtures.js';

let dir: string;
let topo: LocalSentinels;
let env: TestEnv;
const admin = new AdminConnections();

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'flashsale-sentinel-steps-'));
  topo = await startSentinels(dir, { replicas: 2 });
  env = await testEnv(
    { redisMinReplicasAck: 1, redisWaitTimeoutMs: 200 },
    { redis: { redisSentinels: topo.sentinels, redisSentinelName: topo.name } },
  );
  // The sentinels keep their view (master, two replicas in sync) and act on none of the steps: a
  // replica reporting another master is set back 4 publish periods (8 s) after their INFO sees it.
  // They still ping every node, so a node down is still seen down.
  for (const s of topo.sentinels.split(','))
    await admin.ask(
      Number(s.split(':')[1]),
      'SENTINEL',
      'DEBUG',
      'info-period',
      3_600_000,
      'publish-period',
      3_600_000,
    );
});

after(async () => {
  admin.close();
  await env?.close();
  await topo?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const writerOf = (writerId: string) =>
  new OrderWriter({
    pool: env.pool,
    redis: env.redis,
    replicaAcks: env.replicaAcks,
    logger: env.logger,
    config: { ...env.config, writerId, writerLeaseMs: 60_000 },
  });

const orderIds = async (saleId: string) =>
  (await env.pool.query<{ id: string }>('select id from orders where sale_id = $1 order by id', [saleId])).rows.map(
    (r) => r.id,
  );

const replicasOnline = async (port: number) =>
  Number(/^connected_slaves:(\d+)/m.exec(await admin.ask<string>(port, 'INFO', 'replication'))?.[1]);

const linkUp = (port: number) =>
  waitFor('the replica in sync', async () =>
    /master_link_status:up/.test(await admin.ask<string>(port, 'INFO', 'replication')),
  );

test('sentinel: a master cut off from its replicas by a partition is not drained unconfirmed; its batch is written once they are back', async () => {
  const [master, ...replicas] = topo.nodes;
  const sale = await newSale(env, { stock: 10 });
  const writer = writerOf('partition');
  const purchaser = new Purchaser(env.redis, env.config, env.replicaAcks);
  const { orderId } = await purchaser.purchase(sale.id, 'alice', 1);

  // The replicas lose the master (a port nobody listens on) but stay up for the sentinels.
  const nowhere = await unusedPort();
  for (const r of replicas) await admin.ask(r!.port, 'REPLICAOF', '127.0.0.1', nowhere);
  await waitFor('the master without replicas', async () => (await replicasOnline(master!.port)) === 0);
  await assert.rejects(writer.drainOnce(), /replicas confirmed/);
  assert.deepEqual(await orderIds(sale.id), [], 'nothing written unconfirmed');

  for (const r of replicas) await admin.ask(r!.port, 'REPLICAOF', '127.0.0.1', master!.port);
  for (const r of replicas) await linkUp(r!.port);
  // A replica fresh from its sync acknowledges only from its first REPLCONF ACK (up to a second).
  await waitFor(
    'the batch written once the replicas confirm it',
    async () => (await writer.drainOnce().catch(() => 0)) === 1,
  );
  assert.deepEqual(await orderIds(sale.id), [orderId]);
});

test('sentinel: a failover that moved the replicas to the new master leaves the old master undrained: no order for a reservation the new master lacks', async () => {
  const [old, promoted, other] = topo.nodes;
  const sale = await newSale(env, { stock: 10 });
  const writer = writerOf('failover');
  const purchaser = new Purchaser(env.redis, env.config, env.replicaAcks);
  // Whatever the test before left (a no-op for a replica already following it).
  for (const r of [promoted, other]) await admin.ask(r!.port, 'REPLICAOF', '127.0.0.1', old!.port);
  await waitFor('both replicas online', async () => (await replicasOnline(old!.port)) === 2);
  await waitFor('the processes to see them', async () => !env.replicaAcks!.unreplicated(sale.id), 20_000, 100);
  const kept = await purchaser.purchase(sale.id, 'alice', 1);
  assert.equal(await writer.drainOnce(), 1);

  // The sentinels' steps: promote one replica, while the clients still write to the old master...
  await admin.ask(promoted!.port, 'REPLICAOF', 'NO', 'ONE');
  await assert.rejects(
    purchaser.purchase(sale.id, 'bob', 1),
    (err) =>
      err instanceof HttpError && err.code === 'unavailable' && /of 2 Redis replicas confirmed/.test(err.message),
  );
  assert.equal(await env.redis.llen(saleKeys(sale.id).winners), 1, "bob's reservation, on the old master only");
  // ...then move the other replica to the new master: it drops bob's reservation with its resync.
  await admin.ask(other!.port, 'REPLICAOF', '127.0.0.1', promoted!.port);
  await waitFor('the old master without replicas', async () => (await replicasOnline(old!.port)) === 0);
  await linkUp(other!.port);

  await assert.rejects(writer.drainOnce(), /replicas confirmed/);
  assert.deepEqual(await orderIds(sale.id), [kept.orderId], "no order for bob's reservation");
  // The old master keeps the batch, should it turn out to be the record after all.
  assert.equal(await env.redis.llen(saleKeys(sale.id).processing('failover')), 1);
  // Conserved on the new master: its stock and Postgres's orders add up to the sale's.
  assert.equal(await admin.ask(promoted!.port, 'GET', saleKeys(sale.id).available), '9');
  assert.equal(await admin.ask(other!.port, 'GET', saleKeys(sale.id).available), '9');
});
