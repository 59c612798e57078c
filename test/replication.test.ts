// REDIS_MIN_REPLICAS_ACK on one server. A master with a replica online confirms every write before
// it counts: a restore the replica has not acknowledged is not recorded, and the listener runs it
// again once it has (a failover could still lose it). A master without a replica online is in the
// degraded mode (shared/redis/replica-watch.ts): its purchases are answered 503 reserving nothing, and
// what it already holds is written to Postgres unconfirmed, since waiting could not help.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { Redis } from 'ioredis';
import { startApi } from '../daemons/api.js';
import { HttpError } from '../shared/runtime/errors.js';
import { saleKeys } from '../shared/redis/keys.js';
import { createRedis } from '../shared/redis/connect.js';
import { ExpiryListener } from '../shared/pipeline/listener.js';
import { metrics } from '../shared/runtime/metrics.js';
import { Purchaser } from '../shared/purchase/purchaser.js';
import { ReplicaWatch } from '../shared/redis/replica-watch.js';
import { replicaAcksFor } from '../shared/redis/replication.js';
import { OrderWriter } from '../shared/pipeline/writer.js';
import { startRedis } from '../tools/local-stack.js';
import { assertConserved, testEnv, type TestEnv } from './support/env.js';
import { newSale, orderCount, waitFor } from './support/fixtures.js';
import { http } from './support/http.js';

let env: TestEnv;
let api: Awaited<ReturnType<typeof startApi>>;
let dir: string;
const stops: (() => Promise<void>)[] = [];

/** A replica of the env's server, in sync: a connection to it, its process, and its stop. */
async function replica(name: string): Promise<{ link: Redis; pid: number; stop(): Promise<void> }> {
  const server = await startRedis(join(dir, name), {
    args: ['--replicaof', '127.0.0.1', String(env.redisServer.port)],
  });
  const link = createRedis(server.url);
  let stopped: Promise<void> | undefined;
  // Woken first: a paused server would never take its SIGTERM.
  const stop = () => {
    if (!stopped) {
      link.disconnect();
      server.child.kill('SIGCONT');
      stopped = server.stop();
    }
    return stopped;
  };
  stops.push(stop);
  await inSync(link);
  return { link, pid: server.child.pid!, stop };
}

/**
 * In sync as both sides see it: the replica's link is up, the master counts it online, and it has
 * acknowledged a write made now. After a full sync the master starts the command stream only at the
 * replica's first acknowledgement (up to a second later); until then a WAIT after a write fails. A
 * PUBLISH is replicated, and WAIT covers it.
 */
const inSync = (link: Redis) =>
  waitFor(
    'the replica in sync',
    async () => {
      if (!/master_link_status:up/.test(await link.info('replication'))) return false;
      if (!/connected_slaves:1\b[\s\S]*state=online/.test(await env.redis.info('replication'))) return false;
      await env.redis.publish('test:replica-sync', '1');
      return (await env.redis.wait(1, 100)) === 1;
    },
    20_000,
    100,
  );

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'flashsale-replica-'));
  env = await testEnv({ redisMinReplicasAck: 1, redisWaitTimeoutMs: 200 });
  // A replica's full sync starts at once: Redis 7 holds a diskless one 5 s for more replicas to join.
  await env.redis.config('SET', 'repl-diskless-sync-delay', '0');
  api = await startApi(env.config, env.logger);
});

after(async () => {
  await api?.stop();
  for (const stop of stops) await stop();
  await env?.close();
  rmSync(dir, { recursive: true, force: true });
});

test('REDIS_MIN_REPLICAS_ACK=1 on a master without a replica: purchases answered 503 with Retry-After, nothing reserved', async () => {
  const sale = await newSale(env, { stock: 10 });
  const res = await http(api.port, 'POST', `/api/sales/${sale.id}/purchases`, { body: { qty: 1 }, user: 'alice' });
  assert.equal(res.status, 503, JSON.stringify(res.body));
  assert.equal(res.body.error, 'unavailable');
  assert.match(String(res.body.message), /fewer replicas than REDIS_MIN_REPLICAS_ACK[\s\S]*nothing was reserved/);
  assert.equal(res.headers['retry-after'], '1');
  assert.equal(await env.redis.get(saleKeys(sale.id).available), '10');
  assert.equal(await env.redis.hlen(saleKeys(sale.id).queued), 0);
});

