// Where the time goes, taken in the run whose figures it explains: the API's CPU under an
// every-buyer-wins crowd (node --cpu-prof), Redis INFO commandstats over the same crowd and its
// drain, and EXPLAIN (ANALYZE, BUFFERS) of the writer's and the closers' statements on a table
// that already holds orders.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { Pool } from '../shared/runtime/db.js';
import { newOrderId, type Winner } from '../shared/runtime/ids.js';
import { closeDue, markRestored, writeOrders } from '../shared/orders/queries.js';
import { parseSaleInput } from '../shared/sales/sale.js';
import { BENCH_PRICE, Cleanup, freshDatabase, progress, type BenchPostgres } from './harness.js';
import { runLoad } from './load.js';
import { summarize } from './profile.js';
import { startStack } from './stacks.js';

export interface ProfileResults {
  crowd: { buyers: number; connections: number; rps: number };
  /** The top of the API's profile: share of busy CPU by package and by function (self time). */
  api: { busyS: number; byPackage: [string, number][]; byFunction: [string, number][] } | null;
  /** Redis commands over the crowd and its drain, most time first (scripts' own commands included). */
  commandstats: { command: string; calls: number; usecPerCall: number; usecTotal: number }[];
  /** EXPLAIN (ANALYZE, BUFFERS) of each statement, run inside a transaction rolled back. */
  explain: { what: string; plan: string[] }[];
}

const PROFILES_DIR = 'bench/results/profiles';

/** The newest profile of the process `name` written after `since` (ms). */
function newestProfile(name: string, since: number): string | null {
  const dirs = readdirSync(PROFILES_DIR).filter(
    (d) => d.startsWith(`${name}-`) && Number(d.slice(name.length + 1)) >= since,
  );
  for (const dir of dirs.sort().reverse()) {
    const files = readdirSync(join(PROFILES_DIR, dir))
      .filter((f) => f.endsWith('.cpuprofile'))
      .map((f) => join(PROFILES_DIR, dir, f))
      .sort((a, b) => statSync(b).size - statSync(a).size);
    // tsx's loader thread writes a small profile beside the main thread's.
    if (files[0]) return files[0];
  }
  return null;
}

function parseCommandstats(info: string): ProfileResults['commandstats'] {
  const rows = [...info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/gm)].map((m) => ({
    command: m[1]!,
    calls: Number(m[2]),
    usecTotal: Number(m[3]),
    usecPerCall: Number(m[4]),
  }));
  return rows.sort((a, b) => b.usecTotal - a.usecTotal).slice(0, 12);
}

async function profileCrowd(
  pg: BenchPostgres,
  s: { buyers: number; connections: number },
): Promise<Pick<ProfileResults, 'crowd' | 'api' | 'commandstats'>> {
  const since = Date.now();
  process.env.BENCH_CPU_PROF = '1';
  const stack = await startStack('flashsale', pg).finally(() => delete process.env.BENCH_CPU_PROF);
  let crowd: ProfileResults['crowd'];
  let commandstats: ProfileResults['commandstats'];
  try {
    const url = (sale: string) => `http://127.0.0.1:${stack.port}/api/sales/${sale}/purchases`;
    await stack.createSale('warmup', 5_000);
    await runLoad(url('warmup'), { buyers: 5_000, connections: s.connections, prefix: 'warm-', watch: [] });
    await stack.settle('warmup');
    await stack.createSale('sale', s.buyers);
    await stack.redis!.redis.config('RESETSTAT');
    const load = await runLoad(url('sale'), {
      buyers: s.buyers,
      connections: s.connections,
      prefix: 'buyer-',
      watch: stack.watch,
    });
    await stack.settle('sale');
    commandstats = parseCommandstats(await stack.redis!.redis.info('commandstats'));
    crowd = { buyers: s.buyers, connections: s.connections, rps: load.rps };
  } finally {
    await stack.stop();
  }
  const file = newestProfile('api', since);
  if (!file) return { crowd, api: null, commandstats };
  const text = summarize(file, 12);
  const section = (title: string) => {
    const lines = text.split('\n');
    const from = lines.indexOf(title) + 1;
    const to = lines.indexOf('', from);
    return lines
      .slice(from, to === -1 ? undefined : to)
      .map((l): [string, number] => [l.slice(8).trim(), Number.parseFloat(l)]);
  };
  return {
    crowd,
    api: {
      busyS: Number(/busy ([\d.]+) s/.exec(text)?.[1] ?? 0),
      byPackage: section('by package:').slice(0, 8),
      byFunction: section('by function (self):'),
    },
    commandstats,
  };
}

