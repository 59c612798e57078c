// A local Sentinel set for tests and benchmarks, on 127.0.0.1: a master, its replicas (startRedis
// children, with the product's settings) and the sentinels that watch them. A fault returns only
// once every sentinel names the new master, so the caller asserts what its client sees.
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import {
  AdminConnections,
  ask,
  exited,
  field,
  once,
  startNode,
  unusedPort,
  waitFor,
  WAIT_MS,
  type RedisNode,
} from './redis-cluster.js';

export type { RedisNode };

export interface LocalSentinels {
  name: string; // the monitored master's name
  sentinels: string; // "127.0.0.1:s1,...", for REDIS_SENTINELS
  nodes: RedisNode[]; // master first, then replicas
  /** The master the sentinels name now, agreed by every sentinel. */
  master(): Promise<RedisNode>;
  /** SENTINEL FAILOVER; resolves once every sentinel names a new master, its ROLE is master and the old one's is slave. */
  failover(): Promise<RedisNode>;
  /** SIGKILL the current master; resolves once the sentinels promoted another. */
  killMaster(): Promise<RedisNode>;
  /** A new node, replica of the current master; resolves once it is in sync (the sentinels learn of it from the master's INFO). */
  addReplica(): Promise<RedisNode>;
  stop(): Promise<void>;
}

const SENTINEL_MISSING = 'redis-sentinel is not installed: install it with `sudo apt-get install -y redis-sentinel`';
type Sentinel = { port: number; stop(): Promise<void> };

async function startSentinel(
  dir: string,
  name: string,
  master: number,
  quorum: number,
  downAfterMs: number,
  failoverTimeoutMs: number,
): Promise<Sentinel> {
  const port = await unusedPort();
  mkdirSync(dir, { recursive: true });
  const conf = resolve(dir, 'sentinel.conf');
  // Sentinel rewrites this file as it learns; its log stays beside it for a failed test to read.
  writeFileSync(
    conf,
    [
      `port ${port}`,
      'bind 127.0.0.1',
      'daemonize no',
      `dir ${resolve(dir)}`,
      'logfile sentinel.log',
      'sentinel resolve-hostnames no',
      `sentinel monitor ${name} 127.0.0.1 ${master} ${quorum}`,
      `sentinel down-after-milliseconds ${name} ${downAfterMs}`,
      `sentinel failover-timeout ${name} ${failoverTimeoutMs}`,
      '',
    ].join('\n'),
  );
  const child = spawn('redis-sentinel', [conf], { stdio: 'ignore' });
  let gone: Error | undefined;
  child.once(
    'error',
    (err: NodeJS.ErrnoException) => (gone ??= err.code === 'ENOENT' ? new Error(SENTINEL_MISSING) : err),
  );
  child.once(
    'exit',
    (code) => (gone ??= new Error(`redis-sentinel exited with code ${code} on start: see ${dir}/sentinel.log`)),
  );
  // Like startRedis: never leave an orphan behind when this process goes, however it goes.
  const killChild = () => child.kill('SIGTERM');
  process.once('exit', killChild);
  child.once('exit', () => process.off('exit', killChild));
  const stop = async () => {
    child.kill('SIGTERM');
    await exited(child);
  };
  await waitFor(async () => {
    if (!gone) await ask(port, 'PING');
    return undefined;
  }).catch(async (err) => {
    await stop();
    throw err;
  });
  if (gone) throw gone;
  return { port, stop };
}

/**
 * `failoverTimeoutMs` (sentinel's failover-timeout, 10 s by default) also sets how long the sentinels
 * wait before they demote an old master that came back and before they fail the same master over
 * again (twice it): a test that makes several faults in a row waits these out.
 */
