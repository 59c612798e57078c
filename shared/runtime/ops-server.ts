// A process's small HTTP face on its ops port: /healthz (alive), /readyz (Redis and Postgres
// answer), /metrics (this process's own registry: each daemon, and each API instance, since those
// share their API port under PM2); and the readiness probe the API's /readyz shares.
//
// It listens on OPS_HOST (loopback by default, whatever HOST the API takes): its answers are for
// this host's Prometheus and probes, and a process's metrics say more about it than its API does.
// One address holds at most MAX_CONNECTIONS_PER_CLIENT connections, as on the API's port.
import { createServer, type Server } from 'node:http';
import type { Config } from '../config/index.js';
import { withTimeout } from './daemon.js';
import { capConnectionsPerClient } from '../http/plugins/client-limits.js';
import { pingMasters, type RedisClient } from '../redis/connect.js';
import type { Pool } from './db.js';
import { registry } from './metrics.js';

/** How long a dependency may take to answer a readiness probe (a daemon's Redis commands wait out an outage). */
const PROBE_MS = 2000;

export type Dependency = 'redis' | 'postgres';

const answers = (probe: () => Promise<unknown>): Promise<boolean> =>
  withTimeout(probe(), PROBE_MS, 'no answer').then(
    () => true,
    () => false,
  );

/**
 * The dependencies that do not answer (empty: ready). Only their names: a backend's own error
 * text carries hosts, ports, user and database names, which are no business of whoever asks.
 */
export async function readiness(redis: RedisClient, pool: Pool): Promise<Dependency[]> {
  const [redisUp, postgresUp] = await Promise.all([
    answers(() => pingMasters(redis)),
    answers(() => pool.query('select 1')),
  ]);
  return [...(redisUp ? [] : ['redis' as const]), ...(postgresUp ? [] : ['postgres' as const])];
}

/** The 503 body of a failed readiness probe: which dependency, never why in its own words. */
export const notReady = (failed: Dependency[]) => ({
  error: 'unavailable',
  message: `not ready: ${failed.join(' and ')} ${failed.length > 1 ? 'are' : 'is'} not answering`,
  failed,
});

type OpsSettings = Pick<Config, 'opsPort' | 'opsHost' | 'maxConnectionsPerClient'>;

export async function startOpsServer(config: OpsSettings, redis: RedisClient, pool: Pool): Promise<Server | null> {
  if (config.opsPort <= 0) return null;
  const server = createServer((req, res) => {
    const send = (status: number, body: string, type = 'application/json') => {
      res.writeHead(status, { 'content-type': type });
      res.end(body);
    };
    const path = req.url?.split('?')[0];
    if (path === '/healthz') return send(200, '{"status":"ok"}');
    if (path === '/readyz') {
      void readiness(redis, pool).then((failed) =>
        failed.length > 0 ? send(503, JSON.stringify(notReady(failed))) : send(200, '{"status":"ready"}'),
      );
      return;
    }
    if (path === '/metrics') {
      void registry.metrics().then((text) => send(200, text, registry.contentType));
      return;
    }
    send(404, '{"error":"not_found","message":"No such route."}');
  });
  capConnectionsPerClient(server, config.maxConnectionsPerClient);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.opsPort, config.opsHost, () => resolve());
  });
  return server;
}
