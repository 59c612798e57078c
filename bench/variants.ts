// Beside comparison 1: the product's purchase path for a sale of 12 variants against a sale of one,
// under the sold-out crowd and the every-buyer-wins crowd, in the same run. Shapes alternate within
// a round (the first one swaps each round) so machine noise falls on both alike; the median round
// of each is reported and the 12-variant throughput is given as a ratio of the one-variant one.
// Redis memory: the variants' hash (MEMORY USAGE) per variant, and used_memory's growth over the
// every-buyer-wins crowd per order it left pending.
import { loadavg } from 'node:os';
import { saleKeys } from '../shared/redis/keys.js';
import type { BenchPostgres } from './harness.js';
import { progress } from './harness.js';
import { runLoad } from './load.js';
import type { PurchaseSettings } from './purchase.js';
import { benchVariants, startStack } from './stacks.js';

export const VARIANTS = 12;

export interface ShapeRun {
  rps: number;
  p99: number;
  correct: boolean;
  /** The 12-variant every-buyer-wins run only. */
  bytesPerVariant?: number;
  bytesPerPendingOrder?: number;
}

export interface VariantCrowd {
  crowd: 'sold-out' | 'all-win';
  settings: PurchaseSettings;
  /** Per round, in round order. */
  one: ShapeRun[];
  twelve: ShapeRun[];
  /** Median 12-variant req/s over median one-variant req/s. */
  ratio: number;
}

