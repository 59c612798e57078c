// `npm test`: starts one throwaway embedded Postgres for the whole run (each test file creates its
// own database in it and starts its own redis-server), then runs node's test runner over
// test/reliability/ and test/ (or the files and directories given), and closes with the reliability figures.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startPostgres } from '../tools/local-stack.js';
import type { Summary } from './support/scenario.js';

const only = process.argv.slice(2);
const testsIn = (dir: string) => readdirSync(dir).filter((f) => f.endsWith('.test.ts')).sort().map((f) => join(dir, f));
// The reliability scenarios first: the longest files, so that the two lanes end together rather
// than one waiting out a long scenario started last.
const files = (only.length > 0 ? only : ['test/reliability', 'test']).flatMap((a) => (statSync(a).isDirectory() ? testsIn(a) : [a]));
// Node's usual reporter on stdout (spec on a terminal, TAP otherwise), and on stderr the progress:
// files done of the total and the time so far, as each file ends (support/progress.mjs).
const reporters = [
  '--test-reporter', process.stdout.isTTY ? 'spec' : 'tap', '--test-reporter-destination', 'stdout',
  '--test-reporter', fileURLToPath(new URL('./support/progress.mjs', import.meta.url)), '--test-reporter-destination', 'stderr',
];
const dir = mkdtempSync(join(tmpdir(), 'flashsale-test-pg-'));
// Each reliability scenario leaves its figures here; the closing note prints them.
const reportDir = mkdtempSync(join(tmpdir(), 'flashsale-test-report-'));
// fsync off: a throwaway server; no test here crashes the machine, only Postgres processes.
const pg = await startPostgres(dir, { persistent: false, fsync: false });
let code = 1;
try {
  code = await new Promise<number>((resolve) => {
    // A test that hangs fails after 5 minutes (the longest scenario takes about one) instead of
    // holding the run until CI's limit.
    const child = spawn(process.execPath, ['--import', 'tsx', '--test', '--test-concurrency=2', '--test-timeout=300000', ...reporters, ...files], {
      stdio: 'inherit',
      env: { ...process.env, FLASHSALE_TEST_PG: pg.url, FLASHSALE_REPORT_DIR: reportDir, FLASHSALE_TEST_FILES: String(files.length) },
    });
    child.on('exit', (c, signal) => resolve(c ?? (signal ? 1 : 0)));
  });
  closingNote(readdirSync(reportDir).map((f) => JSON.parse(readFileSync(join(reportDir, f), 'utf8')) as Summary));
} finally {
  await pg.stop().catch(() => {});
  rmSync(dir, { recursive: true, force: true });
  rmSync(reportDir, { recursive: true, force: true });
}
process.exit(code);

function closingNote(rows: Summary[]): void {
  if (rows.length === 0) return;
  rows.sort((a, b) => a.scenario.localeCompare(b.scenario));
  const head = ['scenario', 'seed', 'buyers', 'orders', 'faults', 'checks', 'violations'];
  const table = rows.map((r) => [r.scenario, r.seed, r.buyers, r.orders, r.faults, r.checks, r.violations].map(String));
  const total = (i: number) => String(table.reduce((n, row) => n + Number(row[i]), 0));
  table.push(['total', '', total(2), total(3), total(4), total(5), total(6)]);
  const width = head.map((h, i) => Math.max(h.length, ...table.map((row) => row[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(width[i]!) : c.padStart(width[i]!))).join('  ');
  console.log(`\nReliability scenarios (TEST_SEED=<seed> reproduces one's fault schedule):\n${[head, ...table].map(line).join('\n')}`);
  for (const r of rows) console.log(`  ${r.scenario}: ${r.faultKinds}${r.answers ? `; answers by status ${JSON.stringify(r.answers)}` : ''}`);
}
