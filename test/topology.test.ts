// The local Cluster and Sentinel sets themselves (tools/redis-cluster.ts, tools/redis-sentinel.ts):
// each fault returns the node it promised, and a client keeps reading and writing through it.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { Cluster, Redis } from 'ioredis';
import { startCluster, type RedisNode } from '../tools/redis-cluster.js';
import { startSentinels } from '../tools/redis-sentinel.js';
import type { RedisTarget } from '../shared/config/index.js';
import { createRedis } from '../shared/redis/connect.js';

const hostPorts = (list: string) =>
  list.split(',').map((hp) => ({ host: '127.0.0.1', port: Number(hp.split(':')[1]) }));
const ports = (nodes: RedisNode[]) => nodes.map((n) => n.port);

/**
 * Servers `start` makes in a directory of their own, stopped and the directory removed when the test
 * ends, whatever it did (after the test's own finally blocks: its clients go first).
 */
async function servers<S extends { stop(): Promise<void> }>(
  t: TestContext,
  name: string,
  start: (dir: string) => Promise<S>,
): Promise<S> {
  const dir = mkdtempSync(join(tmpdir(), `flashsale-${name}-`));
  let started: S | undefined;
  t.after(async () => {
    await started?.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  started = await start(dir);
  return started;
}
const sentinelSet = (dir: string) => startSentinels(dir, { replicas: 1 });

async function admin<T>(node: RedisNode, fn: (r: Redis) => Promise<T>): Promise<T> {
  const r = new Redis(node.port, '127.0.0.1', { retryStrategy: () => null, maxRetriesPerRequest: 1 });
  r.on('error', () => {});
  try {
    return await fn(r);
  } finally {
    r.disconnect();
  }
}

// Each test starts servers of its own and mostly waits on them (elections, failovers): side by side.
describe('topology', { concurrency: true }, () => {
  test('cluster: failover, a killed master and a reshard each promote what they say, and every key stays readable', async (t) => {
    const cluster = await servers(t, 'cluster', (dir) => startCluster(dir, { masters: 3, replicasPerMaster: 1 }));
    const client = new Cluster(hostPorts(cluster.seeds));
    try {
      // Enough keys that any 100 slots hold some of them (2000 / 16384 per slot), so the reshard moves keys.
      const keys = Array.from({ length: 2000 }, (_, i) => `topology:${i}`);
      await Promise.all(keys.map((k) => client.set(k, k)));
      const readAll = async (c: Cluster, when: string) =>
        assert.deepEqual(await Promise.all(keys.map((k) => c.get(k))), keys, `every key reads back ${when}`);
      await readAll(client, 'on a new cluster');
      const [m1, m2] = await cluster.masters();
      for (const m of await cluster.masters())
        assert.ok((await admin(m, (r) => r.dbsize())) > 0, `master ${m.port} holds keys: they spread over slots`);

      const n1 = await cluster.failover(m1!);
      assert.ok(ports(await cluster.masters()).includes(n1.port) && !ports(await cluster.masters()).includes(m1!.port));
      assert.equal(
        ((await admin(m1!, (r) => r.call('ROLE'))) as string[])[0],
        'slave',
        'the old master follows the new one',
      );
      await readAll(client, 'after a failover');

      const n2 = await cluster.killMaster(m2!);
      assert.ok(ports(await cluster.masters()).includes(n2.port) && !ports(await cluster.masters()).includes(m2!.port));
      await readAll(client, 'after a master was killed');

      const added = await cluster.addMaster();
      assert.equal(cluster.nodes.at(-1), added);
      await cluster.reshard(n1, added, 100);
      const own = ((await admin(added, (r) => r.call('CLUSTER', 'NODES'))) as string)
        .split('\n')
        .find((l) => l.includes('myself'))!;
      const slots = own
        .split(' ')
        .slice(8)
        .flatMap((range) => {
          const [a, b = a] = range.split('-').map(Number);
          return Array.from({ length: b! - a! + 1 }, (_, i) => a! + i);
        });
      assert.equal(slots.length, 100, 'the new master owns the 100 slots');
      const counts = await admin(added, (r) => Promise.all(slots.map((s) => r.cluster('COUNTKEYSINSLOT', s))));
      const moved = counts.reduce((a, b) => a + b, 0);
      assert.ok(moved > 0, 'keys moved with their slots');
      assert.equal(await admin(added, (r) => r.dbsize()), moved);
      assert.ok(ports(await cluster.masters()).includes(added.port));
      await readAll(client, 'after a reshard, through the client that saw it all');
      const fresh = new Cluster(hostPorts(cluster.seeds));
      try {
        await readAll(fresh, 'after a reshard, through a new client');
      } finally {
        fresh.disconnect();
      }
    } finally {
      client.disconnect();
    }
  });

  test('sentinel: a failover names a new master, and the sentinel client writes to it', async (t) => {
    const set = await servers(t, 'sentinel', sentinelSet);
    // As shared/redis/connect.ts connects: moved by +switch-master, and a READONLY reply reconnects and resends.
    const client = new Redis({
      sentinels: hostPorts(set.sentinels),
      name: set.name,
      failoverDetector: true,
      reconnectOnError: (err) => (err.message.startsWith('READONLY') ? 2 : false),
    });
    client.on('error', () => {});
    const serverPort = async () => Number(/laddr=[^ ]*:(\d+)/.exec((await client.client('INFO')) as string)![1]);
    try {
      const old = await set.master();
      assert.equal(old, set.nodes[0]);
      await client.set('topology', 'before');
      assert.equal(await serverPort(), old.port);

      const now = await set.failover();
      assert.notEqual(now.port, old.port);
      assert.equal(await set.master(), now);
      await client.set('topology', 'after');
      assert.equal(await serverPort(), now.port, 'the client writes to the new master');
      assert.equal(((await admin(now, (r) => r.call('ROLE'))) as string[])[0], 'master');
      assert.equal(((await admin(old, (r) => r.call('ROLE'))) as string[])[0], 'slave');
      assert.equal(await admin(now, (r) => r.get('topology')), 'after');
    } finally {
      client.disconnect();
    }
  });

  test('sentinel: a client disconnected while it asks the sentinels for the master connects again (ioredis alone ends it for good)', async (t) => {
    const set = await servers(t, 'sentinel', sentinelSet);
    const sentinels = hostPorts(set.sentinels);
    const target: RedisTarget = { kind: 'sentinel', sentinels, name: set.name, auth: { tls: false } };
    // What a failover detector's +switch-master does to a client still resolving the master.
    const cut = async (client: Redis) => {
      client.on('error', () => {});
      const connecting = client.connect().catch(() => {});
      assert.equal(client.status, 'connecting');
      client.disconnect(true);
      await connecting;
    };
    const bare = new Redis({ sentinels, name: set.name, lazyConnect: true, failoverDetector: true });
    const ours = createRedis(target, { lazyConnect: true }) as Redis;
    try {
      await cut(bare);
      await cut(ours);
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal(
        bare.status,
        'end',
        'ioredis leaves the client ended: if this fails, ioredis reconnects by itself now and reviveOnEnd (shared/redis/sentinel.ts) can go',
      );
      assert.equal(ours.status, 'ready');
      assert.equal(await ours.set('revived', '1'), 'OK');
      assert.equal(await admin(await set.master(), (r) => r.get('revived')), '1', 'it writes to the master');
    } finally {
      bare.disconnect();
      ours.disconnect();
    }
  });
});
