// Runs the test files given, in the order given, `FLASHSALE_TEST_CONCURRENCY` at a time: test/run.ts
// starts it. `node --test` sorts its files by name, so the longest could start last and leave one
// lane running alone; node:test's run() keeps our order. Each file runs in its own process, which
// inherits this one's flags (tsx, --test-timeout).
import { run } from 'node:test';
import { spec, tap } from 'node:test/reporters';
import { resolve } from 'node:path';
import { finished } from 'node:stream/promises';

type Reporter = (source: AsyncIterable<unknown>) => AsyncGenerator<string>;
const { default: progress } = (await import(new URL('./progress.mjs', import.meta.url).href)) as { default: Reporter };

const files = process.argv.slice(2).map((f) => resolve(f));
const stream = run({ files, concurrency: Number(process.env.FLASHSALE_TEST_CONCURRENCY) || 3 });
let failed = false;
// A todo test may fail without failing the run, as under `node --test`.
stream.on('test:fail', (data: { todo?: string | boolean }) => {
  if (data.todo === undefined || data.todo === false) failed = true;
});
// Node's usual reporter on stdout (spec on a terminal, TAP otherwise), and on stderr the progress.
const reports = [
  [stream.compose(process.stdout.isTTY ? new spec() : tap), process.stdout],
  [stream.compose(progress), process.stderr],
] as const;
await Promise.all(
  reports.map(([report, out]) => {
    report.pipe(out, { end: false });
    return finished(report);
  }),
);
process.exitCode = failed ? 1 : 0;
