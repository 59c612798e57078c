// A process's small HTTP face on its ops port: /healthz (alive), /readyz (Redis and Postgres
// answer), /metrics (this process's own registry: each daemon, and each API instance, since those
// share their API port under PM2); and the readiness probe the API's /readyz shares.
import { createServer, type Server } from 'node:http';
import { pingMasters, type RedisClient } from './redis.js';
import type { Pool } from './db.js';
import { registry } from './metrics.js';

export async function readiness(redis: RedisClient, pool: Pool): Promise<string | null> {
  try {
    await Promise.all([pingMasters(redis), pool.query('select 1')]);
    return null;
  } catch (err) {
    return (err as Error).message;
  }
}

export async function startOpsServer(port: number, host: string, redis: RedisClient, pool: Pool): Promise<Server | null> {
  if (port <= 0) return null;
  const server = createServer((req, res) => {
    const send = (status: number, body: string, type = 'application/json') => {
      res.writeHead(status, { 'content-type': type });
      res.end(body);
    };
    const path = req.url?.split('?')[0];
    if (path === '/healthz') return send(200, '{"status":"ok"}');
    if (path === '/readyz') {
      void readiness(redis, pool).then((err) =>
        err ? send(503, JSON.stringify({ error: 'unavailable', message: `not ready: ${err}` })) : send(200, '{"status":"ready"}'));
      return;
    }
    if (path === '/metrics') {
      void registry.metrics().then((text) => send(200, text, registry.contentType));
      return;
    }
    send(404, '{"error":"not_found","message":"No such route."}');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  return server;
}
