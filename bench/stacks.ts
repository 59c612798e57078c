// Each purchase design as a running stack: its own processes (spawned apart from the load
// generator), its own Redis and database, a way to create a sale, to wait until every buyer has
// been decided and written, and to check the outcome in Postgres.
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Queue } from 'bullmq';
import { createSale, parseSaleInput } from '../shared/sales/sale.js';
import { saleKeys } from '../shared/redis/keys.js';
import type { Pool } from '../shared/runtime/db.js';
import { PURCHASE_QUEUE } from './baselines/common.js';
import { ROWLOCK_SCHEMA } from './baselines/rowlock-tx.js';
import {
  BENCH_PRICE,
  Cleanup,
  cli,
  freePortBase,
  freePort,
  freshDatabase,
  freshRedis,
  spawnNode,
  tsScript,
  until,
  type BenchPostgres,
  type BenchRedis,
  type Proc,
} from './harness.js';
import { pm2Watch, startPm2 } from './pm2.js';
import type { Watched } from './procstat.js';

export type Design =
  | 'flashsale'
  | 'hello'
  | 'rowlock'
  | 'enqueue'
  | 'flashsale-nomem'
  | 'rowlock-nomem'
  | 'pm2-hello'
  | 'pm2-flashsale';

export const DESIGNS: Record<Design, string> = {
  flashsale: 'flashsale (this endpoint)',
  hello: 'hello-world POST (ceiling)',
  rowlock: 'Postgres row lock',
  enqueue: 'BullMQ job per request',
  'flashsale-nomem': 'flashsale, no sold-out memory',
  'rowlock-nomem': 'Postgres row lock, no sold-out memory',
  'pm2-hello': 'hello-world POST under PM2, one instance per core (ceiling)',
  'pm2-flashsale': 'flashsale under PM2 (ecosystem.config.js, API_INSTANCES = cores)',
};

/** The designs run with SOLD_OUT_CACHE_MS=0: every buyer reaches Redis or Postgres. */
const NO_MEMORY = { SOLD_OUT_CACHE_MS: '0' };

export interface Outcome {
  orders: number;
  units: number;
  maxPerUser: number;
  /** Seconds from the first to the last order's purchase time: how long the stock took to sell. */
  selloutS: number;
  /** Stock the design still holds as available (Redis for flashsale, the stock row otherwise). */
  left: number;
}

export interface Stack {
  design: Design;
  port: number;
  procs: Proc[];
  redis?: BenchRedis;
  watch: Watched[];
  /** `variants` (the product only): that many variants sharing the stock, skus `V1..Vn`. */
  createSale(id: string, stock: number, variants?: number): Promise<void>;
  /** Resolves once every buyer is decided and every won order is a row in Postgres. */
  settle(saleId: string, timeoutMs?: number): Promise<void>;
  outcome(saleId: string): Promise<Outcome | null>;
  stop(): Promise<void>;
}

// wrk opens up to 2,000 connections from one address: no per-client cap.
export const PRODUCT_ENV = { AUTH_MODE: 'trusted-header', MAX_CONNECTIONS_PER_CLIENT: '0' };

async function outcome(pool: Pool, saleId: string, left: number): Promise<Outcome> {
  const res = await pool.query<{ orders: number; units: number; max_per_user: number; sellout_s: number }>(
    `select count(*)::int as orders, coalesce(sum(qty), 0)::int as units,
            coalesce(extract(epoch from max(purchased_at) - min(purchased_at)), 0)::float8 as sellout_s,
            coalesce((select max(n) from (select sum(qty) as n from orders where sale_id = $1 group by user_id) t), 0)::int as max_per_user
     from orders where sale_id = $1`,
    [saleId],
  );
  const r = res.rows[0]!;
  return {
    orders: r.orders,
    units: r.units,
    maxPerUser: r.max_per_user,
    selloutS: Math.round(r.sellout_s * 100) / 100,
    left,
  };
}

async function insertRowLockSale(pool: Pool, id: string, stock: number): Promise<void> {
  await pool.query(`insert into sales (id, name, stock, payment_window_seconds) values ($1, $1, $2, 3600)`, [
    id,
    stock,
  ]);
  await pool.query('insert into bench_stock (sale_id, stock) values ($1, $2)', [id, stock]);
}

/** The PM2 designs: one API (or hello-world) instance per core, as docs/operations.md tells an operator to run it. */
const CORES = cpus().length;
const HELLO_ECOSYSTEM = fileURLToPath(new URL('./baselines/hello.config.js', import.meta.url));
const ECOSYSTEM = fileURLToPath(new URL('../ecosystem.config.js', import.meta.url));

/** `n` variants `V1..Vn` sharing `stock` as evenly as it divides. */
export const benchVariants = (stock: number, n: number) =>
  Array.from({ length: n }, (_, i) => ({
    sku: `V${i + 1}`,
    label: `V${i + 1}`,
    stock: Math.floor(stock / n) + (i < stock % n ? 1 : 0),
  }));

const stockLeft = async (pool: Pool, id: string) =>
  (await pool.query<{ stock: number }>('select stock from bench_stock where sale_id = $1', [id])).rows[0]?.stock ?? -1;

