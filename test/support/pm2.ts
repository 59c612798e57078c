// The PM2 deployment as an operator runs it (`pm2 start ecosystem.config.js`), against a test's
// servers, under a PM2 daemon of the test's own (PM2_HOME in a temporary directory), with the
// API on a free port and the ops ports from a random OPS_PORT_BASE.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePortBase, freePort } from '../../tools/local-stack.js';
import type { TestEnv } from './env.js';
import { waitFor } from './fixtures.js';
import { http } from './http.js';
import { ADMIN_TOKEN, JWT_SECRET, PAYMENT_WEBHOOK_SECRET } from './tokens.js';

const run = promisify(execFile);

export interface Pm2Process {
  name: string;
  pid: number;
  pm2_env: {
    status: string;
    restart_time: number;
    exit_code?: number;
    pm_out_log_path: string;
    pm_err_log_path: string;
  };
}

export interface Pm2Deployment {
  /** The API's shared port. */
  port: number;
  /** OPS_PORT_BASE: daemons on + 1..4, API instance N on + 10 + N. */
  opsBase: number;
  /** The environment `pm2` runs with (and passes on to the apps). */
  vars: NodeJS.ProcessEnv;
  pm2(...args: string[]): Promise<{ stdout: string; stderr: string }>;
  list(): Promise<Pm2Process[]>;
  /** `pm2 start ecosystem.config.js`, resolved with the apps once all `count` are online. */
  start(count?: number): Promise<Pm2Process[]>;
  /** Kills the PM2 daemon and its apps and removes its home. */
  close(): Promise<void>;
}

/** Every app the ecosystem starts with real servers and API_INSTANCES=2: two API instances and five daemons. */
export const PM2_APPS = 7;
/** Their ops ports, from OPS_PORT_BASE. */
const OPS_OFFSETS = [1, 2, 3, 4, 5, 10, 11];

export async function pm2Deployment(env: TestEnv, extra: NodeJS.ProcessEnv = {}): Promise<Pm2Deployment> {
  const home = mkdtempSync(join(tmpdir(), 'flashsale-pm2-'));
  const port = await freePort();
  // The ecosystem's ops ports: daemons on + 1..4, the API's two instances on + 10 and + 11.
  const opsBase = await freePortBase(OPS_OFFSETS);
  const vars: NodeJS.ProcessEnv = {
    ...process.env,
    PM2_HOME: home,
    DATABASE_URL: env.config.databaseUrl,
    REDIS_URL: env.config.redisUrl,
    PORT: String(port),
    OPS_PORT_BASE: String(opsBase),
    JWT_SECRET,
    ADMIN_TOKEN,
    PAYMENT_WEBHOOK_SECRET,
    API_INSTANCES: '2',
    LOG_LEVEL: 'warn',
    REPLAY_INTERVAL_SECONDS: '1',
    ...extra,
  };
  const pm2 = (...args: string[]) => run('node_modules/.bin/pm2', args, { env: vars, timeout: 120_000 });
  const list = async (): Promise<Pm2Process[]> => JSON.parse((await pm2('jlist')).stdout) as Pm2Process[];
  return {
    port,
    opsBase,
    vars,
    pm2,
    list,
    start: async (count = PM2_APPS) => {
      await pm2('start', 'ecosystem.config.js');
      // Every app of the full set answers /readyz on its ops port once up: a wait that costs no
      // process, where each `pm2 jlist` below starts one (a third of a second of CPU).
      if (count === PM2_APPS) {
        const up = (i: number) =>
          http(opsBase + i, 'GET', '/readyz').then(
            (r) => r.status === 200,
            () => false,
          );
        await waitFor(
          'every ops port ready',
          async () => (await Promise.all(OPS_OFFSETS.map(up))).every(Boolean),
          60_000,
          100,
        ).catch(() => {});
      }
      let l: Pm2Process[] = [];
      return waitFor(
        'all online',
        async () => {
          l = await list();
          return l.length === count && l.every((p) => p.pm2_env.status === 'online') && l;
        },
        60_000,
        200,
      ).catch((e: Error) => {
        throw new Error(`${e.message}:\n${l.map(described).join('\n')}`);
      });
    },
    close: async () => {
      await pm2('kill').catch(() => {});
      rmSync(home, { recursive: true, force: true });
    },
  };
}

const tail = (file: string) => {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-10).join('\n');
  } catch {
    return '';
  }
};

/** An app's state and the end of its logs, for a start that never came online. */
const described = (p: Pm2Process) =>
  `${p.name} ${p.pm2_env.status}, restarts ${p.pm2_env.restart_time}, exit code ${p.pm2_env.exit_code}\n${tail(p.pm2_env.pm_err_log_path)}${tail(p.pm2_env.pm_out_log_path)}`;
