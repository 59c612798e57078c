// A PM2 daemon of the bench's own, as an operator runs one: `pm2 start <ecosystem>` with the bench's
// environment, under a PM2_HOME in a temporary directory so it never meets anyone else's daemon,
// and `pm2 kill` on cleanup so neither the daemon nor an app outlives the run.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { benchEnv, until, type Cleanup } from './harness.js';
import type { Watched } from './procstat.js';

const run = promisify(execFile);
const PM2 = 'node_modules/.bin/pm2';

interface Pm2Process { name: string; pid: number; pm2_env: { status: string; NODE_APP_INSTANCE?: number; exit_code?: number; pm_out_log_path: string; pm_err_log_path: string } }

export interface Pm2App { name: string; instance: number; pid: number }
export interface Pm2Daemon { home: string; pid: number; apps: Pm2App[] }

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
export async function startPm2(ecosystem: string, count: number, env: Record<string, string>, cleanup: Cleanup): Promise<Pm2Daemon> {
  const home = mkdtempSync(join(tmpdir(), 'flashsale-bench-pm2-'));
  const vars = benchEnv({ ...env, PM2_HOME: home });
  const pm2 = (...args: string[]) => run(PM2, args, { env: vars, timeout: 120_000 });
  cleanup.add(() => rmSync(home, { recursive: true, force: true }));
  // Kills the apps with the daemon; added before the start, so a start that fails halfway is undone too.
  cleanup.add(() => pm2('kill'));
  await pm2('start', ecosystem);
  let procs: Pm2Process[] = [];
  await until(`${count} PM2 apps of ${ecosystem} online`, 90_000, async () => {
    procs = JSON.parse((await pm2('jlist')).stdout) as Pm2Process[];
    const dead = procs.find((p) => ['errored', 'stopped'].includes(p.pm2_env.status) || p.pm2_env.exit_code !== undefined);
    if (dead) throw new Error(`${dead.name} exited (${dead.pm2_env.status}, code ${dead.pm2_env.exit_code}):\n${tail(dead.pm2_env.pm_err_log_path)}\n${tail(dead.pm2_env.pm_out_log_path)}`);
    return procs.length === count && procs.every((p) => p.pm2_env.status === 'online' && p.pid > 0);
  });
  return {
    home,
    pid: Number(readFileSync(join(home, 'pm2.pid'), 'utf8')),
    apps: procs.map((p) => ({ name: p.name, instance: Number(p.pm2_env.NODE_APP_INSTANCE ?? 0), pid: p.pid })),
  };
}

const portFree = (port: number) => new Promise<boolean>((resolve) => {
  const server = createServer();
  server.once('error', () => resolve(false));
  server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
});

/** An OPS_PORT_BASE whose ports at every offset are free now (the ecosystem adds 1..3 and 10 + N). */
export async function freeOpsPortBase(offsets: number[]): Promise<number> {
  for (let tries = 0; tries < 50; tries++) {
    const base = 20_000 + Math.floor(Math.random() * 30_000);
    if ((await Promise.all(offsets.map((o) => portFree(base + o)))).every(Boolean)) return base;
  }
  throw new Error('no free OPS_PORT_BASE found in 50 tries');
}

/**
 * The processes to measure: the daemon (in cluster mode it is the primary that accepts every
 * connection) and each app, named without the ecosystem's prefix, instances numbered.
 */
export function pm2Watch(d: Pm2Daemon): Watched[] {
  const short = (name: string) => name.replace(/^(flashsale|bench)-/, '');
  const many = (name: string) => d.apps.filter((a) => a.name === name).length > 1;
  return [{ name: 'pm2', pid: d.pid }, ...d.apps.map((a) => ({ name: many(a.name) ? `${short(a.name)}-${a.instance}` : short(a.name), pid: a.pid }))];
}
