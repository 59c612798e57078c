// What the proof-of-work defence (shared/purchase/challenge.ts) costs: on the purchase path, the purchase
// token's check (one HMAC, every purchase of a `pow` sale); once per purchase, issuing a challenge
// and exchanging its solution for a token (one SET NX in Redis); and on the buyer's side, solving a challenge of the default
// complexity (altcha-lib's solver in Node, one thread: the widget runs the same hashes in Web
// Workers). One process against a local redis-server (the signing key lives there, read every 2 s),
// rounds interleaved, median shown.
//
//   npm run bench:challenge [-- --rounds 3 --seconds 1]
// Results: stdout (markdown), bench/results/challenge.json.
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { solveChallenge, type Challenge } from 'altcha-lib';
import { deriveKey } from 'altcha-lib/algorithms/sha';
import { Challenges } from '../shared/purchase/challenge.js';
import { createRedis } from '../shared/redis/connect.js';
import { DEFAULT_COMPLEXITY } from '../shared/sales/definition.js';
import { parseSaleInput } from '../shared/sales/sale.js';
import { BENCH_PRICE } from './harness.js';
import { startRedis } from '../tools/local-stack.js';
import { challengeTable, type ChallengeResults } from './document.js';
import { machine } from './machine.js';

const { values: flags } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '1' },
    solves: { type: 'string', default: '20' },
  },
});
const rounds = Number(flags.rounds);
const seconds = Number(flags.seconds);
const solves = Number(flags.solves);
if (![rounds, seconds, solves].every((n) => Number.isFinite(n) && n > 0))
  throw new Error('--rounds, --seconds and --solves must be positive numbers');

const dir = mkdtempSync(join(tmpdir(), 'flashsale-bench-challenge-'));
const server = await startRedis(dir);
const redis = createRedis(server.url);
try {
  const challenges = new Challenges(redis);
  const sale = parseSaleInput({ id: 'bench-pow', name: 'bench', stock: 1, ...BENCH_PRICE, challenge: 'pow' });
  const solved = async (user: string) => {
    const challenge = await challenges.challenge(sale, user);
    const solution = await solveChallenge({ challenge: challenge as Challenge, deriveKey });
    return Buffer.from(JSON.stringify({ challenge, solution })).toString('base64');
  };
  const { token } = await challenges.exchange(sale, 'bench-buyer', await solved('bench-buyer'));
  // A solution earns one token, so each exchange takes a solution of its own, made ahead for a sale
  // of complexity 1: verifying costs the same at any complexity (one HMAC of the derived key).
  // Enough for the warm-up and every round at up to 10,000 exchanges a second.
  const easy = { ...sale, challengeComplexity: 1 };
  const payloads: string[] = [];
  for (let i = 0; i < 2000 + rounds * seconds * 10_000; i++) {
    const challenge = await challenges.challenge(easy, `b${i % 50}`);
    payloads.push(
      Buffer.from(
        JSON.stringify({ challenge, solution: await solveChallenge({ challenge: challenge as Challenge, deriveKey }) }),
      ).toString('base64'),
    );
  }
  let used = 0;
  const unused = () => {
    if (used === payloads.length) throw new Error('every solution made ahead is used: make more');
    return { user: `b${used % 50}`, payload: payloads[used++]! };
  };

  const cases = {
    check: {
      what: 'purchase token check (every purchase)',
      run: () => challenges.check(sale.id, 'bench-buyer', token),
    },
    issue: { what: 'issue a challenge (once per purchase)', run: () => challenges.challenge(sale, 'bench-buyer') },
    exchange: {
      what: 'verify a solution, mark it used, sign a token (once per purchase)',
      run: (_i: number) => {
        const { user, payload } = unused();
        return challenges.exchange(easy, user, payload, 1);
      },
    },
  };
  type Name = keyof typeof cases;
  const measure = async (name: Name) => {
    let n = 0;
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    while (performance.now() - t0 < seconds * 1000) await cases[name].run(n++);
    const cpu = process.cpuUsage(cpu0);
    return {
      perSec: Math.round((n / (performance.now() - t0)) * 1000),
      cpuUsPerOp: Math.round(((cpu.user + cpu.system) / n) * 100) / 100,
    };
  };
  for (const name of Object.keys(cases) as Name[]) for (let i = 0; i < 2000; i++) await cases[name].run(i);
  const raw: Record<Name, { perSec: number; cpuUsPerOp: number }[]> = { check: [], issue: [], exchange: [] };
  for (let r = 0; r < rounds; r++) {
    for (const name of Object.keys(cases) as Name[]) raw[name].push(await measure(name));
    process.stderr.write(`round ${r + 1}/${rounds} done\n`);
  }
  const solveMs: number[] = [];
  for (let i = 0; i < solves; i++) {
    const t0 = performance.now();
    await solved(`s${i}`);
    solveMs.push(Math.round(performance.now() - t0));
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const out: ChallengeResults = {
    at: new Date().toISOString(),
    settings: { rounds, secondsPerRound: seconds, complexity: DEFAULT_COMPLEXITY },
    machine: machine({}),
    results: (Object.keys(cases) as Name[]).map((name) => ({
      name,
      what: cases[name].what,
      perSec: median(raw[name].map((m) => m.perSec)),
      cpuUsPerOp: median(raw[name].map((m) => m.cpuUsPerOp)),
      rounds: raw[name],
    })),
    solveMs: { median: median(solveMs), max: Math.max(...solveMs), all: solveMs },
  };
  mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
  writeFileSync(new URL('./results/challenge.json', import.meta.url), `${JSON.stringify(out, null, 2)}\n`);
  console.log(challengeTable(out));
} finally {
  redis.disconnect();
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
}
