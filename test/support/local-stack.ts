// A local stack of a test's own, as `flashsale dev` runs it: its data dir and ports, and no
// servers or secrets given, so every process of it (and every command pointed at it) finds its own.
import { chmodSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../tools/local-stack.js';
import type { Vars } from './cli.js';

export async function localStackVars(): Promise<{ dataDir: string; port: number; vars: Vars }> {
  const dataDir = mkdtempSync(join(tmpdir(), 'flashsale-local-'));
  chmodSync(dataDir, 0o755); // as a fresh clone's .data would be, before the stack closes it
  const [port, pgPort, redisPort] = [await freePort(), await freePort(), await freePort()];
  return {
    dataDir,
    port,
    vars: {
      NODE_ENV: undefined,
      JWT_SECRET: undefined,
      ADMIN_TOKEN: undefined,
      PAYMENT_WEBHOOK_SECRET: undefined,
      FLASHSALE_DATA_DIR: dataDir,
      PORT: String(port),
      LOCAL_PG_PORT: String(pgPort),
      LOCAL_REDIS_PORT: String(redisPort),
    },
  };
}
