// Node processes of ours, above all the real `flashsale` command (the compiled dist/daemons/cli.js,
// as an operator and PM2 run it): one-shot commands that run to their exit code, and long-running
// processes that report ready.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import type { TestEnv } from './env.js';
import { ADMIN_TOKEN, JWT_SECRET, PAYMENT_WEBHOOK_SECRET } from './tokens.js';

const CLI = new URL('../../dist/daemons/cli.js', import.meta.url).pathname;

/** Variables set on top of the defaults; an undefined value unsets one. */
export type Vars = Record<string, string | undefined>;

/**
 * Against the env's servers (none without an env), with the test secrets, in production mode, with
 * DIRECT_PAY on (buyers in tests pay through the API, which signs the event and takes the webhook path),
 * consented to as it must be outside `flashsale dev`.
 */
export function cliEnv(env: TestEnv | undefined, vars: Vars): NodeJS.ProcessEnv {
  return {
    ...process.env,
    NODE_ENV: 'production',
    DATABASE_URL: env?.config.databaseUrl,
    ...redisVars(env),
    JWT_SECRET,
    ADMIN_TOKEN,
    PAYMENT_WEBHOOK_SECRET,
    DIRECT_PAY: 'on',
    DIRECT_PAY_I_UNDERSTAND_BUYERS_PAY_NOTHING: 'yes',
    PURCHASE_RATE_PER_BUYER: '0',
    ...vars,
  };
}

/** The env's Redis, in whichever form it has: one server, a cluster or a Sentinel set. */
function redisVars(env: TestEnv | undefined): Vars {
  const list = (nodes: { host: string; port: number }[] | undefined) =>
    nodes?.map((n) => `${n.host}:${n.port}`).join(',');
  return {
    REDIS_URL: env?.config.redisUrl,
    REDIS_CLUSTER_NODES: list(env?.config.redisClusterNodes),
    REDIS_SENTINELS: list(env?.config.redisSentinels),
    REDIS_SENTINEL_NAME: env?.config.redisSentinelName,
  };
}

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
  /** stdout then stderr, for messages that may be on either. */
  out: string;
}

/**
 * Runs `node <args>` to its exit (killed after `timeoutMs`, if given); resolves with its exit code
 * and output. No limit by default: a CLI's start is about a CPU-second of module loading, which on
 * a loaded machine has passed 60 s (`flashsale check` in master-lost); a hang still fails the file
 * at the runner's timeout.
 */
export function runNode(args: string[], env: NodeJS.ProcessEnv = process.env, timeoutMs = 0): Promise<RunResult> {
  return new Promise((resolve) => {
    execFile(process.execPath, args, { env, timeout: timeoutMs }, (err, stdout, stderr) => {
      // Killed (a timeout) has no exit code: -1, which no test expects, rather than a 0 or a 1 it might.
      const code = err ? (err as { code?: unknown }).code : 0;
      resolve({ code: typeof code === 'number' ? code : -1, stdout, stderr, out: stdout + stderr });
    });
  });
}

/** Runs `flashsale <args>` (logging at error level unless `vars` says otherwise) and resolves with its exit code and output. */
export function cli(env: TestEnv | undefined, args: string[], vars: Vars = {}): Promise<RunResult> {
  return runNode([CLI, ...args], cliEnv(env, { LOG_LEVEL: 'error', ...vars }));
}

/** `flashsale <args>` as an operator types it: at info level, with no servers unless `vars` names them. */
export const operatorCli = (args: string[], vars: Vars = {}) => cli(undefined, args, { LOG_LEVEL: 'info', ...vars });

/**
 * Starts a long-running `flashsale <args>` (logging at warn level unless `vars` says otherwise).
 * Its stdout is dropped unless `output` is 'pipe', or a file descriptor that takes stderr too.
 */
export function spawnCli(
  env: TestEnv | undefined,
  args: string[],
  vars: Vars = {},
  output: 'ignore' | 'pipe' | number = 'ignore',
): ChildProcess {
  return spawn(process.execPath, [CLI, ...args], {
    stdio: ['ignore', output, typeof output === 'number' ? output : 'inherit', 'ipc'],
    env: cliEnv(env, { LOG_LEVEL: 'warn', ...vars }),
  });
}

/** Resolves when the process reports ready (as PM2's wait_ready hears it). */
export function ready(child: ChildProcess, what = 'the process'): Promise<void> {
  return new Promise((resolve, reject) => {
    child.on('message', (m) => m === 'ready' && resolve());
    child.once('exit', (code) => reject(new Error(`${what} exited with ${code} before ready`)));
  });
}

export function exited(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}
