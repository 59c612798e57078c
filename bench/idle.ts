// What past sales cost an idle stack. The real writer, listener and replay processes run beside one
// live sale; CPU per process is sampled from /proc with that sale alone, then with 5,000 past sales
// (ended, every order final) still in the registry, as every stack kept them before settling
// existed, then again after one `flashsale replay --once` has settled them. Purchase-to-row lag of
// the live sale is measured in each phase from the rows (created_at - purchased_at).
//
//   npm run bench:idle -- [--sales 5000] [--seconds 15]
// Results: a table on stdout, bench/results/idle.json.
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import type { Redis } from 'ioredis';
import { restore } from '../shared/orders/close.js';
import { closeDue } from '../shared/orders/queries.js';
import { saleKeys } from '../shared/redis/keys.js';
import { payOrder } from '../shared/payments/direct-pay.js';
import { SignedWebhook } from '../shared/payments/providers/signed-webhook.js';
import { reconcile } from '../shared/checks/reconcile.js';
import { purchaseScript } from '../shared/sales/scripts.js';
import { replayOnce } from '../shared/pipeline/replay.js';
import { endSale } from '../shared/sales/admin.js';
import { createSale, parseSaleInput } from '../shared/sales/sale.js';
import type { Pool } from '../shared/runtime/db.js';
import { writeDocuments } from './document.js';
import {
  BENCH_PRICE,
  Cleanup,
  cli,
  freshDatabase,
  freshRedis,
  progress,
  sleep,
  spawnNode,
  startBenchPostgres,
  until,
} from './harness.js';
import { machine, type Machine } from './machine.js';
import { Monitor, type ProcCost } from './procstat.js';

const { values: flags } = parseArgs({
  options: { sales: { type: 'string', default: '5000' }, seconds: { type: 'string', default: '15' } },
});
const SALES = Number(flags.sales);
const SECONDS = Number(flags.seconds);
const HOUR = 3_600_000;
/** Short, so the unpaid half of the past sales' orders is closed by the real listener within the setup. */
const PAST_WINDOW_S = 30;

async function pool<T>(n: number, concurrency: number, fn: (i: number) => Promise<T>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) await fn(next++);
    }),
  );
}

const count = async (db: Pool, sql: string) => (await db.query<{ n: number }>(sql)).rows[0]!.n;

interface Lag {
  orders: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}
interface Phase {
  label: string;
  registry: number;
  cpu: ProcCost[];
  lag: Lag;
}
/** bench/results/idle.json: the phases in order (one live sale; past sales unsettled; settled). */
export interface IdleResults {
  at: string;
  machine: Machine;
  settings: { pastSales: number; ordersPerPastSale: number; phaseSeconds: number; livePurchasesPerSecond: number };
  phases: Phase[];
  replay: {
    reconcileAllMs: number;
    settlePass: { code: number | null; wallMs: number; logBytes: number; settled: number };
    settledEarly: number;
    afterPassMs: number;
    afterPassReconciled: number;
  };
}

/** One purchase of the live sale every 100 ms for the phase, then the lag of each to its row. */
async function samplePhase(label: string, redis: Redis, db: Pool, monitor: Monitor): Promise<Phase> {
  progress(`phase: ${label} (${SECONDS} s)`);
  const ids: string[] = [];
  monitor.start();
  const end = Date.now() + SECONDS * 1000;
  while (Date.now() < end) {
    const orderId = `live.${randomUUID()}`;
    const [code] = await purchaseScript(redis, {
      saleId: 'live',
      userId: `buyer-${orderId}`,
      qty: 1,
      orderId,
      buyCountTtlSeconds: 3600,
    });
    if (code !== 1) throw new Error(`live purchase refused: ${code}`);
    ids.push(orderId);
    await sleep(100);
  }
  const cpu = monitor.stop();
  await until(
    'the live orders to be written',
    60_000,
    async () => (await redis.hlen(saleKeys('live').queued)) === 0,
    200,
  );
  const res = await db.query<{ ms: number }>(
    `select extract(epoch from created_at - purchased_at)::float8 * 1000 as ms from orders where id = any($1::text[]) order by 1`,
    [ids],
  );
  const ms = res.rows.map((r) => r.ms);
  const at = (q: number) => Math.round(ms[Math.min(ms.length - 1, Math.ceil(q * ms.length) - 1)]!);
  return {
    label,
    registry: await redis.scard('flashsale:sales'),
    cpu,
    lag: { orders: ms.length, p50Ms: at(0.5), p99Ms: at(0.99), maxMs: at(1) },
  };
}

