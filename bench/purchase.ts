// Comparison 1: the purchase path. The same sale and the same crowd of distinct buyers against
// each design, each server in its own process, wrk apart from all of them. Designs run in turn
// within a round and rounds repeat, so machine noise falls on every design alike; the median
// round per design is reported.
import { loadavg } from 'node:os';
import type { BenchPostgres } from './harness.js';
import { progress } from './harness.js';
import { runLoad, type LoadResult } from './load.js';
import { DESIGNS, startStack, type Design, type Outcome } from './stacks.js';

export interface PurchaseSettings {
  stock: number;
  buyers: number;
  connections: number;
  rounds: number;
  warmupBuyers: number;
}

export interface DesignResult {
  design: Design;
  label: string;
  load: LoadResult;
  /** 2xx answers: buyers told they won (or, for the enqueue design, told they are queued). */
  accepted: number;
  /** Seconds from the last answer until every buyer was decided and every order was a row. */
  settleS: number;
  outcome: Outcome | null;
  correct: boolean | null;
  loadAvg: number;
  rounds: number[];
}

function correct(design: Design, stock: number, buyers: number, r: LoadResult, o: Outcome | null): boolean | null {
  if (!o) return null;
  const wins = Math.min(stock, buyers);
  const won2xx = Object.entries(r.statuses)
    .filter(([s]) => s.startsWith('2'))
    .reduce((n, [, v]) => n + v, 0);
  // Every buyer told "you won" has an order (the enqueue design only says "queued"); none oversold.
  const answeredWinsHaveOrders = design === 'enqueue' || won2xx <= o.orders;
  return (
    o.units === wins && o.units <= stock && o.left === stock - o.units && o.maxPerUser <= 1 && answeredWinsHaveOrders
  );
}

/** One design, one run: fresh stack, warm-up on a separate sale, then the measured sale. */
export async function runOnce(
  design: Design,
  pg: BenchPostgres,
  s: Omit<PurchaseSettings, 'rounds'> & { holdMs?: number },
  productEnv?: Record<string, string>,
): Promise<DesignResult> {
  const stack = await startStack(design, pg, { productEnv });
  try {
    const url = (sale: string) => `http://127.0.0.1:${stack.port}/api/sales/${sale}/purchases`;
    if (s.warmupBuyers > 0) {
      await stack.createSale('warmup', Math.ceil(s.warmupBuyers / 2));
      await runLoad(url('warmup'), { buyers: s.warmupBuyers, connections: s.connections, prefix: 'warm-', watch: [] });
      await stack.settle('warmup');
    }
    await stack.createSale('sale', s.stock);
    const loadAvg = Math.round(loadavg()[0]! * 100) / 100;
    const load = await runLoad(url('sale'), {
      buyers: s.buyers,
      connections: s.connections,
      prefix: 'buyer-',
      watch: stack.watch,
      holdMs: s.holdMs,
    });
    const t0 = performance.now();
    await stack.settle('sale');
    const settleS = Math.round((performance.now() - t0) / 100) / 10;
    const o = await stack.outcome('sale');
    const accepted = Object.entries(load.statuses)
      .filter(([st]) => st.startsWith('2'))
      .reduce((n, [, v]) => n + v, 0);
    return {
      design,
      label: DESIGNS[design],
      load,
      accepted,
      settleS,
      outcome: o,
      correct: correct(design, s.stock, s.buyers, load, o),
      loadAvg,
      rounds: [load.rps],
    };
  } finally {
    await stack.stop();
  }
}

/** Every design, `rounds` times interleaved; per design the run with the median throughput. */
export async function runPurchase(pg: BenchPostgres, s: PurchaseSettings, designs: Design[]): Promise<DesignResult[]> {
  const runs = new Map<Design, DesignResult[]>(designs.map((d) => [d, []]));
  for (let round = 1; round <= s.rounds; round++) {
    for (const design of designs) {
      progress(
        `purchase round ${round}/${s.rounds}: ${design}, stock ${s.stock}, ${s.buyers} buyers, concurrency ${s.connections}`,
      );
      const r = await runOnce(design, pg, s);
      progress(`  ${r.load.rps} req/s, p99 ${r.load.latencyMs.p99} ms, settle ${r.settleS} s, correct ${r.correct}`);
      runs.get(design)!.push(r);
    }
  }
  return designs.map((d) => {
    const all = runs.get(d)!;
    const sorted = [...all].sort((a, b) => a.load.rps - b.load.rps);
    const median = sorted[Math.floor((sorted.length - 1) / 2)]!;
    return {
      ...median,
      rounds: all.map((r) => r.load.rps),
      correct: all.every((r) => r.correct !== false) && median.correct,
    };
  });
}
