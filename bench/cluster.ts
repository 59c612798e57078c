// Comparison 6: the product on replicated and clustered Redis, all on loopback. What
// REDIS_MIN_REPLICAS_ACK=1 costs a purchase (a master and one replica, the same servers for both
// settings, rounds alternated); what 3 masters give over 1 when 30 sales sell at once; how late
// orders close on a 3-master cluster. Two cores run every server, the load generator and the
// product, so only ratios of the same run hold.
import { randomUUID } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import type { Cluster } from 'ioredis';
import { loadConfig } from '../shared/config/index.js';
import type { Pool } from '../shared/runtime/db.js';
import { saleKeys } from '../shared/redis/keys.js';
import { ExpiryListener } from '../shared/pipeline/listener.js';
import { createRedis, masterNodes, type RedisClient } from '../shared/redis/connect.js';
import { acknowledgeBatch } from '../shared/pipeline/writer-scripts.js';
import { createSale, parseSaleInput } from '../shared/sales/sale.js';
import { startRedis } from '../tools/local-stack.js';
import { ask, field, startCluster, startNode, unusedPort, waitFor, type RedisNode } from '../tools/redis-cluster.js';
import {
  BENCH_PRICE,
  Cleanup,
  cli,
  freePort,
  freshDatabase,
  progress,
  sleep,
  spawnNode,
  type BenchPostgres,
} from './harness.js';
import { runLoad, type LoadResult } from './load.js';
import { PRODUCT_ENV } from './stacks.js';
import type { Watched } from './procstat.js';
import { lateness, redisCounters, summarize, type OrderTiming, type RedisCounters, type Summary } from './stats.js';

export interface ClusterSettings {
  buyers: number;
  warmupBuyers: number;
  connections: number;
  rounds: number;
  sales: number;
  expiry: { orders: number; windowS: number; leadS: number; graceS: number };
}
/** One setting's median round (by purchases/s), with every round's figures beside it. */
export interface Measured {
  load: LoadResult;
  rounds: number[];
  p99Rounds: number[];
  correct: boolean;
}
export interface WaitRow extends Measured {
  ack: number;
  waitCalls: number;
  purchases: number;
}
export interface MastersRow extends Measured {
  masters: number;
  /** Redis CPU seconds (INFO cpu, user + sys) per 10,000 purchases, each master, from the crowd's start until the writer drained it. */
  cpuSPer10k: number[];
}
export interface ClusterExpiry {
  masters: number;
  sales: number;
  summary: Summary;
  ordersPerMaster: number[];
  expiredPerMaster: number[];
  catchUps: number;
}
export interface ClusterResults {
  settings: ClusterSettings;
  cores: number;
  pinning: string;
  wait: WaitRow[];
  masters: MastersRow[];
  expiry: ClusterExpiry;
}

/** The product as bench/stacks.ts runs it (PRODUCT_ENV): API, writer and listener processes. */
async function startProduct(
  env: Record<string, string>,
  cleanup: Cleanup,
): Promise<{ port: number; watch: Watched[] }> {
  const port = await freePort();
  const e = { PORT: String(port), ...PRODUCT_ENV, ...env };
  const watch: Watched[] = [];
  for (const [name, command] of [
    ['server', 'api'],
    ['writer', 'order-writer'],
    ['listener', 'expiry-listener'],
  ] as const) {
    watch.push({ name, pid: (await spawnNode(command, cli(command), e, cleanup)).pid });
  }
  return { port, watch };
}

/** Until every sale's winners are rows in Postgres (the writer drained them). */
async function drained(redis: RedisClient, saleIds: string[]): Promise<void> {
  const end = Date.now() + 180_000;
  for (;;) {
    const left = await Promise.all(
      saleIds.map(async (id) => (await redis.llen(saleKeys(id).winners)) + (await redis.hlen(saleKeys(id).queued))),
    );
    if (left.every((v) => v === 0)) return;
    if (Date.now() > end) throw new Error(`the order writer did not drain ${saleIds.length} sale(s) within 180 s`);
    await sleep(50);
  }
}

