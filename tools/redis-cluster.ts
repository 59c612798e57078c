// A local Redis Cluster for tests and benchmarks, on 127.0.0.1, and the node helpers the Sentinel
// set (redis-sentinel.ts) shares. Every server is a startRedis child, so it runs with the product's
// settings. A fault returns only once every live node agrees again, so the caller asserts what its
// client sees, not what the servers have yet to settle.
import { execFile, type ChildProcess } from 'node:child_process';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { delay } from '../shared/runtime/daemon.js';
import { freePort, startRedis } from './local-stack.js';

export interface RedisNode { port: number; url: string; pid: number; /** SIGKILL, resolves when exited */ kill(): Promise<void>; /** SIGTERM, resolves when exited */ stop(): Promise<void> }

export const WAIT_MS = 20_000;
const children = new WeakMap<RedisNode, ChildProcess>();
const live = (n: RedisNode) => children.get(n)!.exitCode === null && children.get(n)!.signalCode === null;
export const exited = (child: ChildProcess) => new Promise<void>((res) => {
  if (child.exitCode !== null || child.signalCode !== null) res();
  else child.once('exit', () => res());
});

/** Polls until `check` names nothing missing (a throw counts as not yet), else throws what it named last. */
export async function waitFor(check: () => Promise<string | undefined>, ms = WAIT_MS): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    const missing = await check().catch((err: Error) => `no answer (${err.message})`);
    if (missing === undefined) return;
    if (Date.now() > deadline) throw new Error(`${missing} within ${ms / 1000} s`);
    await delay(50);
  }
}

/** One admin command on one server, on a connection of its own that gives up at once. */
export async function ask<T = unknown>(port: number, ...command: (string | number)[]): Promise<T> {
  const r = new Redis(port, '127.0.0.1', { retryStrategy: () => null, maxRetriesPerRequest: 1, lazyConnect: true, connectTimeout: 1000 });
  r.on('error', () => {});
  try {
    await r.connect().catch((err: Error) => { throw new Error(`127.0.0.1:${port}: ${err.message}`); });
    return (await r.call(String(command[0]), ...command.slice(1))) as T;
  } finally {
    r.disconnect();
  }
}
export const field = (info: string, name: string) => new RegExp(`^${name}:(.*?)\\r?$`, 'm').exec(info)?.[1];

// freePort's port is free now, not reserved: two asked for at once may be the same one.
const taken = new Set<number>();
export async function unusedPort(): Promise<number> {
  for (;;) {
    const port = await freePort();
    if (!taken.has(port)) { taken.add(port); return port; }
  }
}

export async function startNode(dir: string, args: string[], port?: number): Promise<RedisNode> {
  // A master otherwise waits 5 s for more replicas before it sends one its first sync.
  const server = await startRedis(dir, { port: port ?? await unusedPort(), args: ['--repl-diskless-sync-delay', '0', ...args] });
  const n: RedisNode = {
    port: server.port, url: server.url, pid: server.child.pid!,
    kill: async () => { server.child.kill('SIGKILL'); await exited(server.child); },
    stop: server.stop,
  };
  children.set(n, server.child);
  return n;
}

export function once(fn: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  return () => (running ??= fn());
}

// A reshard of a third of the slots under purchases ran past a minute on a loaded 2-core machine;
// the limit is there to end a hung redis-cli, not to time it.
async function redisCli(...args: string[]): Promise<void> {
  await promisify(execFile)('redis-cli', args, { timeout: 240_000 }).catch((err: { stdout?: string; stderr?: string; message: string }) => {
    const said = `${err.stdout ?? ''}\n${err.stderr ?? ''}`.trim().split('\n').slice(-3).join(' / ');
    throw new Error(`redis-cli ${args.slice(0, 2).join(' ')} failed: ${said || err.message}`);
  });
}