/** The statement `run` sends first, as text and values, without running it. */
async function statementOf(run: (pool: Pool) => Promise<unknown>): Promise<{ text: string; values: unknown[] }> {
  let seen: { text: string; values: unknown[] } | undefined;
  const recorder = {
    query: async (text: string, values: unknown[]) => {
      seen = { text, values };
      throw new Error('recorded');
    },
  };
  await run(recorder as unknown as Pool).catch(() => {});
  if (!seen) throw new Error('no statement recorded');
  return seen;
}

async function explain(
  pool: Pool,
  what: string,
  run: (pool: Pool) => Promise<unknown>,
): Promise<ProfileResults['explain'][number]> {
  const { text, values } = await statementOf(run);
  const client = await pool.connect();
  try {
    await client.query('begin');
    const res = await client.query<{ 'QUERY PLAN': string }>(`explain (analyze, buffers, costs off) ${text}`, values);
    // The batch's ids show inline as one long array literal: shortened.
    return { what, plan: res.rows.map((r) => r['QUERY PLAN'].replace(/'\{[^}]{100,}\}'/g, "'{...}'")) };
  } finally {
    await client.query('rollback').catch(() => {});
    client.release();
  }
}

async function explainStatements(pg: BenchPostgres, tableOrders: number): Promise<ProfileResults['explain']> {
  const cleanup = new Cleanup();
  try {
    const db = await freshDatabase(pg.url, 'bench_explain');
    cleanup.add(() => db.pool.end());
    const sale = parseSaleInput({
      id: 'explain',
      name: 'explain',
      stock: tableOrders + 1000,
      ...BENCH_PRICE,
      paymentWindowSeconds: 3600,
    });
    // Postgres only: the statements are what is measured here.
    await db.pool.query(`insert into sales (id, name, stock, payment_window_seconds) values ($1, $1, $2, 3600)`, [
      sale.id,
      sale.stock,
    ]);
    const winners = (n: number, from: number): Winner[] =>
      Array.from({ length: n }, (_, i) => ({
        orderId: newOrderId(sale.id),
        seq: from + i,
        qty: 1,
        purchasedAt: Date.now(),
        userId: `u-${from + i}`,
      }));
    for (let from = 0; from < tableOrders; from += 5000) await writeOrders(db.pool, sale.id, winners(5000, from));
    // 2,000 of them due, as a burst of deadlines would leave them.
    const due = (
      await db.pool.query<{ id: string }>(
        "update orders set expires_at = now() - interval '1 second' where id in (select id from orders limit 2000) returning id",
      )
    ).rows.map((r) => r.id);
    await db.pool.query('analyze orders');
    return [
      await explain(db.pool, `writer: insert 1,000 orders (${tableOrders.toLocaleString('en-US')} in the table)`, (p) =>
        writeOrders(p, sale.id, winners(1000, tableOrders)),
      ),
      await explain(db.pool, 'listener: close 2,000 due orders', (p) => closeDue(p, due)),
      await explain(db.pool, 'listener: mark 2,000 closed orders restored', async (p) => {
        await db.pool.query("update orders set status = 'expired', closed_at = now() where id = any($1)", [due]);
        await db.pool.query('analyze orders');
        return markRestored(p, due);
      }),
    ];
  } finally {
    await cleanup.run();
  }
}

export async function runProfiles(
  pg: BenchPostgres,
  s: { buyers: number; connections: number; tableOrders: number },
): Promise<ProfileResults> {
  progress(
    `profiles: API under ${s.buyers} winning buyers at concurrency ${s.connections}, Redis commandstats, EXPLAIN ANALYZE`,
  );
  const crowd = await profileCrowd(pg, s);
  return { ...crowd, explain: await explainStatements(pg, s.tableOrders) };
}
