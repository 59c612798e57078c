// Comparison 9: the whole machine as users run it. The product under PM2 from ecosystem.config.js
// (API_INSTANCES = cores in cluster mode, plus the order writer, the expiry listener and the
// replay) against the hello-world ceiling run the same way (bench/baselines/hello.config.js), each
// under a PM2 daemon of its own, on a sold-out crowd and on a crowd where every buyer wins. The
// other comparisons run one process per server; this one shows what the cores serve together.
import { cpus } from 'node:os';
import type { BenchPostgres } from './harness.js';
import { runPurchase, type DesignResult, type PurchaseSettings } from './purchase.js';
import { roundRatio, table } from './report.js';

export interface WholeMachineCase {
  settings: PurchaseSettings;
  designs: DesignResult[];
}
export interface WholeMachineResults {
  cores: number;
  crowd: WholeMachineCase;
  allWin: WholeMachineCase;
}

export async function runWholeMachine(
  pg: BenchPostgres,
  crowd: PurchaseSettings,
  allWin: PurchaseSettings,
): Promise<WholeMachineResults> {
  const designs = ['pm2-hello', 'pm2-flashsale'] as const;
  return {
    cores: cpus().length,
    crowd: { settings: crowd, designs: await runPurchase(pg, crowd, [...designs]) },
    allWin: { settings: allWin, designs: await runPurchase(pg, allWin, [...designs]) },
  };
}

/** The product's throughput over the PM2 ceiling's, round by round (undefined when either is missing). */
export function ceilingRatio(
  c: WholeMachineCase,
): { median: number; each: number[]; product: DesignResult; hello: DesignResult } | undefined {
  const product = c.designs.find((d) => d.design === 'pm2-flashsale');
  const hello = c.designs.find((d) => d.design === 'pm2-hello');
  return product && hello ? { ...roundRatio(product, hello), product, hello } : undefined;
}

const n = (v: number) => Math.round(v).toLocaleString('en-US');
const pct = (v: number) => `${Math.round(v * 100)}%`;
/** CPU microseconds the whole machine spent per answer (every process: servers, wrk, PM2, other work). */
const machineUs = (d: DesignResult) =>
  d.load.machineCpuPct === undefined ? undefined : Math.round((d.load.machineCpuPct / 100 / d.load.rps) * 1e6);

function caseTable(c: WholeMachineCase): string {
  const r = ceilingRatio(c);
  return table(
    [
      'design',
      'req/s',
      'vs PM2 ceiling',
      'p50 ms',
      'p99 ms',
      'max ms',
      '2xx',
      'refused',
      'orders',
      'correct',
      'settle s',
      'rounds req/s',
      'machine CPU %',
      'machine CPU µs / answer',
      'CPU % of a core / peak RSS',
    ],
    c.designs.map((d) => [
      d.label,
      n(d.load.rps),
      d.design === 'pm2-flashsale' && r ? `${pct(r.median)} (rounds ${r.each.map(pct).join(', ')})` : '',
      d.load.latencyMs.p50,
      d.load.latencyMs.p99,
      d.load.latencyMs.max,
      n(d.accepted),
      n(d.load.answered - d.accepted),
      d.outcome ? n(d.outcome.orders) : '-',
      d.correct === null ? '-' : d.correct ? 'yes' : '**no**',
      d.settleS,
      d.rounds.map(n).join(' / '),
      d.load.machineCpuPct ?? '-',
      machineUs(d) ?? '-',
      d.load.procs.map((p) => `${p.name} ${p.cpuPct}% / ${p.rssMaxMb} MB`).join(', '),
    ]),
  );
}

/** Section 9 of BENCHMARKS.md. */
export function wholeMachineSection(w: WholeMachineResults, mode: 'quick' | 'full'): string {
  const c = w.crowd.settings;
  const a = w.allWin.settings;
  const crowd = ceilingRatio(w.crowd);
  const allWin = ceilingRatio(w.allWin);
  const cpu = (d?: DesignResult) => d?.load.machineCpuPct ?? '?';
  const out = [
    '## 9. The whole machine under PM2',
    '',
    `\`bench/whole-machine.ts\` (\`npm run bench -- ${mode === 'quick' ? '--quick ' : ''}--only machine\`): the deployment as docs/operations.md runs it, \`pm2 start ecosystem.config.js\` with \`API_INSTANCES=${w.cores}\` (one per core: ${w.cores} API instances in cluster mode, the order writer, the expiry listener and the replay, compiled JavaScript), pointed at the bench's Postgres and a fresh \`redis-server\`, with the bench's secrets and \`AUTH_MODE=trusted-header\` as in section 1. The ceiling is run the same way: the hello-world server of section 1 under PM2 in cluster mode, ${w.cores} instances (\`bench/baselines/hello.config.js\`). Each run has a PM2 daemon of its own (a temporary \`PM2_HOME\`, killed after the run); in cluster mode that daemon is the primary that accepts the connections and hands them to the instances, so its CPU is listed too. wrk as in section 1; ${c.rounds} round(s) per case, the designs interleaved; the median round is shown, every round listed, the ratio taken round by round. "machine CPU %": the whole machine's busy time from \`/proc/stat\` during the crowd, % of one core (${w.cores * 100}% is every core busy), which counts wrk and any other work on the machine too.`,
    '',
    `**Sold-out crowd:** stock ${n(c.stock)}, ${n(c.buyers)} buyers, concurrency ${c.connections}, a warm-up of ${n(c.warmupBuyers)} buyers first.`,
    '',
    caseTable(w.crowd),
    '',
    `**Every buyer wins:** stock = buyers = ${n(a.buyers)}, concurrency ${a.connections}, a warm-up of ${n(a.warmupBuyers)} buyers first.`,
    '',
    caseTable(w.allWin),
    '',
  ];
  if (crowd && allWin) {
    const us = (d: DesignResult) => machineUs(d) ?? '?';
    out.push(
      `The two-core box served a sold-out crowd at ${pct(crowd.median)} of what it serves a hello-world route under the same PM2 deployment (rounds ${crowd.each.map(pct).join(', ')}; p99 ${crowd.product.load.latencyMs.p99} ms), and buyers who all win at ${pct(allWin.median)} (rounds ${allWin.each.map(pct).join(', ')}; p99 ${allWin.product.load.latencyMs.p99} ms). The machine was ${cpu(crowd.product)}% and ${cpu(allWin.product)}% busy (the ceiling: ${cpu(crowd.hello)}% and ${cpu(allWin.hello)}%), so the ratio is what one answer costs the whole machine: ${us(crowd.hello)} and ${us(allWin.hello)} µs of CPU per answer for the ceiling, ${us(crowd.product)} µs per sold-out answer and ${us(allWin.product)} µs per win. The ceiling spends it in its instances, wrk and the kernel; a win adds the product's request work in the API instances, the purchase script in Redis, the writer's batches into Postgres and the expiry keys, all on the same cores (per process in the tables). Ratios hold within this run only; absolute figures move with the machine's other work.`,
      '',
    );
  }
  return out.join('\n');
}