/**
 * Every answer was a 202, and every unit reserved in Redis is one order in Postgres, one per buyer.
 * wrk sends a few requests past the last counted buyer, so each sale has `connections` units to
 * spare: they win too, and no counted buyer meets a sold-out sale.
 */
async function allWon(
  pool: Pool,
  redis: RedisClient,
  stocks: Map<string, number>,
  buyers: number,
  load: LoadResult,
): Promise<boolean> {
  const ids = [...stocks.keys()];
  const res = await pool.query<{ orders: number; max: number }>(
    `select count(*)::int as orders, coalesce(max(n), 0)::int as max from
     (select user_id, count(*) as n from orders where sale_id = any($1) group by user_id) t`,
    [ids],
  );
  const left = await Promise.all(ids.map(async (id) => Number(await redis.get(saleKeys(id).available))));
  const reserved = ids.reduce((n, id, i) => n + stocks.get(id)! - left[i]!, 0);
  const { orders, max } = res.rows[0]!;
  return (
    Object.keys(load.statuses).every((s) => s === '202') &&
    (load.statuses['202'] ?? 0) >= buyers &&
    orders === reserved &&
    max === 1
  );
}

function median(runs: { load: LoadResult; correct: boolean }[]): Measured {
  const sorted = [...runs].sort((a, b) => a.load.rps - b.load.rps);
  const mid = sorted[Math.floor((sorted.length - 1) / 2)]!;
  return {
    load: mid.load,
    rounds: runs.map((r) => r.load.rps),
    p99Rounds: runs.map((r) => r.load.latencyMs.p99),
    correct: runs.every((r) => r.correct),
  };
}

const waitCalls = async (port: number) =>
  Number(/calls=(\d+)/.exec(field(await ask<string>(port, 'INFO', 'commandstats'), 'cmdstat_wait') ?? '')?.[1] ?? 0);
const cpuSeconds = async (port: number) => {
  const info = await ask<string>(port, 'INFO', 'cpu');
  return Number(field(info, 'used_cpu_sys') ?? 0) + Number(field(info, 'used_cpu_user') ?? 0);
};

/** 1. One master, one replica: the same crowd with REDIS_MIN_REPLICAS_ACK 0 and 1, alternating which goes first. */
async function measureWait(pg: BenchPostgres, s: ClusterSettings): Promise<WaitRow[]> {
  const cleanup = new Cleanup();
  try {
    const dir = mkdtempSync(join(tmpdir(), 'flashsale-bench-repl-'));
    cleanup.add(() => rmSync(dir, { recursive: true, force: true }));
    // A master otherwise waits 5 s for more replicas before the first sync.
    const master = await startRedis(join(dir, 'master'), { args: ['--repl-diskless-sync-delay', '0'] });
    cleanup.add(() => master.stop());
    const replica = await startRedis(join(dir, 'replica'), { args: ['--replicaof', '127.0.0.1', String(master.port)] });
    cleanup.add(() => replica.stop());
    await waitFor(async () =>
      field(await ask<string>(replica.port, 'INFO', 'replication'), 'master_link_status') === 'up'
        ? undefined
        : 'the replica did not sync',
    );
    const redis = createRedis(master.url);
    cleanup.add(() => redis.quit());
    const servers: Watched[] = [
      { name: 'redis', pid: master.child.pid! },
      { name: 'replica', pid: replica.child.pid! },
      { name: 'postgres', pid: pg.pid, tree: true },
    ];
    const runs = new Map<number, WaitRow[]>([
      [0, []],
      [1, []],
    ]);
    for (let round = 1; round <= s.rounds; round++) {
      for (const ack of round % 2 === 1 ? [0, 1] : [1, 0]) {
        progress(
          `cluster: WAIT round ${round}/${s.rounds}, REDIS_MIN_REPLICAS_ACK=${ack}, ${s.buyers} buyers, concurrency ${s.connections}`,
        );
        const run = new Cleanup();
        try {
          await redis.flushall();
          const db = await freshDatabase(pg.url, `bench_wait_${ack}`);
          run.add(() => db.pool.end());
          const stack = await startProduct(
            { DATABASE_URL: db.url, REDIS_URL: master.url, REDIS_MIN_REPLICAS_ACK: String(ack) },
            run,
          );
          const url = (id: string) => `http://127.0.0.1:${stack.port}/api/sales/${id}/purchases`;
          const stocks = new Map([
            ['warmup', s.warmupBuyers + s.connections],
            ['sale', s.buyers + s.connections],
          ]);
          for (const [id, stock] of stocks)
            await createSale(
              db.pool,
              redis,
              parseSaleInput({ id, name: id, stock, ...BENCH_PRICE, paymentWindowSeconds: 3600 }),
            );
          await runLoad(url('warmup'), {
            buyers: s.warmupBuyers,
            connections: s.connections,
            prefix: 'warm-',
            watch: [],
          });
          await drained(redis, ['warmup']);
          const before = await waitCalls(master.port);
          const load = await runLoad(url('sale'), {
            buyers: s.buyers,
            connections: s.connections,
            prefix: 'buyer-',
            watch: [...stack.watch, ...servers],
          });
          const waits = (await waitCalls(master.port)) - before;
          await drained(redis, ['sale']);
          const correct = await allWon(db.pool, redis, stocks, s.buyers, load);
          const purchases = load.statuses['202'] ?? 0;
          progress(
            `  ${load.rps} purchases/s, p99 ${load.latencyMs.p99} ms, ${waits} WAIT calls for ${purchases} purchases, correct ${correct}`,
          );
          runs.get(ack)!.push({ ack, waitCalls: waits, purchases, ...median([{ load, correct }]) });
        } finally {
          await run.run();
        }
      }
    }
    return [0, 1].map((ack) => {
      const all = runs.get(ack)!;
      const m = median(all);
      const mid = all.find((r) => r.load === m.load)!;
      return { ...m, ack, waitCalls: mid.waitCalls, purchases: mid.purchases };
    });
  } finally {
    await cleanup.run();
  }
}

