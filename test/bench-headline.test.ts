// The benchmark headline of README.md and docs/benchmarks.md is the one bench/headline.ts renders
// from the committed results: new results committed without `npm run docs:bench`, or a figure
// edited by hand, fail here. The renderer's verdicts are checked against figures on either side
// of their targets, so a missed target cannot read as met.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import type { MemoryResult } from '../bench/cost.js';
import { HEADLINE_DOCS, headlineTable, loadResults, withHeadline, type StoredResults } from '../bench/headline.js';
import type { LoadResult } from '../bench/load.js';
import type { DesignResult, PurchaseSettings } from '../bench/purchase.js';
import type { BenchResults } from '../bench/report.js';
import type { Design } from '../bench/stacks.js';
import type { WriterResult } from '../bench/writer.js';

const machine = {
  cpu: 'test',
  cores: 2,
  memoryGb: 1,
  kernel: 'test',
  os: 'test',
  node: 'test',
  versions: {},
  loadAvgAtStart: [0, 0, 0],
};
const settings: PurchaseSettings = { stock: 10, buyers: 100, connections: 500, rounds: 1, warmupBuyers: 0 };
const load = (rps: number, p99: number): LoadResult => ({
  buyers: 100,
  connections: 500,
  answered: 100,
  seconds: 1,
  rps,
  statuses: {},
  errors: { connect: 0, read: 0, write: 0, timeout: 0 },
  latencyMs: { p50: p99 / 2, p90: p99, p99, p999: p99, max: p99, mean: p99 / 2 },
  procs: [],
});
const design = (d: Design, rps: number, p99: number): DesignResult => ({
  design: d,
  label: d,
  load: load(rps, p99),
  accepted: 100,
  settleS: 0,
  outcome: null,
  correct: true,
  loadAvg: 0,
  rounds: [rps],
});
/** A sold-out crowd: the hello-world route and the product, whose req/s and p99 the caller picks. */
const purchase = (hello: number, flashsale: number, p99 = 40): BenchResults['purchase'] => ({
  settings,
  crowd: [design('hello', hello, 5), design('flashsale', flashsale, p99)],
  allWin: [],
  allWinSettings: settings,
});
const writer = (perSecond: number): WriterResult => ({
  label: 'batch 1000',
  batchSize: 1000,
  concurrency: 2,
  orders: 1000,
  seconds: 1,
  perSecond,
  expiryKeys: 1000,
  correct: true,
  procs: [],
  rounds: [perSecond],
  loadAvg: 0,
});
const memory = (bytes: number, withEnd: boolean): MemoryResult => ({
  winners: 100,
  withEnd,
  bytesPerQueuedWinner: bytes,
  bytesPerPendingOrder: bytes,
  keys: {},
});
const run = (mode: 'quick' | 'full', at: string, parts: Partial<BenchResults>): BenchResults => ({
  mode,
  at,
  seconds: 1,
  machine,
  ...parts,
});
const stored = (bench: StoredResults['bench']): StoredResults => ({ bench });

/** The cells of the one row whose first cell starts with `what`. */
function row(table: string, what: string): string[] {
  const rows = table.split('\n').filter((line) => line.startsWith(`| ${what}`));
  assert.equal(rows.length, 1, `one row for ${what} in\n${table}`);
  return rows[0]!.split(' | ').map((cell) => cell.replace(/^\| | \|$/g, ''));
}
const RESULT = 3;
const RUN = 4;
const CEILING = 5;

test('bench headline: README.md and docs/benchmarks.md hold the table the committed results render (npm run docs:bench)', () => {
  const headline = headlineTable(loadResults());
  for (const file of HEADLINE_DOCS) {
    const doc = readFileSync(file, 'utf8');
    assert.equal(doc, withHeadline(doc, headline), `${file} differs from bench/results/*.json: run npm run docs:bench`);
    assert.ok(doc.includes(`${headline}\n`), file);
  }
  // Every target issue 22 set is in it, each with a verdict.
  for (const what of [
    'purchase throughput, sold-out crowd',
    'purchase throughput, every buyer wins',
    'purchase p99 at concurrency 500, sold-out crowd',
    'purchase p99 at concurrency 500, every buyer wins',
    'order writer drain',
    'Redis memory per pending order',
  ]) {
    assert.match(row(headline, what)[RESULT]!, /^(met|\*\*missed\*\*)$/, what);
  }
});

