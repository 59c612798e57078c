// What every `flashsale` command shares: its settings from flags and the environment, running a
// long-lived service until a signal, one-shot connections, and the flags of servers and the API.
import { resolve } from 'node:path';
import type { Argv } from 'yargs';
import {
  loadConfig,
  redisConfigured,
  requireDirectPayConsent,
  requireSecrets,
  requireServers,
  SETTING_FLAGS,
  withLocalSecrets,
  type Config,
  type ConfigOverrides,
} from '../../shared/config/index.js';
import { runUntilSignal, startRefused, type Stoppable } from '../../shared/runtime/daemon.js';
import { classify, ClientError } from '../../shared/runtime/errors.js';
import { createLogger } from '../../shared/runtime/logger.js';
import { migrate } from '../../shared/runtime/migrate.js';
import { numberFromText } from '../../shared/runtime/number-text.js';
import { connect } from '../../shared/runtime/services.js';
import { runningStack } from '../../tools/stack-lock.js';

export type Args = Record<string, unknown>;

// The settings' own flags (SETTING_FLAGS), and two that only `dev` sets for itself.
const FLAG_TO_CONFIG: Record<string, keyof Config> = {
  ...SETTING_FLAGS,
  development: 'development',
  'local-stack': 'localStack',
};

function loadFrom(argv: Args): Config {
  const overrides: ConfigOverrides = {};
  for (const [flag, key] of Object.entries(FLAG_TO_CONFIG)) if (argv[flag] !== undefined) overrides[key] = argv[flag];
  return loadConfig(overrides);
}

export const configFrom = (argv: Args): Config => withLocalSecrets(loadFrom(argv));

/**
 * The settings of a one-shot command (`sale list`, `check`, `refunds`, `token`...). Given no server
 * at all, it talks to the local stack running on this machine (`npm start`, or PM2's local mode),
 * found by the data dir's stack.pid, with the passwords and secrets of its secrets.json, and says
 * so in one line on stderr. A long-running service never does: without servers it refuses to start.
 */
export function oneShotConfig(argv: Args): Config {
  const config = loadFrom(argv);
  const pid =
    config.databaseUrl || redisConfigured(config) || config.localStack ? undefined : runningStack(config.dataDir);
  if (pid === undefined) return withLocalSecrets(config);
  console.error(
    `flashsale: using the local stack running on ${resolve(config.dataDir)} (pid ${pid}): Postgres 127.0.0.1:${config.localPgPort}, Redis 127.0.0.1:${config.localRedisPort}`,
  );
  return withLocalSecrets({ ...config, localStack: true });
}

/** A service's start refused by its settings, already reported (startRefused): the exit code is all that is left. */
export class StartRefused extends Error {
  constructor(readonly code: number) {
    super(`start refused (exit ${code})`);
  }
}

/**
 * Starts a long-running service and keeps it until a signal; a bad setting exits 2, a failed start
 * 1, with the reason. Every service but the local stack's own refuses to run without real secrets.
 * The settings are judged before anything starts, so that a refusal returns (StartRefused) where a
 * test runs the command in its own process; `argv.startService` false (runCli's `start: false`)
 * stops there too when they pass.
 */
export function serve(
  argv: Args,
  start: (config: Config, logger: ReturnType<typeof createLogger>) => Promise<Stoppable>,
  opts: { secrets: boolean; dev: boolean; webhook?: boolean } = { secrets: true, dev: false },
): void {
  const config = configFrom(argv);
  const logger = createLogger(config);
  try {
    // `dev` turns DIRECT_PAY on for its demo page; every other process needs the consent.
    if (!opts.dev) requireDirectPayConsent(config);
    if (opts.secrets) {
      if (!config.development) requireServers(config);
      requireSecrets(config, { webhook: opts.webhook });
    }
  } catch (err) {
    throw new StartRefused(startRefused(err, logger));
  }
  if (argv.startService === false) throw new Error('a service never starts in this process: run it in its own');
  runUntilSignal(() => start(config, logger), logger);
}

/** 2: the settings or the input are wrong (fix them); 1: a dependency is unusable, or a bug. */
export function exitCodeFor(err: unknown): number {
  return classify(err) === 'client' ? 2 : 1;
}

export async function withConnections<T>(
  argv: Args,
  fn: (c: Awaited<ReturnType<typeof connect>>, config: Config) => Promise<T>,
): Promise<T> {
  const config = oneShotConfig(argv);
  const conn = await connect(config, createLogger({ ...config, logLevel: 'warn' }, 'flashsale', 2));
  try {
    await migrate(conn.pool);
    return await fn(conn, config);
  } finally {
    await conn.close();
  }
}

interface NumberFlag {
  type: 'string';
  describe?: string;
  coerce: (v: unknown) => number;
}
interface NumberFlagOpts {
  describe?: string;
  fraction?: boolean;
}

/**
 * A numeric flag's options: yargs' own number type takes 0x10 as 16, so the flag is text, read
 * by numberFromText, and a bad value ends the command with `flashsale: --<flag> ...`, exit 2.
 */
export function numberFlag(flag: string, o?: NumberFlagOpts): NumberFlag;
export function numberFlag(flag: string, o: NumberFlagOpts & { default: number }): NumberFlag & { default: number };
export function numberFlag(flag: string, o: NumberFlagOpts & { default?: number } = {}): NumberFlag {
  const form = o.fraction ? 'a number such as 12 or 1.5' : 'a whole number such as 12';
  return {
    type: 'string',
    ...(o.describe === undefined ? {} : { describe: o.describe }),
    ...(o.default === undefined ? {} : { default: o.default }),
    coerce: (v: unknown): number => {
      // A default is a number already.
      if (typeof v === 'number') return v;
      if (Array.isArray(v)) throw new ClientError(`--${flag} is given ${v.length} times: give it once`);
      const n = numberFromText(String(v), o.fraction === true);
      if (n === undefined)
        throw new ClientError(
          `--${flag} must be ${form} (digits only: no sign, spaces, 0x, 0b, 0o, exponent or trailing dot), got ${JSON.stringify(v)}`,
        );
      return n;
    },
  };
}

export const serverFlags = (y: Argv) =>
  y
    .option(
      'ops-port',
      numberFlag('ops-port', { describe: 'port of /healthz, /readyz, /metrics for a daemon (env OPS_PORT, 0 = off)' }),
    )
    .option('database-url', { type: 'string', describe: 'Postgres URL (env DATABASE_URL)' })
    .option('redis-url', { type: 'string', describe: 'Redis URL (env REDIS_URL)' })
    .option('log-level', { type: 'string', describe: 'pino level (env LOG_LEVEL)' });

export const apiFlags = (y: Argv) =>
  y
    .option('port', numberFlag('port', { describe: 'HTTP port (env PORT, default 3000)' }))
    .option('host', { type: 'string', describe: 'HTTP host (env HOST, default 127.0.0.1)' })
    .option('jwt-secret', { type: 'string', describe: 'HS256 key of buyer tokens (env JWT_SECRET)' })
    .option('admin-token', { type: 'string', describe: 'bearer token of the admin API (env ADMIN_TOKEN)' })
    .option('auth-mode', { choices: ['jwt', 'trusted-header'], describe: 'buyer identity (env AUTH_MODE)' });

/** A header row and its rows, in columns as wide as their widest cell. */
export function printTable(rows: string[][]): void {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  for (const row of rows)
    console.log(
      row
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    );
}
