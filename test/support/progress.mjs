// A second reporter for `npm test` (test/run.ts), beside the usual one: a line as each test file
// ends (files done of the total, elapsed time, the file and whether it passed), and a line a minute
// naming the files still running, so a long run shows where it is. Its lines go to stderr.
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
  const heartbeat = setInterval(() => {
    if (running.size > 0) process.stderr.write(`[${elapsed()}] ${done}/${total} files done; running: ${[...running].join(', ')}\n`);
  }, HEARTBEAT_MS);
  heartbeat.unref();
  try {
    for await (const event of source) {
      const { data } = event;
      if (event.type === 'test:dequeue' && isFile(data)) running.add(relative(process.cwd(), data.file));
      if (event.type !== 'test:complete' || !isFile(data)) continue;
      const file = relative(process.cwd(), data.file);
      running.delete(file);
      done++;
      if (!data.details?.passed) failed++;
      const failures = failed > 0 ? `, ${failed} failed` : '';
      yield `[${elapsed()}] ${done}/${total} files done${failures}: ${file} ${data.details?.passed ? 'passed' : 'FAILED'}\n`;
    }
  } finally {
    clearInterval(heartbeat);
  }
}