export async function startStack(
  design: Design,
  pg: BenchPostgres,
  opts: { productEnv?: Record<string, string> } = {},
): Promise<Stack> {
  const cleanup = new Cleanup();
  const port = await freePort();
  const pgWatch: Watched = { name: 'postgres', pid: pg.pid, tree: true };
  try {
    if (design === 'hello') {
      const server = await spawnNode('hello', tsScript('bench/baselines/hello.ts'), { PORT: String(port) }, cleanup);
      return {
        design,
        port,
        procs: [server],
        watch: [{ name: 'server', pid: server.pid }],
        createSale: async () => {},
        settle: async () => {},
        outcome: async () => null,
        stop: () => cleanup.run(),
      };
    }
    if (design === 'pm2-hello') {
      const pm2 = await startPm2(HELLO_ECOSYSTEM, CORES, { PORT: String(port), API_INSTANCES: String(CORES) }, cleanup);
      return {
        design,
        port,
        procs: [],
        watch: pm2Watch(pm2),
        createSale: async () => {},
        settle: async () => {},
        outcome: async () => null,
        stop: () => cleanup.run(),
      };
    }
    const db = await freshDatabase(pg.url, `bench_${design}`);
    cleanup.add(() => db.pool.end());
    if (design === 'rowlock' || design === 'rowlock-nomem') {
      await db.pool.query(ROWLOCK_SCHEMA);
      const env = { PORT: String(port), DATABASE_URL: db.url, ...(design === 'rowlock-nomem' ? NO_MEMORY : {}) };
      const server = await spawnNode(design, tsScript('bench/baselines/rowlock.ts'), env, cleanup);
      return {
        design,
        port,
        procs: [server],
        watch: [{ name: 'server', pid: server.pid }, pgWatch],
        createSale: (id, stock) => insertRowLockSale(db.pool, id, stock),
        settle: async () => {},
        outcome: async (id) => outcome(db.pool, id, await stockLeft(db.pool, id)),
        stop: () => cleanup.run(),
      };
    }
    const redis = await freshRedis(cleanup);
    const redisWatch: Watched = { name: 'redis', pid: redis.pid };
    if (design === 'enqueue') {
      await db.pool.query(ROWLOCK_SCHEMA);
      const env = { PORT: String(port), DATABASE_URL: db.url, REDIS_URL: redis.url };
      const worker = await spawnNode('enqueue-worker', tsScript('bench/baselines/enqueue-worker.ts'), env, cleanup);
      const server = await spawnNode('enqueue-api', tsScript('bench/baselines/enqueue-api.ts'), env, cleanup);
      const connection = redis.redis.duplicate({ maxRetriesPerRequest: null });
      connection.on('error', () => {});
      cleanup.add(() => connection.quit());
      // BullMQ leaves a connection it was given open: closed above, after the queue.
      const queue = new Queue(PURCHASE_QUEUE, { connection });
      cleanup.add(() => queue.close());
      return {
        design,
        port,
        procs: [server, worker],
        redis,
        watch: [{ name: 'server', pid: server.pid }, { name: 'worker', pid: worker.pid }, redisWatch, pgWatch],
        createSale: (id, stock) => insertRowLockSale(db.pool, id, stock),
        settle: (_id, timeoutMs = 600_000) =>
          until('the purchase queue to drain', timeoutMs, async () => {
            const c = await queue.getJobCounts('waiting', 'active', 'delayed', 'prioritized', 'waiting-children');
            return Object.values(c).every((n) => n === 0);
          }),
        outcome: async (id) => outcome(db.pool, id, await stockLeft(db.pool, id)),
        stop: () => cleanup.run(),
      };
    }
    const env = {
      PORT: String(port),
      DATABASE_URL: db.url,
      REDIS_URL: redis.url,
      ...PRODUCT_ENV,
      ...(design === 'flashsale-nomem' ? NO_MEMORY : {}),
      ...opts.productEnv,
    };
    const sale: Pick<Stack, 'createSale' | 'settle' | 'outcome' | 'stop'> = {
      createSale: (id, stock, variants = 1) =>
        createSale(
          db.pool,
          redis.redis,
          parseSaleInput({
            id,
            name: id,
            ...BENCH_PRICE,
            paymentWindowSeconds: 3600,
            ...(variants > 1 ? { variants: benchVariants(stock, variants) } : { stock }),
          }),
        ),
      settle: (id, timeoutMs = 600_000) =>
        until('the order writer to drain', timeoutMs, async () => {
          const k = saleKeys(id);
          const [winners, queued] = await Promise.all([redis.redis.llen(k.winners), redis.redis.hlen(k.queued)]);
          return winners === 0 && queued === 0;
        }),
      outcome: async (id) => outcome(db.pool, id, Number(await redis.redis.get(saleKeys(id).available))),
      stop: () => cleanup.run(),
    };
    if (design === 'pm2-flashsale') {
      // The real ecosystem file with real servers (no `servers` app) and the bench's secrets; ops ports that are free.
      // The API's CORES instances and four daemons (order-writer, expiry-listener, replay, admission).
      const opsBase = await freePortBase([1, 2, 3, 4, ...Array.from({ length: CORES }, (_, i) => 10 + i)]);
      const pm2 = await startPm2(
        ECOSYSTEM,
        CORES + 4,
        { ...env, OPS_PORT_BASE: String(opsBase), API_INSTANCES: String(CORES) },
        cleanup,
      );
      return { design, port, procs: [], redis, watch: [...pm2Watch(pm2), redisWatch, pgWatch], ...sale };
    }
    const api = await spawnNode('api', cli('api'), env, cleanup);
    const writer = await spawnNode('order-writer', cli('order-writer'), env, cleanup);
    const listener = await spawnNode('expiry-listener', cli('expiry-listener'), env, cleanup);
    return {
      design,
      port,
      procs: [api, writer, listener],
      redis,
      watch: [
        { name: 'server', pid: api.pid },
        { name: 'writer', pid: writer.pid },
        { name: 'listener', pid: listener.pid },
        redisWatch,
        pgWatch,
      ],
      ...sale,
    };
  } catch (err) {
    await cleanup.run();
    throw err;
  }
}