test('the degraded mode: a master that loses its replica has its reservations written unconfirmed and refuses new ones until a replica is back', async () => {
  const sale = await newSale(env, { stock: 10 });
  const watch = new ReplicaWatch(env.redis, 1, env.logger);
  const acks = replicaAcksFor(env.redis, 1, 200, undefined, watch)!;
  const purchaser = new Purchaser(env.redis, env.config, acks);
  const writer = new OrderWriter({
    pool: env.pool,
    redis: env.redis,
    replicaAcks: acks,
    logger: env.logger,
    config: { ...env.config, writerId: 'degraded-test' },
  });
  const unreplicated = async () => (await metrics.ordersUnreplicated.get()).values[0]?.value ?? 0;

  const first = await replica('replica-degraded-1');
  await watch.refresh();
  assert.equal(acks.unreplicated(sale.id), false);
  const held = await purchaser.purchase(sale.id, 'carol', 1);
  // The replica is lost for good before the writer ran: the master holds the only copy.
  await first.stop();
  await waitFor('the master without replicas', async () =>
    /connected_slaves:0/.test(await env.redis.info('replication')),
  );
  await watch.refresh();
  assert.equal(acks.unreplicated(sale.id), true);
  await assert.rejects(
    purchaser.purchase(sale.id, 'dave', 1),
    (err) => err instanceof HttpError && err.code === 'unavailable' && /nothing was reserved/.test(err.message),
  );
  assert.equal(await env.redis.get(saleKeys(sale.id).available), '9', 'the refused purchase reserved nothing');

  const before = await unreplicated();
  assert.equal(await writer.drainOnce(), 1, 'written although no replica confirmed it: waiting could not help');
  const rows = await env.pool.query<{ id: string; status: string }>(
    'select id, status from orders where sale_id = $1',
    [sale.id],
  );
  assert.deepEqual(rows.rows, [{ id: held.orderId, status: 'pending' }]);
  assert.equal(await unreplicated(), before + 1);

  // A replica attached again ends the mode: purchases are reserved and confirmed as before.
  const second = await replica('replica-degraded-2');
  await watch.refresh();
  assert.equal(acks.unreplicated(sale.id), false);
  await purchaser.purchase(sale.id, 'erin', 1);
  assert.equal(await writer.drainOnce(), 1);
  assert.equal(await unreplicated(), before + 1, 'a confirmed order is not counted unreplicated');
  await assertConserved(env, [sale]);
  await second.stop();
  await watch.stop();
});

test('a restore a connected replica has not confirmed is not recorded; the listener runs it again once the replica has it', async () => {
  const sale = await newSale(env, { stock: 10, paymentWindowSeconds: 1, maxPerOrder: 2, perUserLimit: 2 });
  const { pid } = await replica('replica-2');
  // The API's look at the masters (every second) may not have seen the replica yet: until then it
  // refuses, reserving nothing.
  const res = await waitFor(
    'a purchase answered 202',
    async () => {
      const r = await http(api.port, 'POST', `/api/sales/${sale.id}/purchases`, { body: { qty: 2 }, user: 'bob' });
      if (r.status === 202) return r;
      assert.match(String(r.body.message), /nothing was reserved/);
      return undefined;
    },
    10_000,
    100,
  );
  assert.equal(await env.redis.get(saleKeys(sale.id).available), '8');
  const writer = new OrderWriter({
    pool: env.pool,
    redis: env.redis,
    replicaAcks: env.replicaAcks,
    logger: env.logger,
    config: { ...env.config, writerId: 'replica-test-2' },
  });
  await waitFor(
    'the order written',
    async () => (await writer.drainOnce()) > 0 || (await orderCount(env, sale.id)) > 0,
  );
  // The replica stalls (paused): the master still counts it online, so this is no degraded mode,
  // and nothing the listener restores can be confirmed until it acknowledges again.
  process.kill(pid, 'SIGSTOP');
  const listener = new ExpiryListener({
    pool: env.pool,
    redis: env.redis,
    replicaAcks: env.replicaAcks,
    logger: env.logger,
    config: env.config,
  });
  await listener.start();
  stops.push(() => listener.stop());
  const order = async () =>
    (
      await env.pool.query<{ status: string; restored: boolean }>(
        'select status, restored_at is not null as restored from orders where id = $1',
        [res.body.orderId],
      )
    ).rows[0];
  await waitFor('the order closed', async () => (await order())?.status === 'expired');
  await new Promise((r) => setTimeout(r, 1000));
  assert.deepEqual(
    await order(),
    { status: 'expired', restored: false },
    'a restore is recorded only once a replica confirms it',
  );
  assert.match(
    await env.redis.info('replication'),
    /connected_slaves:1\b[\s\S]*state=online/,
    'the paused replica still counts as online',
  );
  // Back: the listener's retry records the restore, and the stock is back once.
  process.kill(pid, 'SIGCONT');
  await waitFor('the restore recorded', async () => (await order())?.restored, 20_000, 100);
  assert.equal(await env.redis.get(saleKeys(sale.id).available), '10');
  await assertConserved(env, [sale]);
});
