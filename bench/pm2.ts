// A PM2 daemon of the bench's own, as an operator runs one: `pm2 start <ecosystem>` with the bench's
// environment, under a PM2_HOME in a temporary directory so it never meets anyone else's daemon,
// and `pm2 kill` on cleanup so neither the daemon nor an app outlives the run.
import { execFile, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { benchEnv, until, type Cleanup } from './harness.js';
import type { Watched } from './procstat.js';

const run = promisify(execFile);
const PM2 = 'node_modules/.bin/pm2';

/**
 * The daemons still running (their environments) and the pm2 commands under way. PM2 detaches its
 * daemon, so a Ctrl-C that ends the bench (run.ts exits from its signal handler, skipping the runs'
 * own cleanup) would leave it and its apps behind, and a `pm2 start` cut short waits forever: what
 * is still here when the bench exits is ended synchronously.
 */
const daemons = new Set<NodeJS.ProcessEnv>();
const commands = new Set<ChildProcess>();
let exitHook = false;
function killOnExit(vars: NodeJS.ProcessEnv): void {
  daemons.add(vars);
  if (exitHook) return;
  exitHook = true;
  process.once('exit', () => {
    for (const c of commands) c.kill('SIGKILL');
    for (const v of daemons) {
      spawnSync(PM2, ['kill'], { env: v, stdio: 'ignore', timeout: 30_000 });
      rmSync(v.PM2_HOME!, { recursive: true, force: true });
    }
  });
}

/** One pm2 command against the daemon of `vars.PM2_HOME`. */
function pm2(vars: NodeJS.ProcessEnv, ...args: string[]): Promise<{ stdout: string }> {
  const p = run(PM2, args, { env: vars, timeout: 120_000 });
  commands.add(p.child);
  p.child.once('exit', () => commands.delete(p.child));
  return p;
}

interface Pm2Process {
  name: string;
  pid: number;
  pm2_env: {
    status: string;
    NODE_APP_INSTANCE?: number;
    exit_code?: number;
    pm_out_log_path: string;
    pm_err_log_path: string;
  };
}

export interface Pm2App {
  name: string;
  instance: number;
  pid: number;
}
export interface Pm2Daemon {
  home: string;
  pid: number;
  apps: Pm2App[];
}

const tail = (file: string) => {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-15).join('\n');
  } catch {
    return '';
  }
};

/**
 * Starts `ecosystem` and resolves once its `count` processes are online (PM2 holds an app in
 * "launching" until it reports ready: wait_ready). An app that exits first fails the start with
 * the end of its logs.
 */
export async function startPm2(
  ecosystem: string,
  count: number,
  env: Record<string, string>,
  cleanup: Cleanup,
): Promise<Pm2Daemon> {
  const home = mkdtempSync(join(tmpdir(), 'flashsale-bench-pm2-'));
  const vars = benchEnv({ ...env, PM2_HOME: home });
  cleanup.add(() => rmSync(home, { recursive: true, force: true }));
  // Kills the apps with the daemon; added before the start, so a start that fails halfway is undone too.
  cleanup.add(async () => {
    await pm2(vars, 'kill');
    daemons.delete(vars);
  });
  killOnExit(vars);
  await pm2(vars, 'start', ecosystem);
  let procs: Pm2Process[] = [];
  await until(`${count} PM2 apps of ${ecosystem} online`, 90_000, async () => {
    procs = JSON.parse((await pm2(vars, 'jlist')).stdout) as Pm2Process[];
    const dead = procs.find(
      (p) => ['errored', 'stopped'].includes(p.pm2_env.status) || p.pm2_env.exit_code !== undefined,
    );
    if (dead)
      throw new Error(
        `${dead.name} exited (${dead.pm2_env.status}, code ${dead.pm2_env.exit_code}):\n${tail(dead.pm2_env.pm_err_log_path)}\n${tail(dead.pm2_env.pm_out_log_path)}`,
      );
    return procs.length === count && procs.every((p) => p.pm2_env.status === 'online' && p.pid > 0);
  });
  return {
    home,
    pid: Number(readFileSync(join(home, 'pm2.pid'), 'utf8')),
    apps: procs.map((p) => ({ name: p.name, instance: Number(p.pm2_env.NODE_APP_INSTANCE ?? 0), pid: p.pid })),
  };
}

/**
 * The processes to measure: the daemon (in cluster mode it is the primary that accepts every
 * connection) and each app, named without the ecosystem's prefix, instances numbered.
 */
export function pm2Watch(d: Pm2Daemon): Watched[] {
  const short = (name: string) => name.replace(/^(flashsale|bench)-/, '');
  const many = (name: string) => d.apps.filter((a) => a.name === name).length > 1;
  return [
    { name: 'pm2', pid: d.pid },
    ...d.apps.map((a) => ({ name: many(a.name) ? `${short(a.name)}-${a.instance}` : short(a.name), pid: a.pid })),
  ];
}
