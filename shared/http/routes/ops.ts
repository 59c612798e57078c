// What operators and developers ask: liveness, readiness, metrics, and in development a buyer token.
import type { FastifyPluginCallback, FastifySchema } from 'fastify';
import type { RedisClient } from '../../redis/connect.js';
import type { Config } from '../../config/index.js';
import type { Pool } from '../../runtime/db.js';
import { checkUserId } from '../../buyers/buyer.js';
import { HttpError } from '../../runtime/errors.js';
import { signJwt } from '../../buyers/jwt.js';
import { registry } from '../../runtime/metrics.js';
import { notReady, readiness } from '../../runtime/ops-server.js';
import { documentedOnly, errorResponses, textResponse } from '../schemas.js';

const status = (value: string) => ({
  description: value,
  type: 'object',
  required: ['status'],
  properties: { status: { type: 'string', enum: [value] } },
});
const healthz = {
  summary: 'Liveness: the process answers (503 once it is shutting down)',
  tags: ['ops'],
  response: { 200: status('ok'), ...errorResponses('unavailable') },
};
const unready = errorResponses('unavailable') as Record<number, { properties: object }>;
const failedList = {
  type: 'array',
  items: { type: 'string', enum: ['redis', 'postgres'] },
  description: 'the dependencies that do not answer',
};
const readyz: FastifySchema = {
  summary: 'Readiness: Redis and Postgres answer (a failure names the dependency, never its own error text)',
  tags: ['ops'],
  response: {
    200: status('ready'),
    ...unready,
    503: { ...unready[503], properties: { ...unready[503]!.properties, failed: failedList } },
  },
};
const metricsDoc = {
  summary: 'Prometheus metrics of the process that answered',
  tags: ['ops'],
  response: { 200: textResponse('text/plain', 'Prometheus text exposition') },
};
const devToken = {
  summary: 'A buyer token for this user (development mode only)',
  tags: ['ops'],
  response: {
    200: {
      description: 'a buyer JWT for this user',
      type: 'object',
      required: ['token'],
      properties: { token: { type: 'string' } },
    },
    ...errorResponses('bad_request', 'unauthorized'),
  },
};
// Documented, never validated: checkUserId refuses a bad userId as 401, as a bad token's sub.
const devTokenBody = {
  type: 'object',
  required: ['userId'],
  properties: {
    userId: { type: 'string', description: '1-128 printable ASCII characters without spaces' },
    emailVerified: {
      type: 'boolean',
      default: false,
      description: 'true: the token says `email_verified: true` (a `buyers: verified-email` sale sells to it)',
    },
  },
};

export const ops: FastifyPluginCallback<{ config: Config; pool: Pool; redis: RedisClient }> = (
  app,
  { config, pool, redis },
  done,
) => {
  app.get('/healthz', { schema: healthz }, async () => ({ status: 'ok' }));
  app.get('/metrics', { schema: metricsDoc }, async (_req, reply) =>
    reply.type(registry.contentType).send(await registry.metrics()),
  );
  app.get('/readyz', { schema: readyz }, async (_req, reply) => {
    const failed = await readiness(redis, pool);
    return failed.length > 0 ? reply.code(503).send(notReady(failed)) : { status: 'ready' };
  });

  if (config.development && config.jwtSecret) {
    // Development only: hands out a buyer token so the local page and curl can buy without an IdP.
    app.post('/api/dev/token', { schema: devToken, config: documentedOnly({ body: devTokenBody }) }, async (req) => {
      const body = req.body as { userId?: unknown; emailVerified?: unknown } | undefined;
      const userId = checkUserId(body?.userId);
      const emailVerified = body?.emailVerified ?? false;
      if (typeof emailVerified !== 'boolean')
        throw new HttpError('bad_request', 'emailVerified must be true or false.');
      return { token: signJwt(userId, config.jwtSecret!, undefined, emailVerified ? { email_verified: true } : {}) };
    });
  }
  done();
};