export interface LocalCluster {
  nodes: RedisNode[];                 // every node started so far (incl. added ones)
  seeds: string;                      // the initial masters, "127.0.0.1:p1,...", for REDIS_CLUSTER_NODES
  masters(): Promise<RedisNode[]>;    // from CLUSTER NODES of a live node: owning >= 1 slot, not failed
  replicaOf(master: RedisNode): Promise<RedisNode | undefined>;
  /** CLUSTER FAILOVER on a replica of `master`; resolves once it is master and the cluster settled. */
  failover(master: RedisNode): Promise<RedisNode>;
  /** SIGKILL `master`; resolves once a replica of it is promoted and the cluster settled. */
  killMaster(master: RedisNode): Promise<RedisNode>;
  /** A new empty master, joined with `redis-cli --cluster add-node`, known to every node; with `replica`, a replica of it too. */
  addMaster(opts?: { replica?: boolean }): Promise<RedisNode>;
  /** A new node, joined as a replica of `master`; resolves once it is in sync. */
  addReplica(master: RedisNode): Promise<RedisNode>;
  /** Moves `slots` slots, keys and all, with `redis-cli --cluster reshard`. */
  reshard(from: RedisNode, to: RedisNode, slots: number): Promise<void>;
  stop(): Promise<void>;
}

/** One line of CLUSTER NODES. */
interface Entry { id: string; port: number; flags: string[]; master: string; connected: boolean; slots: number }
const failed = (e: Entry) => e.flags.some((f) => f.startsWith('fail'));
const serving = (e: Entry) => e.flags.includes('master') && !failed(e) && e.slots > 0;

async function entries(port: number): Promise<Entry[]> {
  return (await ask<string>(port, 'CLUSTER', 'NODES')).trim().split('\n').map((line) => {
    const [id, addr, flags, master, , , , link, ...slots] = line.split(' ');
    const ranges = slots.filter((s) => !s.startsWith('[')).map((s) => s.split('-').map(Number)); // [..] is a slot in migration
    return {
      id: id!, port: Number(/:(\d+)@/.exec(addr!)![1]), flags: flags!.split(','), master: master!, connected: link === 'connected',
      slots: ranges.reduce((sum, [a, b = a]) => sum + b! - a! + 1, 0),
    };
  });
}