export interface VariantResults {
  variants: number;
  crowds: VariantCrowd[];
  loadAvgAtStart: number[];
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;

async function runShape(pg: BenchPostgres, s: PurchaseSettings, variants: number, memory: boolean): Promise<ShapeRun> {
  const stack = await startStack('flashsale', pg);
  try {
    const url = (sale: string) => `http://127.0.0.1:${stack.port}/api/sales/${sale}/purchases`;
    const skus = variants > 1 ? benchVariants(s.stock, variants).map((v) => v.sku) : undefined;
    if (s.warmupBuyers > 0) {
      await stack.createSale('warmup', Math.ceil(s.warmupBuyers / 2), variants);
      await runLoad(url('warmup'), {
        buyers: s.warmupBuyers,
        connections: s.connections,
        prefix: 'warm-',
        watch: [],
        skus,
      });
      await stack.settle('warmup');
    }
    const redis = stack.redis!.redis;
    await stack.createSale('sale', s.stock, variants);
    const k = saleKeys('sale');
    const hashBytes = memory ? Number(await redis.call('memory', 'usage', k.variantsLeft, 'samples', '0')) : 0;
    const before = memory ? usedMemory(await redis.info('memory')) : 0;
    const load = await runLoad(url('sale'), {
      buyers: s.buyers,
      connections: s.connections,
      prefix: 'buyer-',
      watch: stack.watch,
      skus,
    });
    await stack.settle('sale');
    const o = await stack.outcome('sale');
    const left = skus
      ? Object.values(await redis.hgetall(k.variantsLeft)).reduce((n, v) => n + Number(v), 0)
      : Number(await redis.get(k.available));
    const wins = Math.min(s.stock, s.buyers);
    const correct = !!o && o.units === wins && o.orders === wins && o.maxPerUser <= 1 && left === s.stock - wins;
    const run: ShapeRun = { rps: load.rps, p99: load.latencyMs.p99, correct };
    if (memory) {
      run.bytesPerVariant = Math.round(hashBytes / variants);
      run.bytesPerPendingOrder = Math.round(
        (usedMemory(await redis.info('memory')) - before) / Math.max(1, o?.orders ?? 0),
      );
    }
    return run;
  } finally {
    await stack.stop();
  }
}

const usedMemory = (info: string) => Number(/^used_memory:(\d+)/m.exec(info)?.[1] ?? 0);

/** Both crowds, `rounds` rounds each, the two shapes alternating within each round. */
export async function runVariants(pg: BenchPostgres, crowds: VariantCrowd['settings'][]): Promise<VariantResults> {
  const loadAvgAtStart = loadavg().map((l) => Math.round(l * 100) / 100);
  const out: VariantCrowd[] = [];
  for (const [i, settings] of crowds.entries()) {
    const crowd = i === 0 ? 'sold-out' : 'all-win';
    const runs: Record<'one' | 'twelve', ShapeRun[]> = { one: [], twelve: [] };
    for (let round = 1; round <= settings.rounds; round++) {
      const order = round % 2 === 1 ? (['one', 'twelve'] as const) : (['twelve', 'one'] as const);
      for (const shape of order) {
        const n = shape === 'one' ? 1 : VARIANTS;
        progress(`variants round ${round}/${settings.rounds}: ${crowd}, ${n} variant(s), ${settings.buyers} buyers`);
        const r = await runShape(pg, settings, n, crowd === 'all-win' && shape === 'twelve');
        progress(`  ${r.rps} req/s, p99 ${r.p99} ms, correct ${r.correct}`);
        runs[shape].push(r);
      }
    }
    const ratio = median(runs.twelve.map((r) => r.rps)) / median(runs.one.map((r) => r.rps));
    out.push({ crowd, settings, ...runs, ratio: Math.round(ratio * 1000) / 1000 });
  }
  return { variants: VARIANTS, crowds: out, loadAvgAtStart };
}

const fmt = (n: number) => n.toLocaleString('en-US');

/** BENCHMARKS.md's section: each crowd's rounds by shape, the ratio against the 95% target, and Redis memory. */
export function variantsSection(v: VariantResults): string {
  const rows = v.crowds.map((c) => {
    const [one, twelve] = [c.one, c.twelve].map((rs) => median(rs.map((r) => r.rps)));
    const ok = [...c.one, ...c.twelve].every((r) => r.correct);
    return `| ${c.crowd === 'sold-out' ? `sold out (stock ${fmt(c.settings.stock)}, ${fmt(c.settings.buyers)} buyers)` : `every buyer wins (${fmt(c.settings.buyers)})`} | ${fmt(one!)} (${c.one.map((r) => fmt(r.rps)).join(', ')}) | ${fmt(twelve!)} (${c.twelve.map((r) => fmt(r.rps)).join(', ')}) | ${(c.ratio * 100).toFixed(1)}% ${c.ratio >= 0.95 ? '(target 95%: met)' : '(target 95%: not met)'} | ${ok ? 'yes' : 'NO'} |`;
  });
  const mem = v.crowds.find((c) => c.crowd === 'all-win')?.twelve.find((r) => r.bytesPerVariant !== undefined);
  return [
    `## Variants: a sale of ${v.variants} against a sale of one`,
    '',
    `\`bench/variants.ts\` (\`npm run bench -- --only variants\`): the product alone (API, writer, listener), the purchase part's crowds, a sale of one variant (\`{"qty":1}\`) and a sale of ${v.variants} sharing the same stock (buyer n names variant n mod ${v.variants}), the two alternating within each round, fresh servers each run. req/s: the median round, every round in brackets. Load average at the start ${v.loadAvgAtStart.join(' / ')}.`,
    '',
    `| crowd | 1 variant req/s | ${v.variants} variants req/s | ${v.variants} / 1 | correct |`,
    '|---|---|---|---|---|',
    ...rows,
    '',
    mem
      ? `Redis memory: the variants' units-left hash is ${fmt(mem.bytesPerVariant!)} bytes per variant (MEMORY USAGE / ${v.variants}); a pending order of the ${v.variants}-variant sale costs ${fmt(mem.bytesPerPendingOrder!)} bytes (used_memory after the every-buyer-wins crowd was written, less before it, over the orders left pending: everything Redis keeps for an order until it is paid or expires).`
      : '',
    '',
  ].join('\n');
}
