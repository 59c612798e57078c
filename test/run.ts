// `npm test`: starts one throwaway embedded Postgres for the whole run (each test file creates its
// own database in it and starts its own redis-server), then runs node's test runner over test/.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startPostgres } from '../shared/local-stack.js';

const only = process.argv.slice(2);
const files = (only.length > 0 ? only : readdirSync('test').filter((f) => f.endsWith('.test.ts')).sort().map((f) => join('test', f)));
const dir = mkdtempSync(join(tmpdir(), 'flashsale-test-pg-'));
const pg = await startPostgres(dir, { persistent: false });
let code = 1;
try {
  code = await new Promise<number>((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--test', '--test-concurrency=2', ...files], {
      stdio: 'inherit',
      env: { ...process.env, FLASHSALE_TEST_PG: pg.url },
    });
    child.on('exit', (c, signal) => resolve(c ?? (signal ? 1 : 0)));
  });
} finally {
  await pg.stop().catch(() => {});
  rmSync(dir, { recursive: true, force: true });
}
process.exit(code);
