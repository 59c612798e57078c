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

export interface RedisNode {
  port: number;
  url: string;
  pid: number /** SIGKILL, resolves when exited */;
  kill(): Promise<void> /** SIGTERM, resolves when exited */;
  stop(): Promise<void>;
}

export const WAIT_MS = 20_000;
const children = new WeakMap<RedisNode, ChildProcess>();
const live = (n: RedisNode) => children.get(n)!.exitCode === null && children.get(n)!.signalCode === null;
export const exited = (child: ChildProcess) =>
  new Promise<void>((res) => {
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
  const r = new Redis(port, '127.0.0.1', {
    retryStrategy: () => null,
    maxRetriesPerRequest: 1,
    lazyConnect: true,
    connectTimeout: 1000,
  });
  r.on('error', () => {});
  try {
    await r.connect().catch((err: Error) => {
      throw new Error(`127.0.0.1:${port}: ${err.message}`);
    });
    return (await r.call(String(command[0]), ...command.slice(1))) as T;
  } finally {
    r.disconnect();
  }
}
/**
 * Admin commands over one kept connection per server, for what polls: a poll every 50 ms asks each
 * node several things, and a connection of its own per question was most of what settling cost. A
 * connection that fails is dropped, and the next question opens a new one.
 */
export class AdminConnections {
  private readonly open = new Map<number, Redis>();

  async ask<T = unknown>(port: number, ...command: (string | number)[]): Promise<T> {
    let r = this.open.get(port);
    if (!r) {
      const conn = new Redis(port, '127.0.0.1', {
        retryStrategy: () => null,
        maxRetriesPerRequest: 1,
        connectTimeout: 1000,
        enableOfflineQueue: true,
      });
      conn.on('error', () => {});
      conn.once('end', () => this.open.get(port) === conn && this.open.delete(port));
      this.open.set(port, (r = conn));
    }
    return (await r.call(String(command[0]), ...command.slice(1)).catch((err: Error) => {
      throw new Error(`127.0.0.1:${port}: ${err.message}`);
    })) as T;
  }

  close(): void {
    for (const r of this.open.values()) r.disconnect();
    this.open.clear();
  }
}

export const field = (info: string, name: string) => new RegExp(`^${name}:(.*?)\\r?$`, 'm').exec(info)?.[1];

// freePort's port is free now, not reserved: two asked for at once may be the same one.
const taken = new Set<number>();
export async function unusedPort(): Promise<number> {
  for (;;) {
    const port = await freePort();
    if (!taken.has(port)) {
      taken.add(port);
      return port;
    }
  }
}

export async function startNode(dir: string, args: string[], port?: number): Promise<RedisNode> {
  // A master otherwise waits 5 s for more replicas before it sends one its first sync.
  const server = await startRedis(dir, {
    port: port ?? (await unusedPort()),
    args: ['--repl-diskless-sync-delay', '0', ...args],
  });
  const n: RedisNode = {
    port: server.port,
    url: server.url,
    pid: server.child.pid!,
    kill: async () => {
      server.child.kill('SIGKILL');
      await exited(server.child);
    },
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
  await promisify(execFile)('redis-cli', args, { timeout: 240_000 }).catch(
    (err: { stdout?: string; stderr?: string; message: string }) => {
      const said = `${err.stdout ?? ''}\n${err.stderr ?? ''}`.trim().split('\n').slice(-3).join(' / ');
      throw new Error(`redis-cli ${args.slice(0, 2).join(' ')} failed: ${said || err.message}`);
    },
  );
}

export interface LocalCluster {
  nodes: RedisNode[]; // every node started so far (incl. added ones)
  seeds: string; // the initial masters, "127.0.0.1:p1,...", for REDIS_CLUSTER_NODES
  masters(): Promise<RedisNode[]>; // from CLUSTER NODES of a live node: owning >= 1 slot, not failed
  replicaOf(master: RedisNode): Promise<RedisNode | undefined>;
  /** CLUSTER FAILOVER on a replica of `master`; resolves once it is master and the cluster settled. */
  failover(master: RedisNode): Promise<RedisNode>;
  /** SIGKILL `master`; resolves once a replica of it is promoted and the cluster settled. */
  killMaster(master: RedisNode): Promise<RedisNode>;
  /** A new empty master, met by a node of the cluster (as `redis-cli --cluster add-node` does it), known to every node; with `replica`, a replica of it too. */
  addMaster(opts?: { replica?: boolean }): Promise<RedisNode>;
  /** A new node, joined as a replica of `master`; resolves once it is in sync. */
  addReplica(master: RedisNode): Promise<RedisNode>;
  /**
   * Moves the lowest `slots` slots of `from`, keys and all, with `redis-cli --cluster reshard`, one
   * slot at a time; with `inFlight`, by redis-cli's steps here, that many slots at a time.
   */
  reshard(from: RedisNode, to: RedisNode, slots: number, opts?: { inFlight?: number }): Promise<void>;
  stop(): Promise<void>;
}

/** One line of CLUSTER NODES. */
interface Entry {
  id: string;
  port: number;
  flags: string[];
  master: string;
  connected: boolean;
  slots: number;
}
const failed = (e: Entry) => e.flags.some((f) => f.startsWith('fail'));
const serving = (e: Entry) => e.flags.includes('master') && !failed(e) && e.slots > 0;

async function entries(port: number, admin?: AdminConnections): Promise<Entry[]> {
  return (await (admin ? admin.ask<string>(port, 'CLUSTER', 'NODES') : ask<string>(port, 'CLUSTER', 'NODES')))
    .trim()
    .split('\n')
    .map((line) => {
      const [id, addr, flags, master, , , , link, ...slots] = line.split(' ');
      const ranges = slots.filter((s) => !s.startsWith('[')).map((s) => s.split('-').map(Number)); // [..] is a slot in migration
      return {
        id: id!,
        port: Number(/:(\d+)@/.exec(addr!)![1]),
        flags: flags!.split(','),
        master: master!,
        connected: link === 'connected',
        slots: ranges.reduce((sum, [a, b = a]) => sum + b! - a! + 1, 0),
      };
    });
}

export async function startCluster(
  dir: string,
  opts: { masters: number; replicasPerMaster: number; nodeTimeoutMs?: number; args?: string[] },
): Promise<LocalCluster> {
  const nodes: RedisNode[] = [];
  const buses = new Map<number, number>();
  const admin = new AdminConnections();
  const start = async () => {
    const [port, bus] = [await unusedPort(), await unusedPort()]; // port + 10000, the default bus port, may be taken or past 65535
    const d = resolve(dir, `node-${port}`);
    // Failovers that always happen (validity factor 0: however long the replica was cut off) and
    // replicas that stay with their master, so a test knows which node a fault promotes.
    const n = await startNode(
      d,
      [
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        `${d}/nodes-${port}.conf`,
        '--cluster-port',
        String(bus),
        '--cluster-node-timeout',
        String(opts.nodeTimeoutMs ?? 1000),
        '--cluster-replica-validity-factor',
        '0',
        '--cluster-allow-replica-migration',
        'no',
        ...(opts.args ?? []),
      ],
      port,
    );
    buses.set(port, bus);
    nodes.push(n);
    return n;
  };
  const alive = () => nodes.filter(live);
  const at = (port: number) => nodes.find((n) => n.port === port)!;
  // A node's id is for life (its nodes.conf keeps it): asked once.
  const ids = new Map<number, Promise<string>>();
  const id = (n: RedisNode) => {
    if (!ids.has(n.port))
      ids.set(
        n.port,
        admin.ask<string>(n.port, 'CLUSTER', 'MYID').catch((err: Error) => {
          ids.delete(n.port);
          throw err;
        }),
      );
    return ids.get(n.port)!;
  };
  const view = () => entries(alive()[0]!.port, admin);

  // Settled: every live node says ok, sees every other live node as healthy and connected, agrees
  // on who serves how many slots, and, if a replica, has its link to its master up.
  const settled = async (also?: (view: Entry[]) => string | undefined): Promise<string | undefined> => {
    const nodesNow = alive();
    const liveIds = await Promise.all(nodesNow.map(id));
    // Every node asked at once; judged in order below.
    const answers = await Promise.all(
      nodesNow.map((n) =>
        Promise.all([
          admin.ask<string>(n.port, 'CLUSTER', 'INFO'),
          entries(n.port, admin),
          admin.ask<string>(n.port, 'INFO', 'replication'),
        ]),
      ),
    );
    let agreed: string | undefined;
    for (const [i, n] of nodesNow.entries()) {
      const where = `127.0.0.1:${n.port}`;
      const [clusterInfo, seen, info] = answers[i]!;
      if (field(clusterInfo, 'cluster_state') !== 'ok') return `cluster_state did not become ok on ${where}`;
      const healthy = seen.filter((e) => e.connected && !failed(e) && !e.flags.includes('handshake'));
      if (liveIds.some((x) => !healthy.some((e) => e.id === x)))
        return `${where} did not see every live node as connected`;
      const owners = seen
        .filter(serving)
        .map((e) => `${e.id}:${e.slots}`)
        .sort()
        .join(' ');
      if ((agreed ??= owners) !== owners) return `${where} did not agree with the others on the slot owners`;
      if (field(info, 'role') === 'slave' && field(info, 'master_link_status') !== 'up')
        return `replica ${where} did not get master_link_status:up`;
      const extra = also?.(seen);
      if (extra) return `${where} ${extra}`;
    }
    return undefined;
  };
  // What `redis-cli --cluster add-node` does, without its one-second waits: a node met through
  // `via`, and a replica told its master once it knows that master.
  const meet = (n: RedisNode, via: RedisNode) =>
    admin.ask(via.port, 'CLUSTER', 'MEET', '127.0.0.1', n.port, buses.get(n.port)!);
  const replicate = async (r: RedisNode, master: RedisNode) => {
    const mid = await id(master);
    await waitFor(async () =>
      (await entries(r.port, admin)).some((e) => e.id === mid && !e.flags.includes('handshake'))
        ? undefined
        : `127.0.0.1:${r.port} did not learn of its master 127.0.0.1:${master.port}`,
    );
    await admin.ask(r.port, 'CLUSTER', 'REPLICATE', mid);
  };
  const promoted = async (candidates: string[], old: RedisNode) => {
    const isNew = (e: Entry) => candidates.includes(e.id) && serving(e);
    await waitFor(() =>
      settled((seen) => (seen.some(isNew) ? undefined : `did not see a replica of 127.0.0.1:${old.port} promoted`)),
    );
    return at((await view()).find(isNew)!.port);
  };

  // Each slot moved by redis-cli's steps: IMPORTING on the target, MIGRATING on the source, its
  // keys sent over with MIGRATE 10 at a time, then every master told the new owner, the target
  // first. One slot at a time, a few round trips each, a third of the slots was minutes of waiting
  // on a loaded machine; `inFlight` slots at once, each still step by step, is seconds.
  const moveSlots = async (from: RedisNode, to: RedisNode, slots: number, inFlight: number) => {
    const [fromId, toId] = [await id(from), await id(to)];
    const owned = (await admin.ask<[number, number, [string, number]][]>(from.port, 'CLUSTER', 'SLOTS'))
      .filter(([, , [, port]]) => port === from.port)
      .flatMap(([a, b]) => Array.from({ length: b - a + 1 }, (_, i) => a + i))
      .sort((a, b) => a - b);
    if (owned.length < slots)
      throw new Error(`127.0.0.1:${from.port} owns ${owned.length} slots, fewer than the ${slots} to move`);
    const others = (await cluster.masters()).filter((m) => m.port !== from.port && m.port !== to.port);
    const move = async (slot: number) => {
      await admin.ask(to.port, 'CLUSTER', 'SETSLOT', slot, 'IMPORTING', fromId);
      await admin.ask(from.port, 'CLUSTER', 'SETSLOT', slot, 'MIGRATING', toId);
      for (
        let keys = await admin.ask<string[]>(from.port, 'CLUSTER', 'GETKEYSINSLOT', slot, 10);
        keys.length > 0;
        keys = await admin.ask<string[]>(from.port, 'CLUSTER', 'GETKEYSINSLOT', slot, 10)
      ) {
        await admin.ask(from.port, 'MIGRATE', '127.0.0.1', to.port, '', 0, 60_000, 'KEYS', ...keys);
      }
      for (const n of [to, from, ...others]) await admin.ask(n.port, 'CLUSTER', 'SETSLOT', slot, 'NODE', toId);
    };
    const queue = owned.slice(0, slots);
    await Promise.all(
      Array.from({ length: inFlight }, async () => {
        for (let slot = queue.shift(); slot !== undefined; slot = queue.shift()) await move(slot);
      }),
    );
  };

  const cluster: LocalCluster = {
    nodes,
    seeds: '',
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
      await admin.ask(replica.port, 'CLUSTER', 'FAILOVER');
      return promoted([await id(replica)], master);
    },
    async killMaster(master) {
      const mid = await id(master);
      const replicas = (await entries(master.port, admin)).filter((e) => e.master === mid).map((e) => e.id);
      if (replicas.length === 0) throw new Error(`127.0.0.1:${master.port} has no replica to promote`);
      await master.kill();
      return promoted(replicas, master);
    },
    async addMaster(o = {}) {
      const n = await start();
      await meet(n, alive()[0]!);
      await waitFor(() =>
        settled((seen) => (seen.some((e) => e.port === n.port) ? undefined : `did not see 127.0.0.1:${n.port}`)),
      );
      if (o.replica) await cluster.addReplica(n);
      return n;
    },
    async addReplica(master) {
      const r = await start();
      await meet(r, master);
      await replicate(r, master);
      await waitFor(() =>
        settled((seen) =>
          seen.some((e) => e.port === r.port && e.flags.includes('slave'))
            ? undefined
            : `did not see 127.0.0.1:${r.port} as a replica`,
        ),
      );
      await waitFor(async () =>
        field(await admin.ask<string>(r.port, 'INFO', 'replication'), 'master_link_status') === 'up'
          ? undefined
          : `replica 127.0.0.1:${r.port} did not get master_link_status:up`,
      );
      return r;
    },
    async reshard(from, to, slots, o = {}) {
      const [fromId, toId] = [await id(from), await id(to)];
      const want = (await entries(to.port, admin)).find((e) => e.id === toId)!.slots + slots;
      if (o.inFlight === undefined) {
        await redisCli(
          '--cluster',
          'reshard',
          `127.0.0.1:${from.port}`,
          '--cluster-from',
          fromId,
          '--cluster-to',
          toId,
          '--cluster-slots',
          String(slots),
          '--cluster-yes',
        );
      } else {
        await moveSlots(from, to, slots, o.inFlight);
      }
      await waitFor(() =>
        settled((seen) =>
          seen.find((e) => e.id === toId)?.slots === want
            ? undefined
            : `did not see 127.0.0.1:${to.port} own ${want} slots`,
        ),
      );
    },
    stop: once(async () => {
      admin.close();
      await Promise.all(nodes.map((n) => n.stop()));
    }),
  };
  try {
    await Promise.all(Array.from({ length: opts.masters * (1 + opts.replicasPerMaster) }, start));
    // What `redis-cli --cluster create` does, without its fixed waits: the slots in even ranges
    // (its rounding), a config epoch of its own to each master, every node met at once, then each
    // replica told its master.
    const masters = nodes.slice(0, opts.masters);
    let first = 0;
    for (const [i, m] of masters.entries()) {
      const last =
        i === masters.length - 1 ? 16383 : Math.max(first, Math.round((i + 1) * (16384 / masters.length) - 1));
      await admin.ask(m.port, 'CLUSTER', 'ADDSLOTSRANGE', first, last);
      await admin.ask(m.port, 'CLUSTER', 'SET-CONFIG-EPOCH', i + 1);
      first = last + 1;
    }
    await Promise.all(nodes.slice(1).map((n) => meet(n, nodes[0]!)));
    await Promise.all(nodes.slice(opts.masters).map((r, i) => replicate(r, masters[i % opts.masters]!)));
    const replicas = opts.masters * opts.replicasPerMaster;
    await waitFor(() =>
      settled((seen) =>
        seen.filter((e) => e.flags.includes('slave')).length === replicas
          ? undefined
          : `did not list all ${replicas} replicas`,
      ),
    );
    cluster.seeds = (await cluster.masters()).map((n) => `127.0.0.1:${n.port}`).join(',');
    return cluster;
  } catch (err) {
    await cluster.stop();
    throw err;
  }
}
