// `npm test`: starts one throwaway embedded Postgres for the whole run, migrates one template
// database in it (each test file clones it and starts its own redis-server), then runs node's test
// runner over test/reliability/ and test/ (or the files and directories given), longest files first,
// and closes with each file's duration and the reliability figures.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startPostgres } from '../tools/local-stack.js';
import type { Summary } from './support/scenario.js';
import { createTemplate, TEMPLATE_ENV } from './support/template.js';

/**
 * The files that took longest in the last measured runs (the table at the end of a run), in that
 * order, then the others by name: started last, a long file leaves the other lane idle at the end.
 */
const LONGEST = [
  // Seconds each took in the last whole run (two lanes) on the shared 2-core machine.
  'test/reliability/redis-cluster.test.ts', // 80
  'test/page.test.ts', // 77
  'test/reliability/network-and-clock.test.ts', // 56
  'test/lifecycle.test.ts', // 50
  'test/reliability/waiting-room.test.ts', // 49
  'test/reliability/draw.test.ts', // 45
  'test/reliability/redis-sentinel.test.ts', // 45
  'test/reliability/server-restarts.test.ts', // 43
  'test/admin-page.test.ts', // 40
  'test/pm2.test.ts', // 37
  'test/reliability/races.test.ts', // 34
  'test/draw.test.ts', // 34
  'test/pipeline.test.ts', // 30
  'test/reliability/master-lost.test.ts', // 28
  'test/clock.test.ts', // 25
  'test/startup.test.ts', // 24
  'test/reliability/crashes.test.ts', // 23
  'test/settle.test.ts', // 21
  'test/reliability/redis-cluster-live-migration.test.ts', // 21
  'test/variant-pages.test.ts', // 19
];

function longestFirst(list: string[]): string[] {
  const rank = (f: string) => {
    const i = LONGEST.indexOf(f.replace(/^\.\//, ''));
    return i < 0 ? LONGEST.length : i;
  };
  return [...list].sort((a, b) => rank(a) - rank(b));
}

const only = process.argv.slice(2);
const testsIn = (dir: string) =>
  readdirSync(dir)
    .filter((f) => f.endsWith('.test.ts'))
    .sort()
    .map((f) => join(dir, f));
const files = longestFirst(
  (only.length > 0 ? only : ['test/reliability', 'test']).flatMap((a) =>
    statSync(a).isDirectory() ? testsIn(a) : [a],
  ),
);
// Three files at a time on the 2-core machine this suite is timed on: many files spend seconds
// waiting (payment windows, failovers, restarts), and a third lane fills those gaps.
const concurrency = Number(process.env.TEST_CONCURRENCY) || 3;
const dir = mkdtempSync(join(tmpdir(), 'flashsale-test-pg-'));
// Each reliability scenario leaves its figures here; the closing note prints them.
const reportDir = mkdtempSync(join(tmpdir(), 'flashsale-test-report-'));
// fsync off: a throwaway server; no test here crashes the machine, only Postgres processes.
const pg = await startPostgres(dir, { persistent: false, fsync: false });
let code = 1;
try {
  const template = 'flashsale_template';
  await createTemplate(pg.url, template);
  code = await new Promise<number>((resolve) => {
    // A test that hangs fails after 5 minutes (the longest scenario takes about one) instead of
    // holding the run until CI's limit.
    const lanes = fileURLToPath(new URL('./support/lanes.ts', import.meta.url));
    const child = spawn(process.execPath, ['--import', 'tsx', '--test-timeout=300000', lanes, ...files], {
      stdio: 'inherit',
      env: {
        ...process.env,
        FLASHSALE_TEST_PG: pg.url,
        [TEMPLATE_ENV]: template,
        FLASHSALE_REPORT_DIR: reportDir,
        FLASHSALE_TEST_FILES: String(files.length),
        FLASHSALE_TEST_CONCURRENCY: String(concurrency),
      },
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
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(width[i]!) : c.padStart(width[i]!))).join('  ');
  console.log(
    `\nReliability scenarios (TEST_SEED=<seed> reproduces one's fault schedule):\n${[head, ...table].map(line).join('\n')}`,
  );
  for (const r of rows)
    console.log(
      `  ${r.scenario}: ${r.faultKinds}${r.answers ? `; answers by status ${JSON.stringify(r.answers)}` : ''}${r.events ? `; events received ${JSON.stringify(r.events)}` : ''}`,
    );
}
