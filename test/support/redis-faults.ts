// Real Redis servers held in the states a dying master, a failover or a reshard leaves them in, so a
// test can take the very errors ioredis raises there: a cluster node serving no slot, two cluster
// nodes with one slot half migrated between them, and a master with a replica.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis, type RedisOptions } from 'ioredis';
import { ask, startNode, unusedPort, waitFor, type RedisNode } from '../../tools/redis-cluster.js';

/** Keys of one slot, the one in migration from `a` to `b`. */
export const MIGRATING = { present: '{mig}present', missing: '{mig}missing' } as const;

export interface FaultyRedis {
  /** Cluster-enabled, serving no slot: every key command answers CLUSTERDOWN. */
  bare: RedisNode;
  /** Cluster node serving every slot, MIGRATING's slot marked as migrating to `b`. */
  a: RedisNode;
  /** Cluster node serving none, importing MIGRATING's slot from `a`. */
  b: RedisNode;
  master: RedisNode;
  replica: RedisNode;
  /** A plain client of one of them that gives up at once; closed by stop(). */
  client(node: RedisNode, options?: RedisOptions): Redis;
  stop(): Promise<void>;
}

export async function startFaultyRedis(): Promise<FaultyRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'flashsale-redis-faults-'));
  const clients: Redis[] = [];
  const clusterNode = async (name: string) =>
    startNode(join(dir, name), [
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      join(dir, name, 'nodes.conf'),
      '--cluster-port',
      String(await unusedPort()),
    ]);
  const [bare, a, b, master] = await Promise.all([
    clusterNode('bare'),
    clusterNode('a'),
    clusterNode('b'),
    startNode(join(dir, 'master'), []),
  ]);
  const replica = await startNode(join(dir, 'replica'), ['--replicaof', '127.0.0.1', String(master!.port)]);
  const up = async () =>
    (await ask<string>(replica.port, 'INFO', 'replication')).includes('master_link_status:up')
      ? undefined
      : 'replica not in sync';
  await waitFor(up);
  await ask(a!.port, 'CLUSTER', 'ADDSLOTSRANGE', 0, 16383);
  const [, busA] = await ask<string[]>(a!.port, 'CONFIG', 'GET', 'cluster-port');
  await ask(b!.port, 'CLUSTER', 'MEET', '127.0.0.1', a!.port, busA!);
  const [idA, idB] = await Promise.all([
    ask<string>(a!.port, 'CLUSTER', 'MYID'),
    ask<string>(b!.port, 'CLUSTER', 'MYID'),
  ]);
  await waitFor(async () =>
    (await ask<string>(a!.port, 'CLUSTER', 'NODES')).includes(idB) &&
    (await Promise.all([a!, b!].map(async (n) => ask<string>(n.port, 'CLUSTER', 'INFO')))).every((i) =>
      i.includes('cluster_state:ok'),
    )
      ? undefined
      : 'nodes not met',
  );
  const slot = await ask<number>(a!.port, 'CLUSTER', 'KEYSLOT', MIGRATING.present);
  await ask(a!.port, 'SET', MIGRATING.present, '1');
  await ask(b!.port, 'CLUSTER', 'SETSLOT', slot, 'IMPORTING', idA);
  await ask(a!.port, 'CLUSTER', 'SETSLOT', slot, 'MIGRATING', idB);
  return {
    bare: bare!,
    a: a!,
    b: b!,
    master: master!,
    replica,
    client(node, options: RedisOptions = {}) {
      const c = new Redis({
        port: node.port,
        host: '127.0.0.1',
        retryStrategy: () => null,
        maxRetriesPerRequest: 0,
        ...options,
      });
      c.on('error', () => {});
      clients.push(c);
      return c;
    },
    async stop() {
      for (const c of clients) c.disconnect();
      await Promise.all([bare, a, b, master, replica].map((n) => n!.stop()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
