// A second reporter for `npm test` (test/run.ts), beside the usual one: a line as each test file
// ends (files done of the total, elapsed time, the file and whether it passed), and a line a minute
// naming the files still running, so a long run shows where it is; at the end, every file's
// duration, longest first, to tell where the run's time goes and order the next. Its lines go to stderr.
// JavaScript: node loads a reporter before tsx can compile one.
import { relative } from 'node:path';

/** How many files the run has: test/run.ts says it. */
const FILES_ENV = 'FLASHSALE_TEST_FILES';
const HEARTBEAT_MS = 60_000;

const started = Date.now();
const elapsed = () => {
  const s = Math.floor((Date.now() - started) / 1000);
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
};

// A file's own test is named by its path: its start and its end are the file's.
const isFile = (data) => data.nesting === 0 && data.file !== undefined && data.name === data.file;

/** @param {AsyncIterable<{ type: string, data: { name: string, file?: string, nesting: number, details?: { passed: boolean } } }>} source */
export default async function* progress(source) {
  const total = Number(process.env[FILES_ENV]) || 0;
  const running = new Set();
  let done = 0;
  let failed = 0;
  /** Seconds each file took, from its process's start to its end. */
  const durations = new Map();
  const heartbeat = setInterval(() => {
    if (running.size > 0)
      process.stderr.write(`[${elapsed()}] ${done}/${total} files done; running: ${[...running].join(', ')}\n`);
  }, HEARTBEAT_MS);
  heartbeat.unref();
  try {
    for await (const event of source) {
      const { data } = event;
      if (event.type === 'test:dequeue' && isFile(data)) running.add(relative(process.cwd(), data.file));
      if (event.type !== 'test:complete' || !isFile(data)) continue;
      const file = relative(process.cwd(), data.file);
      running.delete(file);
      durations.set(file, (data.details?.duration_ms ?? 0) / 1000);
      done++;
      if (!data.details?.passed) failed++;
      const failures = failed > 0 ? `, ${failed} failed` : '';
      yield `[${elapsed()}] ${done}/${total} files done${failures}: ${file} ${data.details?.passed ? 'passed' : 'FAILED'}\n`;
    }
    if (durations.size > 0) yield durationTable(durations);
  } finally {
    clearInterval(heartbeat);
  }
}

/** @param {Map<string, number>} durations */
function durationTable(durations) {
  const rows = [...durations].sort((a, b) => b[1] - a[1]);
  const total = 'total of the files';
  const width = Math.max(total.length, ...rows.map(([file]) => file.length));
  const sum = rows.reduce((n, [, s]) => n + s, 0);
  const lines = rows.map(([file, s]) => `  ${file.padEnd(width)}  ${s.toFixed(1).padStart(6)} s`);
  return `\nFiles by duration (s):\n${lines.join('\n')}\n  ${total.padEnd(width)}  ${sum.toFixed(1).padStart(6)} s; the run took ${elapsed()}\n`;
}
