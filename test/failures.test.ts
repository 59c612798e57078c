// A service that gives up on its own (a bug that kept failing: see Retries in shared/runtime/daemon.ts)
// ends its process through the same lifecycle as a signal: stopped cleanly, then exit 1, so a
// supervisor restarts it where an operator sees it.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { runNode, type RunResult } from './support/cli.js';

const daemon = pathToFileURL(join(process.cwd(), 'shared/runtime/daemon.ts')).href;
const logger = pathToFileURL(join(process.cwd(), 'shared/runtime/logger.ts')).href;

/** Runs a service under runUntilSignal in a process of its own; returns its exit code and output. */
function runService(body: string): Promise<RunResult> {
  const dir = mkdtempSync(join(tmpdir(), 'flashsale-failures-'));
  const file = join(dir, 'service.ts');
  writeFileSync(
    file,
    `import { failureSignal, runUntilSignal } from '${daemon}';
import { createLogger } from '${logger}';
const log = createLogger({ logLevel: 'info', development: false });
${body}
`,
  );
  // No time limit: a tsx start is about a CPU-second, which a loaded machine can stretch past any fixed one.
  return runNode(['--import', 'tsx', file], process.env).finally(() => rmSync(dir, { recursive: true, force: true }));
}

test('lifecycle: a service whose failed promise rejects is stopped, then its process exits 1 with a fatal line', async () => {
  const r = await runService(`
runUntilSignal(async () => {
  const { failed, fail } = failureSignal();
  setTimeout(() => fail(new TypeError('a bug that kept failing')), 50);
  return { failed, stop: async () => console.log('service stopped') };
}, log);
`);
  assert.equal(r.code, 1, r.out);
  assert.match(r.out, /service stopped/);
  assert.match(r.out, /"level":60.*the service gave up/);
  assert.match(r.out, /TypeError: a bug that kept failing/);
});