interface TestCluster {
  label: string;
  seeds: string;
  nodes: RedisNode[];
  client: RedisClient;
}

/** A cluster of one master owning every slot (redis-cli --cluster create wants at least three). */
async function oneMasterCluster(dir: string, cleanup: Cleanup): Promise<RedisNode> {
  const [port, bus] = [await unusedPort(), await unusedPort()];
  // A node learns its own address from a peer; alone, CLUSTER SLOTS would name it "" without this.
  const node = await startNode(
    dir,
    [
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      `${dir}/nodes-${port}.conf`,
      '--cluster-port',
      String(bus),
      '--cluster-announce-ip',
      '127.0.0.1',
    ],
    port,
  );
  cleanup.add(() => node.stop());
  await ask(port, 'CLUSTER', 'ADDSLOTSRANGE', 0, 16383);
  await waitFor(async () =>
    field(await ask<string>(port, 'CLUSTER', 'INFO'), 'cluster_state') === 'ok'
      ? undefined
      : 'cluster_state did not become ok',
  );
  return node;
}

const clientOf = (seeds: string, cleanup: Cleanup): RedisClient => {
  const nodes = seeds.split(',').map((hp) => ({ host: hp.split(':')[0]!, port: Number(hp.split(':')[1]) }));
  const client = createRedis({ kind: 'cluster', nodes, auth: { tls: false } });
  cleanup.add(() => client.quit());
  return client;
};

/** host:port of the master serving a sale's slot, in the client's slot map. */
async function ownerOf(client: RedisClient, saleId: string): Promise<string> {
  const cluster = client as Cluster;
  return cluster.slots[(await cluster.cluster('KEYSLOT', saleKeys(saleId).meta)) as number]?.[0] ?? 'unknown';
}

/** `n` sale ids, as many on each master of `c` (hash tags decide the slot, the slot map the master). */
async function spreadSales(c: TestCluster, n: number): Promise<string[]> {
  const masters = c.nodes.map((m) => `127.0.0.1:${m.port}`);
  const placed = new Map<string, string[]>(masters.map((m) => [m, []]));
  for (let i = 0; [...placed.values()].some((ids) => ids.length < n / masters.length); i++) {
    const id = `sale-${i}`;
    const ids = placed.get(await ownerOf(c.client, id));
    if (ids && ids.length < n / masters.length) ids.push(id);
  }
  return [...placed.values()].flat();
}