test('bench headline: a figure short of its target reads missed, one past it met, at least and at most', () => {
  const at = '2026-01-02T10:00:00.000Z';
  const slow = headlineTable(
    stored({
      quick: run('quick', at, {
        purchase: purchase(10_000, 8_000, 60),
        writer: [writer(59_000)],
        cost: { memory: memory(300, false), memoryWithEnd: memory(401, true), growth: [] },
      }),
    }),
  );
  const fast = headlineTable(
    stored({
      quick: run('quick', at, {
        purchase: purchase(10_000, 9_000, 50),
        writer: [writer(61_000)],
        cost: { memory: memory(300, false), memoryWithEnd: memory(400, true), growth: [] },
      }),
    }),
  );

  assert.deepEqual(row(slow, 'purchase throughput, sold-out crowd').slice(1, 4), [
    '80% (rounds 80%; median req/s 8,000 / 10,000)',
    '>= 85%',
    '**missed**',
  ]);
  assert.deepEqual(row(fast, 'purchase throughput, sold-out crowd').slice(1, 4), [
    '90% (rounds 90%; median req/s 9,000 / 10,000)',
    '>= 85%',
    'met',
  ]);
  assert.deepEqual(row(slow, 'purchase p99 at concurrency 500, sold-out crowd').slice(1, 4), [
    '60 ms (p50 30 ms)',
    '<= 50 ms',
    '**missed**',
  ]);
  assert.deepEqual(row(fast, 'purchase p99 at concurrency 500, sold-out crowd').slice(1, 4), [
    '50 ms (p50 25 ms)',
    '<= 50 ms',
    'met',
  ]);
  assert.deepEqual(row(slow, 'order writer drain').slice(1, 4), [
    '59,000 orders/s',
    '>= 60,000 orders/s',
    '**missed**',
  ]);
  assert.deepEqual(row(fast, 'order writer drain').slice(1, 4), ['61,000 orders/s', '>= 60,000 orders/s', 'met']);
  // The target is for a sale with an end: 300 B without one does not make 401 B with one pass.
  assert.equal(row(slow, 'Redis memory per pending order')[RESULT], '**missed**');
  assert.equal(row(fast, 'Redis memory per pending order')[RESULT], 'met');
});

test("bench headline: each row comes from the newest run that measured it, beside that run's hello-world ceiling", () => {
  // The full run measured the purchase on the 2nd; the quick run's purchase is older (the 1st), but its writer
  // was run again with --only on the 3rd.
  const full = run('full', '2026-01-02T10:00:00.000Z', {
    purchase: purchase(40_000, 36_000),
    writer: [writer(70_000)],
  });
  const quick = {
    ...run('quick', '2026-01-01T10:00:00.000Z', { purchase: purchase(5_000, 4_000), writer: [writer(30_000)] }),
    reruns: [{ parts: ['writer'], at: '2026-01-03T10:00:00.000Z', seconds: 1, loadAvgAtStart: [0, 0, 0] }],
  };
  const table = headlineTable(stored({ full, quick }));

  const crowd = row(table, 'purchase throughput, sold-out crowd');
  assert.equal(crowd[1], '90% (rounds 90%; median req/s 36,000 / 40,000)');
  assert.equal(crowd[RUN], 'full run, 2026-01-02');
  assert.equal(crowd[CEILING], '40,000 req/s');
  const drain = row(table, 'order writer drain');
  assert.equal(drain[1], '30,000 orders/s');
  assert.equal(drain[RESULT], '**missed**');
  assert.equal(drain[RUN], 'quick run, 2026-01-03');
  // That run's ceiling was taken with its purchase part, on another day: dated.
  assert.equal(drain[CEILING], '5,000 req/s (2026-01-01)');
});

test('bench headline: a document that lost its markers is refused, not written around', () => {
  // From the generated text, so that this checks the check whatever state the committed file is in.
  const headline = headlineTable(loadResults());
  const doc = withHeadline(readFileSync(HEADLINE_DOCS[0]!, 'utf8'), headline);
  assert.throws(() => withHeadline(doc.replace('<!-- bench-headline:end -->', ''), '| x |'), /lost its markers/);
  // A stale block is replaced whole, and the text around it kept.
  const edited = withHeadline(doc, '| stale |');
  assert.notEqual(edited, doc);
  assert.equal(withHeadline(edited, headline), doc);
});
