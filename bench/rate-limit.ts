// What the purchase rate limits cost the purchase path: the product as in comparison 1, with the
// limits off, per buyer only, and per buyer plus per address, interleaved round by round (the order
// reversed every other round), on a sold-out crowd and on a crowd where every buyer wins. Every buyer
// is distinct and the per-address maximum is out of reach, so nothing is refused: what is measured
// is the checks alone. The per-buyer count is purchase.lua's, in the purchase's own round trip; the
// per-address one is @fastify/rate-limit's script call (shared/http/plugins/rate-limit.ts).
import type { BenchPostgres } from './harness.js';
import { progress } from './harness.js';
import { runOnce, type DesignResult, type PurchaseSettings } from './purchase.js';
import { roundRatio, table } from './report.js';

const VARIANTS = [
  { name: 'off', label: 'no limits', env: { PURCHASE_RATE_PER_BUYER: '0', PURCHASE_RATE_PER_IP: '0' } },
  { name: 'buyer', label: 'per buyer (10 per 1 s)', env: { PURCHASE_RATE_PER_BUYER: '10', PURCHASE_RATE_PER_IP: '0' } },
  // wrk is one address: a maximum it never reaches, so the check runs on every request and refuses none.
  {
    name: 'buyer+ip',
    label: 'per buyer + per address',
    env: { PURCHASE_RATE_PER_BUYER: '10', PURCHASE_RATE_PER_IP: '1000000000' },
  },
];

export interface RateLimitRun {
  variant: string;
  label: string;
  /** The median round by throughput. */
  median: DesignResult;
  rounds: number[];
  p99Rounds: number[];
  correct: boolean;
}

export interface RateLimitResults {
  crowd: { settings: PurchaseSettings; runs: RateLimitRun[] };
  allWin: { settings: PurchaseSettings; runs: RateLimitRun[] };
}

async function runCrowd(pg: BenchPostgres, s: PurchaseSettings, what: string): Promise<RateLimitRun[]> {
  const runs = new Map<string, DesignResult[]>(VARIANTS.map((v) => [v.name, []]));
  for (let round = 1; round <= s.rounds; round++) {
    const order = round % 2 ? VARIANTS : [...VARIANTS].reverse();
    for (const v of order) {
      progress(`rate limits, ${what}, round ${round}/${s.rounds}: ${v.label}`);
      const r = await runOnce('flashsale', pg, s, v.env);
      progress(`  ${r.load.rps} req/s, p99 ${r.load.latencyMs.p99} ms, correct ${r.correct}`);
      runs.get(v.name)!.push(r);
    }
  }
  return VARIANTS.map((v) => {
    const all = runs.get(v.name)!;
    const median = [...all].sort((a, b) => a.load.rps - b.load.rps)[Math.floor((all.length - 1) / 2)]!;
    return {
      variant: v.name,
      label: v.label,
      median,
      rounds: all.map((r) => r.load.rps),
      p99Rounds: all.map((r) => r.load.latencyMs.p99),
      correct: all.every((r) => r.correct !== false),
    };
  });
}

export async function runRateLimit(
  pg: BenchPostgres,
  crowd: PurchaseSettings,
  allWin: PurchaseSettings,
): Promise<RateLimitResults> {
  return {
    crowd: { settings: crowd, runs: await runCrowd(pg, crowd, 'sold-out crowd') },
    allWin: { settings: allWin, runs: await runCrowd(pg, allWin, 'every buyer wins') },
  };
}

const n = (v: number) => Math.round(v).toLocaleString('en-US');

function runsTable(runs: RateLimitRun[]): string {
  const off = runs.find((r) => r.variant === 'off')!;
  const cpu = (r: RateLimitRun, name: string) => r.median.load.procs.find((p) => p.name === name)?.cpuPct ?? 0;
  return table(
    [
      'limits',
      'req/s',
      'vs no limits',
      'p50 ms',
      'p99 ms',
      'rounds req/s',
      'rounds p99 ms',
      'API / Redis CPU %',
      'correct',
    ],
    runs.map((r) => {
      const ratio = roundRatio(r, off);
      return [
        r.label,
        n(r.median.load.rps),
        r === off
          ? '1.00x'
          : `${ratio.median.toFixed(2)}x (rounds ${ratio.each.map((v) => `${v.toFixed(2)}x`).join(', ')})`,
        r.median.load.latencyMs.p50,
        r.median.load.latencyMs.p99,
        r.rounds.map(n).join(' / '),
        r.p99Rounds.join(' / '),
        `${cpu(r, 'server')} / ${cpu(r, 'redis')}`,
        r.correct ? 'yes' : '**no**',
      ];
    }),
  );
}

/** Section 7 of BENCHMARKS.md. */
export function rateLimitSection(r: RateLimitResults, mode: 'quick' | 'full'): string {
  const c = r.crowd.settings;
  const a = r.allWin.settings;
  return [
    '## 7. Purchase rate limits',
    '',
    `\`bench/rate-limit.ts\` (\`npm run bench -- ${mode === 'quick' ? '--quick ' : ''}--only ratelimit\`), the product's processes as in section 1 (\`AUTH_MODE=trusted-header\`), ${c.rounds} round(s) per setting with the settings' order reversed every other round; the median round is shown, every round listed, ratios taken round by round. Counters in the product's Redis: the per-buyer count is kept by \`purchase.lua\` in the purchase's own call (an INCR, and a PEXPIRE on a buyer's first purchase in a window); the per-address count by \`@fastify/rate-limit\`'s Redis store, a script call of its own per counted purchase. Every request is one purchase by a distinct buyer and the per-address maximum is never reached, so nothing is refused: the figures are the cost of the checks.`,
    '',
    `**Sold-out crowd:** stock ${n(c.stock)}, ${n(c.buyers)} buyers, concurrency ${c.connections}. Once an API process knows the sale sold out it answers from memory before either count, so the limits cost only while stock sells.`,
    '',
    runsTable(r.crowd.runs),
    '',
    `**Every buyer wins:** stock = buyers = ${n(a.buyers)}, concurrency ${a.connections}: every request is counted and reaches the purchase script.`,
    '',
    runsTable(r.allWin.runs),
    '',
  ].join('\n');
}
