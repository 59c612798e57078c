// What operators and developers ask: liveness, readiness, metrics, and in development a buyer token.
import type { FastifyPluginCallback } from 'fastify';
import type { RedisClient } from '../redis.js';
import type { Config } from '../config.js';
import type { Pool } from '../db.js';
import { checkUserId, signJwt } from '../jwt.js';
import { registry } from '../metrics.js';
import { readiness } from '../ops-server.js';

export const ops: FastifyPluginCallback<{ config: Config; pool: Pool; redis: RedisClient }> = (app, { config, pool, redis }, done) => {
  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/metrics', async (_req, reply) => reply.type(registry.contentType).send(await registry.metrics()));
  app.get('/readyz', async (_req, reply) => {
    const problem = await readiness(redis, pool);
    return problem ? reply.code(503).send({ error: 'unavailable', message: `not ready: ${problem}` }) : { status: 'ready' };
  });

  if (config.development && config.jwtSecret) {
    // Development only: hands out a buyer token so the local page and curl can buy without an IdP.
    app.post('/api/dev/token', async (req) => {
      const userId = checkUserId((req.body as { userId?: unknown } | undefined)?.userId);
      return { token: signJwt(userId, config.jwtSecret!) };
    });
  }
  done();
};