/** bench/wrk/purchase.lua with one change: each request goes to a random one of the sales. */
function randomSaleScript(dir: string, saleIds: string[]): string {
  const src = readFileSync(fileURLToPath(new URL('./wrk/purchase.lua', import.meta.url)), 'utf8');
  const call = 'wrk.format("POST", nil,';
  if (!src.includes(call))
    throw new Error(
      `bench/wrk/purchase.lua no longer builds its request with ${call}: update randomSaleScript in bench/cluster.ts`,
    );
  const paths = `local paths = { ${saleIds.map((id) => `"/api/sales/${id}/purchases"`).join(', ')} }\n`;
  const file = join(dir, 'random-sale.lua');
  writeFileSync(
    file,
    `-- Generated by bench/cluster.ts from bench/wrk/purchase.lua.\n${paths}${src.replace(call, 'wrk.format("POST", paths[math.random(#paths)],')}`,
  );
  return file;
}

/** Each master on a core of its own, where that still leaves two cores to the API and wrk. */
function pinMasters(clusters: TestCluster[]): string {
  const cores = cpus().length;
  const most = Math.max(...clusters.map((c) => c.nodes.length));
  if (cores < most + 2)
    return `not pinned: ${cores} cores for ${most} masters, the API, writer, listener, Postgres and wrk, so no master can have a core of its own`;
  for (const c of clusters)
    c.nodes.forEach(
      (n, i) => void execFileSync('taskset', ['-pc', String(cores - 1 - i), String(n.pid)], { stdio: 'ignore' }),
    );
  return `each master pinned (taskset) to a core of its own, cores ${cores - most} to ${cores - 1}; everything else unpinned`;
}

/** 2. 1 master against 3: sales on every master, each request buying from a random one. */
async function measureMasters(
  pg: BenchPostgres,
  s: ClusterSettings,
  clusters: TestCluster[],
  saleIds: string[],
  dir: string,
): Promise<MastersRow[]> {
  const script = randomSaleScript(dir, saleIds);
  const stocks = new Map(saleIds.map((id) => [id, s.warmupBuyers + s.buyers + s.connections]));
  const runs = new Map<TestCluster, MastersRow[]>(clusters.map((c) => [c, []]));
  for (let round = 1; round <= s.rounds; round++) {
    for (const c of round % 2 === 1 ? clusters : [...clusters].reverse()) {
      progress(
        `cluster: ${c.label} round ${round}/${s.rounds}, ${saleIds.length} sales, ${s.buyers} buyers, concurrency ${s.connections}`,
      );
      const run = new Cleanup();
      try {
        await Promise.all(masterNodes(c.client).map((m) => m.flushall()));
        const db = await freshDatabase(pg.url, `bench_masters_${c.nodes.length}`);
        run.add(() => db.pool.end());
        const stack = await startProduct({ DATABASE_URL: db.url, REDIS_CLUSTER_NODES: c.seeds }, run);
        for (const [id, stock] of stocks)
          await createSale(
            db.pool,
            c.client,
            parseSaleInput({ id, name: id, stock, ...BENCH_PRICE, paymentWindowSeconds: 3600 }),
          );
        const url = `http://127.0.0.1:${stack.port}/`;
        await runLoad(url, { script, buyers: s.warmupBuyers, connections: s.connections, prefix: 'warm-', watch: [] });
        await drained(c.client, saleIds);
        const before = await Promise.all(c.nodes.map((n) => cpuSeconds(n.port)));
        const watch = [
          ...stack.watch,
          ...c.nodes.map((n, i) => ({ name: `master${i + 1}`, pid: n.pid })),
          { name: 'postgres', pid: pg.pid, tree: true },
        ];
        const load = await runLoad(url, {
          script,
          buyers: s.buyers,
          connections: s.connections,
          prefix: 'buyer-',
          watch,
        });
        await drained(c.client, saleIds);
        const after = await Promise.all(c.nodes.map((n) => cpuSeconds(n.port)));
        const correct = await allWon(db.pool, c.client, stocks, s.buyers, load);
        const purchases = load.statuses['202'] ?? 0;
        const cpuSPer10k = after.map(
          (a, i) => Math.round(((a - before[i]!) / Math.max(1, purchases)) * 10_000 * 100) / 100,
        );
        progress(
          `  ${load.rps} purchases/s, p99 ${load.latencyMs.p99} ms, Redis CPU s per 10k purchases ${cpuSPer10k.join(' / ')}, correct ${correct}`,
        );
        runs.get(c)!.push({ masters: c.nodes.length, cpuSPer10k, ...median([{ load, correct }]) });
      } finally {
        await run.run();
      }
    }
  }
  return clusters.map((c) => {
    const all = runs.get(c)!;
    const m = median(all);
    return { ...m, masters: c.nodes.length, cpuSPer10k: all.find((r) => r.load === m.load)!.cpuSPer10k };
  });
}