/** `flashsale replay --once` as a process: its exit code, wall time and what it logged at info. */
function replayProcess(
  env: Record<string, string>,
): Promise<{ code: number | null; wallMs: number; logBytes: number }> {
  const started = performance.now();
  const child = spawn(process.execPath, cli('replay').concat('--once'), {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, ...env, LOG_LEVEL: 'info', NODE_ENV: 'production' },
  });
  let logBytes = 0;
  child.stdout!.on('data', (c: Buffer) => {
    logBytes += c.length;
  });
  return new Promise((resolve) =>
    child.once('exit', (code) => resolve({ code, wallMs: Math.round(performance.now() - started), logBytes })),
  );
}

const cleanup = new Cleanup();
for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.once(signal, () => void cleanup.run().finally(() => process.exit(130)));
try {
  const pg = await startBenchPostgres(cleanup);
  const db = await freshDatabase(pg.url, 'bench_idle');
  cleanup.add(() => db.pool.end());
  const r = await freshRedis(cleanup);
  const now = Date.now();
  await createSale(
    db.pool,
    r.redis,
    parseSaleInput({
      id: 'live',
      name: 'live',
      stock: 1_000_000,
      ...BENCH_PRICE,
      paymentWindowSeconds: 3600,
      startsAt: new Date(now - HOUR).toISOString(),
      endsAt: new Date(now + 2 * HOUR).toISOString(),
    }),
  );
  // A long replay interval: its passes run only when this script says (cron fires at minute 0 of an hour).
  const env = {
    DATABASE_URL: db.url,
    REDIS_URL: r.url,
    REPLAY_INTERVAL_SECONDS: '3600',
    AUTH_MODE: 'trusted-header',
    JWT_SECRET: 'bench-secret-0123456789',
    ADMIN_TOKEN: 'bench-admin-token-0123456789',
  };
  const writer = await spawnNode('order-writer', cli('order-writer'), env, cleanup);
  const listener = await spawnNode('expiry-listener', cli('expiry-listener'), env, cleanup);
  const replay = await spawnNode('replay', cli('replay'), env, cleanup);
  const monitor = new Monitor([
    { name: 'writer', pid: writer.pid },
    { name: 'listener', pid: listener.pid },
    { name: 'replay', pid: replay.pid },
    { name: 'redis', pid: r.pid },
    { name: 'postgres', pid: pg.pid, tree: true },
  ]);
  const phases: Phase[] = [await samplePhase('1 live sale', r.redis, db.pool, monitor)];

  progress(`creating ${SALES} past sales, 2 orders each (one paid, one closed by the listener)`);
  const past = (i: number) => `past-${i}`;
  await pool(SALES, 20, (i) =>
    createSale(
      db.pool,
      r.redis,
      parseSaleInput({
        id: past(i),
        name: past(i),
        stock: 10,
        ...BENCH_PRICE,
        paymentWindowSeconds: PAST_WINDOW_S,
        // Open until its orders are in (purchase.lua judges by Redis's clock), then ended an hour ago.
        startsAt: new Date(now - 2 * HOUR).toISOString(),
      }),
    ),
  );
  const orders: { id: string; user: string }[] = [];
  await pool(SALES, 50, async (i) => {
    for (const user of ['u1', 'u2']) {
      const orderId = `${past(i)}.${randomUUID()}`;
      const [code] = await purchaseScript(r.redis, {
        saleId: past(i),
        userId: user,
        qty: 1,
        orderId,
        buyCountTtlSeconds: 3600,
      });
      if (code !== 1) throw new Error(`past purchase refused: ${code}`);
      orders.push({ id: orderId, user });
    }
    await endSale(db.pool, r.redis, past(i), new Date(now - HOUR));
  });
  await until(
    'the writer to write every past order',
    300_000,
    async () => (await count(db.pool, `select count(*)::int as n from orders where sale_id <> 'live'`)) === 2 * SALES,
    200,
  );
  const toPay = orders.filter((o) => o.user === 'u1');
  let late = 0;
  await pool(toPay.length, 50, async (i) => {
    // One the machine was too slow to pay within its window is closed by the listener instead: final too.
    // Signed and verified in this process (the direct-pay path): any secret of its own will do.
    await payOrder(
      {
        pool: db.pool,
        redis: r.redis,
        signed: new SignedWebhook(`bench-${randomUUID()}`),
        logger: pino({ level: 'silent' }),
      },
      toPay[i]!.id,
      'u1',
    ).catch((err: { code?: string }) => {
      if (err.code !== 'order_expired') throw err;
      late++;
    });
  });
  if (late > 0) progress(`${late} payments came after their deadline; those orders expire instead`);
  await until(
    'the listener to close and restore every unpaid past order',
    300_000,
    async () =>
      (await count(
        db.pool,
        `select count(*)::int as n from orders where sale_id <> 'live' and (status = 'pending' or (status = 'expired' and restored_at is null))`,
      )) === 0,
    200,
  );
  // Sweep whatever a lost event left (none expected): every past order is final before measuring.
  await restore(
    db.pool,
    r.redis,
    await closeDue(
      db.pool,
      orders.map((o) => o.id),
    ),
  );

  // What every replay pass did before settling existed: reconcile each sale.
  let t = performance.now();
  const sales = (await db.pool.query<{ id: string; stock: number }>('select id, stock from sales')).rows;
  for (const s of sales) await reconcile(db.pool, r.redis, s.id, s.stock);
  const reconcileAllMs = Math.round(performance.now() - t);

  phases.push(await samplePhase(`${SALES} past sales in the registry (before)`, r.redis, db.pool, monitor));
  const settledEarly = await count(db.pool, 'select count(*)::int as n from sales where settled_at is not null');
  progress('settling: flashsale replay --once');
  const settlePass = {
    ...(await replayProcess(env)),
    settled: (await count(db.pool, 'select count(*)::int as n from sales where settled_at is not null')) - settledEarly,
  };
  phases.push(await samplePhase(`${SALES} past sales settled (after)`, r.redis, db.pool, monitor));

  t = performance.now();
  const after = await replayOnce({
    pool: db.pool,
    redis: r.redis,
    logger: pino({ name: 'bench', level: 'warn' }, pino.destination(2)),
  });
  const afterPassMs = Math.round(performance.now() - t);

  const names = phases[0]!.cpu.map((c) => c.name);
  const head = ['phase', 'registry', ...names.map((n) => `${n} %`), 'lag p50 ms', 'lag p99 ms', 'lag max ms'];
  const rows = phases.map((p) => [
    p.label,
    String(p.registry),
    ...p.cpu.map((c) => String(c.cpuPct)),
    String(p.lag.p50Ms),
    String(p.lag.p99Ms),
    String(p.lag.maxMs),
  ]);
  const width = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(width[i]!) : c.padStart(width[i]!))).join('  ');
  console.log(`\nIdle cost, % of one core over ${SECONDS} s per phase:\n${[head, ...rows].map(line).join('\n')}`);
  console.log(
    `\nreplay: reconciling all ${sales.length} sales (each pass before) ${reconcileAllMs} ms; the settling pass (process) ${settlePass.wallMs} ms, ` +
      `exit ${settlePass.code}, ${settlePass.settled} settled, ${settlePass.logBytes} bytes logged at info; a pass after ${afterPassMs} ms over ${after.reconciliations.length} unsettled sale(s)` +
      (settledEarly ? `; NOTE: the scheduled pass fired during the run and settled ${settledEarly}` : ''),
  );

  mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
  const results: IdleResults = {
    at: new Date().toISOString(),
    machine: machine({ postgres: pg.version, 'redis-server': r.version }),
    settings: { pastSales: SALES, ordersPerPastSale: 2, phaseSeconds: SECONDS, livePurchasesPerSecond: 10 },
    phases,
    replay: {
      reconcileAllMs,
      settlePass,
      settledEarly,
      afterPassMs,
      afterPassReconciled: after.reconciliations.length,
    },
  };
  writeFileSync(new URL('./results/idle.json', import.meta.url), `${JSON.stringify(results, null, 2)}\n`);
  writeDocuments();
  progress("wrote bench/results/idle.json, BENCHMARKS.md and the README's headline");
} finally {
  await cleanup.run();
}