export async function startCluster(dir: string, opts: { masters: number; replicasPerMaster: number; nodeTimeoutMs?: number; args?: string[] }): Promise<LocalCluster> {
  const nodes: RedisNode[] = [];
  const start = async () => {
    const [port, bus] = [await unusedPort(), await unusedPort()]; // port + 10000, the default bus port, may be taken or past 65535
    const d = resolve(dir, `node-${port}`);
    // Failovers that always happen (validity factor 0: however long the replica was cut off) and
    // replicas that stay with their master, so a test knows which node a fault promotes.
    const n = await startNode(d, ['--cluster-enabled', 'yes', '--cluster-config-file', `${d}/nodes-${port}.conf`, '--cluster-port', String(bus),
      '--cluster-node-timeout', String(opts.nodeTimeoutMs ?? 1000), '--cluster-replica-validity-factor', '0',
      '--cluster-allow-replica-migration', 'no', ...(opts.args ?? [])], port);
    nodes.push(n);
    return n;
  };
  const alive = () => nodes.filter(live);
  const at = (port: number) => nodes.find((n) => n.port === port)!;
  const id = (n: RedisNode) => ask<string>(n.port, 'CLUSTER', 'MYID');
  const view = () => entries(alive()[0]!.port);

  // Settled: every live node says ok, sees every other live node as healthy and connected, agrees
  // on who serves how many slots, and, if a replica, has its link to its master up.
  const settled = async (also?: (view: Entry[]) => string | undefined): Promise<string | undefined> => {
    const ids = await Promise.all(alive().map(id));
    let agreed: string | undefined;
    for (const n of alive()) {
      const where = `127.0.0.1:${n.port}`;
      if (field(await ask<string>(n.port, 'CLUSTER', 'INFO'), 'cluster_state') !== 'ok') return `cluster_state did not become ok on ${where}`;
      const seen = await entries(n.port);
      const healthy = seen.filter((e) => e.connected && !failed(e) && !e.flags.includes('handshake'));
      if (ids.some((i) => !healthy.some((e) => e.id === i))) return `${where} did not see every live node as connected`;
      const owners = seen.filter(serving).map((e) => `${e.id}:${e.slots}`).sort().join(' ');
      if ((agreed ??= owners) !== owners) return `${where} did not agree with the others on the slot owners`;
      const info = await ask<string>(n.port, 'INFO', 'replication');
      if (field(info, 'role') === 'slave' && field(info, 'master_link_status') !== 'up') return `replica ${where} did not get master_link_status:up`;
      const extra = also?.(seen);
      if (extra) return `${where} ${extra}`;
    }
    return undefined;
  };
  const promoted = async (candidates: string[], old: RedisNode) => {
    const isNew = (e: Entry) => candidates.includes(e.id) && serving(e);
    await waitFor(() => settled((seen) => (seen.some(isNew) ? undefined : `did not see a replica of 127.0.0.1:${old.port} promoted`)));
    return at((await view()).find(isNew)!.port);
  };

  const cluster: LocalCluster = {
    nodes, seeds: '',
    masters: async () => (await view()).filter(serving).map((e) => at(e.port)),
    async replicaOf(master) {
      const seen = await view();
      const mid = seen.find((e) => e.port === master.port)?.id;
      const e = seen.find((r) => r.master === mid && r.flags.includes('slave') && !failed(r) && live(at(r.port)));
      return e && at(e.port);
    },
    async failover(master) {
      const replica = await cluster.replicaOf(master);
      if (!replica) throw new Error(`127.0.0.1:${master.port} has no live replica to fail over to`);
      await ask(replica.port, 'CLUSTER', 'FAILOVER');
      return promoted([await id(replica)], master);
    },
    async killMaster(master) {
      const mid = await id(master);
      const replicas = (await entries(master.port)).filter((e) => e.master === mid).map((e) => e.id);
      if (replicas.length === 0) throw new Error(`127.0.0.1:${master.port} has no replica to promote`);
      await master.kill();
      return promoted(replicas, master);
    },
    async addMaster(o = {}) {
      const n = await start();
      await redisCli('--cluster', 'add-node', `127.0.0.1:${n.port}`, `127.0.0.1:${alive()[0]!.port}`);
      await waitFor(() => settled());
      if (o.replica) await cluster.addReplica(n);
      return n;
    },
    async addReplica(master) {
      const r = await start();
      await redisCli('--cluster', 'add-node', `127.0.0.1:${r.port}`, `127.0.0.1:${master.port}`, '--cluster-slave', '--cluster-master-id', await id(master));
      await waitFor(() => settled((seen) => (seen.some((e) => e.port === r.port && e.flags.includes('slave')) ? undefined : `did not see 127.0.0.1:${r.port} as a replica`)));
      await waitFor(async () => (field(await ask<string>(r.port, 'INFO', 'replication'), 'master_link_status') === 'up' ? undefined : `replica 127.0.0.1:${r.port} did not get master_link_status:up`));
      return r;
    },
    async reshard(from, to, slots) {
      const [fromId, toId] = [await id(from), await id(to)];
      const want = (await entries(to.port)).find((e) => e.id === toId)!.slots + slots;
      await redisCli('--cluster', 'reshard', `127.0.0.1:${from.port}`, '--cluster-from', fromId, '--cluster-to', toId,
        '--cluster-slots', String(slots), '--cluster-yes');
      await waitFor(() => settled((seen) => (seen.find((e) => e.id === toId)?.slots === want ? undefined : `did not see 127.0.0.1:${to.port} own ${want} slots`)));
    },
    stop: once(async () => { await Promise.all(nodes.map((n) => n.stop())); }),
  };
  try {
    await Promise.all(Array.from({ length: opts.masters * (1 + opts.replicasPerMaster) }, start));
    await redisCli('--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', String(opts.replicasPerMaster), '--cluster-yes');
    const replicas = opts.masters * opts.replicasPerMaster;
    await waitFor(() => settled((seen) => (seen.filter((e) => e.flags.includes('slave')).length === replicas ? undefined : `did not list all ${replicas} replicas`)));
    cluster.seeds = (await cluster.masters()).map((n) => `127.0.0.1:${n.port}`).join(',');
    return cluster;
  } catch (err) {
    await cluster.stop();
    throw err;
  }
}