const sum = (counters: RedisCounters[]): RedisCounters => ({
  expiredKeys: counters.reduce((n, c) => n + c.expiredKeys, 0),
  existsCalls: counters.reduce((n, c) => n + c.existsCalls, 0),
  staleperc: Math.max(...counters.map((c) => c.staleperc)),
  timeCapReached: counters.reduce((n, c) => n + c.timeCapReached, 0),
});

/**
 * 3. Pending orders on every master of the cluster as the writer leaves them (rows, expiry keys,
 * deadlines entries), deadlines spread over the window in turn across the sales, closed by an
 * in-process ExpiryListener on a cluster client. Lateness = closed_at - expires_at (Postgres's clock).
 */
async function measureExpiry(
  pg: BenchPostgres,
  s: ClusterSettings,
  c: TestCluster,
  saleIds: string[],
): Promise<ClusterExpiry> {
  const { orders, windowS, leadS, graceS } = s.expiry;
  const cleanup = new Cleanup();
  try {
    await Promise.all(masterNodes(c.client).map((m) => m.flushall()));
    const db = await freshDatabase(pg.url, 'bench_cluster_expiry');
    cleanup.add(() => db.pool.end());
    const masters = masterNodes(c.client);
    let catchUps = 0;
    const logger = pino(
      { name: 'bench', level: 'warn' },
      {
        write: (line: string) => {
          if (line.includes('catching up')) catchUps++;
          process.stderr.write(line);
        },
      },
    );
    const listener = new ExpiryListener({
      pool: db.pool,
      redis: c.client,
      logger,
      config: { expiryNudgeMs: loadConfig().expiryNudgeMs },
    });
    await listener.start();
    cleanup.add(() => listener.stop());
    const bySale = new Map(
      saleIds.map((id) => [id, [] as { orderId: string; userId: string; seq: number; expiresAt: number }[]]),
    );
    const firstDeadline = Date.now() + leadS * 1000;
    for (let i = 0; i < orders; i++) {
      const id = saleIds[i % saleIds.length]!;
      const list = bySale.get(id)!;
      list.push({
        orderId: `${id}.${randomUUID()}`,
        userId: `user-${i}`,
        seq: list.length + 1,
        expiresAt: firstDeadline + Math.floor((i * windowS * 1000) / orders),
      });
    }
    progress(
      `cluster: expiry, seeding ${orders} pending orders on ${saleIds.length} sales over ${masters.length} masters, deadlines over ${windowS} s from +${leadS} s`,
    );
    await Promise.all(
      [...bySale].map(async ([id, list]) => {
        await createSale(
          db.pool,
          c.client,
          parseSaleInput({ id, name: id, stock: list.length, ...BENCH_PRICE, paymentWindowSeconds: 60 }),
        );
        for (let from = 0; from < list.length; from += 1000) {
          const batch = list.slice(from, from + 1000);
          await db.pool.query(
            `insert into orders (id, sale_id, user_id, qty, status, seq, purchased_at, created_at, expires_at)
           select t.id, $1, t.user_id, 1, 'pending', t.seq, e.at - interval '60 seconds', e.at - interval '60 seconds', e.at
           from unnest($2::text[], $3::text[], $4::bigint[], $5::bigint[]) as t(id, user_id, seq, expires_ms)
           cross join lateral (select timestamptz 'epoch' + t.expires_ms * interval '1 millisecond' as at) e`,
            [
              id,
              batch.map((o) => o.orderId),
              batch.map((o) => o.userId),
              batch.map((o) => o.seq),
              batch.map((o) => o.expiresAt),
            ],
          );
          const set = (await acknowledgeBatch(c.client, id, 'bench-seed', batch, [])).set;
          if (set !== batch.length)
            throw new Error(`seeding overran the first deadline (${set} of ${batch.length} keys set): raise the lead`);
        }
        const k = saleKeys(id);
        await c.client.multi().decrby(k.available, list.length).set(k.seq, list.length).exec();
      }),
    );
    // As bench/expiry.ts: autovacuum would have analyzed a live table by the deadline.
    await db.pool.query('analyze orders');
    progress(`cluster: expiry, seeded ${firstDeadline - Date.now()} ms before the first deadline`);
    const before = await Promise.all(masters.map((m) => redisCounters(m)));
    const cutoff = firstDeadline + windowS * 1000 + graceS * 1000;
    const open = async () =>
      (await db.pool.query<{ n: number }>('select count(*)::int as n from orders where restored_at is null')).rows[0]!
        .n;
    while (Date.now() < cutoff && (await open()) > 0) await sleep(200);
    const after = await Promise.all(masters.map((m) => redisCounters(m)));
    const available = (await Promise.all(saleIds.map((id) => c.client.get(saleKeys(id).available)))).reduce(
      (n, v) => n + Number(v),
      0,
    );
    const rows: OrderTiming[] = (await Promise.all(saleIds.map((id) => lateness(db.pool, id)))).flat();
    const summary = summarize(
      { label: `${masters.length} masters`, orders, windowS, nudgeMs: loadConfig().expiryNudgeMs },
      rows,
      Math.min(Date.now(), cutoff),
      {
        closedByListener: listener.closed,
        events: listener.events,
        available,
        redis: { before: sum(before), after: sum(after) },
      },
    );
    const owners = await Promise.all(saleIds.map((id) => ownerOf(c.client, id)));
    const ordersPerMaster = masters.map((m) =>
      saleIds.reduce(
        (n, id, i) => (owners[i] === `${m.options.host}:${m.options.port}` ? n + bySale.get(id)!.length : n),
        0,
      ),
    );
    progress(
      `cluster: expiry, closed ${summary.closed}/${orders}, p99 ${summary.lateMs.p99} ms, max ${summary.lateMs.max} ms, events ${listener.events}, catch-ups ${catchUps}`,
    );
    return {
      masters: masters.length,
      sales: saleIds.length,
      summary,
      ordersPerMaster,
      expiredPerMaster: after.map((a, i) => a.expiredKeys - before[i]!.expiredKeys),
      catchUps,
    };
  } finally {
    await cleanup.run();
  }
}