export async function startSentinels(
  dir: string,
  opts: { replicas: number; sentinels?: number; downAfterMs?: number; failoverTimeoutMs?: number; args?: string[] },
): Promise<LocalSentinels> {
  const name = 'flashsale';
  const count = opts.sentinels ?? 3;
  const nodes: RedisNode[] = [];
  const sentinels: Sentinel[] = [];
  const failoverTimeoutMs = opts.failoverTimeoutMs ?? 10_000;
  const admin = new AdminConnections();
  const at = (port: number) => nodes.find((n) => n.port === port)!;
  const role = async (n: RedisNode) => (await admin.ask<string[]>(n.port, 'ROLE'))[0];
  const pairs = (list: string[]): Record<string, string | undefined> =>
    Object.fromEntries(list.flatMap((v, i) => (i % 2 ? [] : [[v, list[i + 1]]])));

  const named = async (): Promise<{ port?: number; missing?: string }> => {
    const ports = await Promise.all(
      sentinels.map(async (s) =>
        Number((await admin.ask<string[]>(s.port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name))[1]),
      ),
    );
    return new Set(ports).size === 1
      ? { port: ports[0] }
      : { missing: `the sentinels did not agree on the master (${ports.join(', ')})` };
  };
  // Without a replica that every sentinel has seen in sync, SENTINEL FAILOVER answers NOGOODSLAVE;
  // a sentinel that does not know the others cannot reach a quorum when the master dies.
  const ready = (replicas: number) => async () => {
    const { port, missing } = await named();
    if (missing) return missing;
    for (const s of sentinels) {
      const where = `sentinel 127.0.0.1:${s.port}`;
      const m = pairs(await admin.ask<string[]>(s.port, 'SENTINEL', 'MASTER', name));
      if (m.flags !== 'master') return `${where} did not see the master 127.0.0.1:${port} as healthy (${m.flags})`;
      if (Number(m['num-other-sentinels']) !== count - 1)
        return `${where} did not learn of the other ${count - 1} sentinels`;
      const good = (await admin.ask<string[][]>(s.port, 'SENTINEL', 'REPLICAS', name))
        .map(pairs)
        .filter((r) => r.flags === 'slave' && r['master-link-status'] === 'ok');
      if (good.length < replicas) return `${where} did not see ${replicas} replica(s) with master-link-status ok`;
    }
    return undefined;
  };
  const inSync = (r: RedisNode) =>
    waitFor(async () =>
      field(await admin.ask<string>(r.port, 'INFO', 'replication'), 'master_link_status') === 'up'
        ? undefined
        : `replica 127.0.0.1:${r.port} did not get master_link_status:up`,
    );
  const replaced = async (old: RedisNode, ms = WAIT_MS): Promise<RedisNode> => {
    let now: RedisNode | undefined;
    await waitFor(async () => {
      const { port, missing } = await named();
      if (missing || port === old.port)
        return missing ?? `the sentinels did not name a new master in place of 127.0.0.1:${old.port}`;
      now = at(port!);
      return (await role(now)) === 'master' ? undefined : `127.0.0.1:${port} did not take the role master`;
    }, ms);
    return now!;
  };

  const set: LocalSentinels = {
    name,
    nodes,
    sentinels: '',
    async master() {
      let port: number | undefined;
      await waitFor(async () => ({ port } = await named()).missing, 5000);
      return at(port!);
    },
    // Both faults first wait for a replica the sentinels can promote: after a failover they learn
    // that the old master is a replica in sync only from its INFO, which they ask for every 10 s.
    async failover() {
      await waitFor(ready(1));
      const old = await set.master();
      await admin.ask(sentinels[0]!.port, 'SENTINEL', 'FAILOVER', name);
      const now = await replaced(old);
      // The sentinels demote the old master failover-timeout after the switch, at their next INFO
      // of it (they wait to see whether another sentinel knows better); until then it still takes
      // writes from clients that stayed on it.
      await waitFor(
        async () =>
          (await role(old)) === 'slave'
            ? undefined
            : `the old master 127.0.0.1:${old.port} did not take the role slave`,
        WAIT_MS + failoverTimeoutMs,
      );
      return now;
    },
    async killMaster() {
      await waitFor(ready(1));
      const old = await set.master();
      await old.kill();
      // A sentinel fails a master over again only 2 x failover-timeout after the last failover of
      // it, which a kill right after a failover (the next scenario) has to wait out.
      return replaced(old, WAIT_MS + 2 * failoverTimeoutMs);
    },
    async addReplica() {
      const master = await set.master();
      const r = await startNode(resolve(dir, `replica-${nodes.length}`), [
        '--replicaof',
        '127.0.0.1',
        String(master.port),
        ...(opts.args ?? []),
      ]);
      nodes.push(r);
      await inSync(r);
      return r;
    },
    // The sentinels go first, so they do not fail over a set that is being taken down.
    stop: once(async () => {
      admin.close();
      await Promise.all(sentinels.map((s) => s.stop()));
      await Promise.all(nodes.map((n) => n.stop()));
    }),
  };
  try {
    const master = await startNode(resolve(dir, 'master'), opts.args ?? []);
    nodes.push(master);
    nodes.push(
      ...(await Promise.all(
        Array.from({ length: opts.replicas }, (_, i) =>
          startNode(resolve(dir, `replica-${i + 1}`), [
            '--replicaof',
            '127.0.0.1',
            String(master.port),
            ...(opts.args ?? []),
          ]),
        ),
      )),
    );
    for (const r of nodes.slice(1)) await inSync(r);
    const quorum = Math.floor(count / 2) + 1;
    const started = await Promise.allSettled(
      Array.from({ length: count }, (_, i) =>
        startSentinel(
          resolve(dir, `sentinel-${i + 1}`),
          name,
          master.port,
          quorum,
          opts.downAfterMs ?? 1000,
          failoverTimeoutMs,
        ),
      ),
    );
    sentinels.push(...started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : [])));
    const refused = started.find((s) => s.status === 'rejected');
    if (refused) throw refused.reason;
    set.sentinels = sentinels.map((s) => `127.0.0.1:${s.port}`).join(',');
    await waitFor(ready(opts.replicas));
    return set;
  } catch (err) {
    await set.stop();
    throw err;
  }
}