export async function runCluster(pg: BenchPostgres, s: ClusterSettings): Promise<ClusterResults> {
  const wait = await measureWait(pg, s);
  const cleanup = new Cleanup();
  try {
    const dir = mkdtempSync(join(tmpdir(), 'flashsale-bench-cluster-'));
    cleanup.add(() => rmSync(dir, { recursive: true, force: true }));
    progress('cluster: starting a 1-master and a 3-master Redis Cluster (no replicas)');
    const one = await oneMasterCluster(join(dir, 'one'), cleanup);
    const three = await startCluster(join(dir, 'three'), { masters: 3, replicasPerMaster: 0 });
    cleanup.add(() => three.stop());
    const clusters: TestCluster[] = [
      {
        label: '1 master',
        seeds: `127.0.0.1:${one.port}`,
        nodes: [one],
        client: clientOf(`127.0.0.1:${one.port}`, cleanup),
      },
      { label: '3 masters', seeds: three.seeds, nodes: await three.masters(), client: clientOf(three.seeds, cleanup) },
    ];
    const pinning = pinMasters(clusters);
    const saleIds = await spreadSales(clusters[1]!, s.sales);
    const masters = await measureMasters(pg, s, clusters, saleIds, dir);
    const expiry = await measureExpiry(pg, s, clusters[1]!, saleIds);
    return { settings: s, cores: cpus().length, pinning, wait, masters, expiry };
  } finally {
    await cleanup.run();
  }
}
