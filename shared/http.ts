// The HTTP app, built by a factory apart from listen() so tests can inject requests.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { Socket } from 'node:net';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Redis } from 'ioredis';
import { checkUserId, createVerifier, signJwt } from './auth.js';
import { bodyDeadline, capConnectionsPerClient, rawAnswer } from './client-limits.js';
import type { Config } from './config.js';
import type { Pool } from './db.js';
import { HttpError, type ErrorCode } from './errors.js';
import { duplicateKey } from './json.js';
import { SALE_ID_PATTERN } from './ids.js';
import type { Logger } from './logger.js';
import { metrics, registry } from './metrics.js';
import { getOrder, payOrder } from './orders.js';
import { registerPage } from './page.js';
import type { Purchaser } from './purchase.js';
import { createSale, getSale, parseSaleInput, saleView, type Sale } from './sales.js';

export interface AppDeps {
  config: Config;
  pool: Pool;
  redis: Redis;
  purchaser: Purchaser;
  logger: Logger;
}

const FASTIFY_ERRORS: Record<string, ConstructorParameters<typeof HttpError>[0]> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'payload_too_large',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupported_media_type',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'bad_request',
  // The router raises these for a path parameter, and every parameter we have is an id.
  FST_ERR_BAD_URL: 'invalid_id',
  FST_ERR_MAX_PARAM_LENGTH: 'invalid_id',
};

const MAX_QTY = 1000;
const SOLD_OUT_BODY = JSON.stringify(new HttpError('sold_out').body());

function parseQty(body: unknown): number {
  if (body === undefined) return 1;
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new HttpError('bad_request', 'The body must be a JSON object like {"qty": 1}.');
  const extra = Object.keys(body).filter((k) => k !== 'qty');
  if (extra.length > 0) throw new HttpError('bad_request', `Unknown field(s): ${extra.join(', ')}.`);
  const qty = (body as { qty?: unknown }).qty ?? 1;
  if (typeof qty !== 'number' || !Number.isInteger(qty) || qty < 1 || qty > MAX_QTY) {
    throw new HttpError('invalid_qty', `qty must be an integer from 1 to ${MAX_QTY}.`);
  }
  return qty;
}

function saleIdParam(req: FastifyRequest): string {
  const { saleId } = req.params as { saleId: string };
  if (!SALE_ID_PATTERN.test(saleId)) throw new HttpError('invalid_id', 'The sale id must be 1-64 characters of A-Z a-z 0-9 _ -.');
  return saleId;
}

function bearer(req: FastifyRequest): string {
  const header = req.headers.authorization;
  const m = header ? /^Bearer ([^\s]+)$/.exec(header) : null;
  if (!m) throw new HttpError('unauthorized', 'Send Authorization: Bearer <token>.');
  return m[1]!;
}

/** Errors Node's HTTP parser raises before fastify sees a request, answered in our shape. */
function onClientError(err: Error & { code?: string }, socket: Socket): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const code: ErrorCode = err.code === 'HPE_HEADER_OVERFLOW' ? 'headers_too_large'
    : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 'request_timeout' : 'bad_request';
  socket.end(rawAnswer(new HttpError(code)));
}

const digest = (s: string) => createHash('sha256').update(s).digest();

/** Paths served whatever the load: probes and metrics must answer during a storm. */
const UNSHED = new Set(['/healthz', '/readyz', '/metrics']);
/** Methods whose body fastify never reads. */
const BODYLESS = new Set(['GET', 'HEAD', 'TRACE']);
const pathOf = (url: string): string => {
  const q = url.indexOf('?');
  return q === -1 ? url : url.slice(0, q);
};

export function buildApp({ config, pool, redis, purchaser, logger }: AppDeps): FastifyInstance {
  const onError = (err: Error & { code?: string; statusCode?: number }, req: FastifyRequest, reply: FastifyReply): void => {
    let httpErr: HttpError;
    if (err instanceof HttpError) httpErr = err;
    else if (err.code && FASTIFY_ERRORS[err.code]) httpErr = new HttpError(FASTIFY_ERRORS[err.code]!);
    else if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) httpErr = new HttpError('bad_request', err.message);
    else {
      logger.error({ err, request: { method: req.method, url: req.url } }, 'request failed');
      httpErr = new HttpError('unavailable');
    }
    void reply.code(httpErr.status).send(httpErr.body());
  };
  const app = Fastify({
    logger: false, bodyLimit: 16 * 1024, routerOptions: { maxParamLength: 256 }, return503OnClosing: true,
    requestTimeout: config.requestTimeoutMs,
    // Node enforces these only every connectionsCheckingInterval (30 s by default), and with its
    // headersTimeout (60 s) above requestTimeout it uses the larger for the body: a client that
    // stalls mid-body would hold its connection for up to 90 s (the body deadline below is shorter).
    http: { headersTimeout: config.requestTimeoutMs, connectionsCheckingInterval: Math.min(1000, config.requestTimeoutMs) },
    // Bad percent-encoding and overlong parameters are answered by the router itself unless routed here.
    frameworkErrors: onError,
    clientErrorHandler: onClientError,
  });

  // Wired on the server, not as a hook: inject() has no connections, and a refused connection
  // must never reach the router.
  capConnectionsPerClient(app.server, config.maxConnectionsPerClient);
  // A body gets bodyTimeoutMs once its headers are in; requests without one go straight on.
  app.addHook('preParsing', (req, reply, payload, done) => {
    const { headers } = req;
    const hasBody = headers['transfer-encoding'] !== undefined || (headers['content-length'] !== undefined && headers['content-length'] !== '0');
    if (hasBody && !BODYLESS.has(req.method)) bodyDeadline(req.raw, reply.raw, config.bodyTimeoutMs);
    done(null, payload);
  });

  // Load shedding: past maxInflight requests in hand, answer 429 at once instead of queueing
  // without bound; a buyer retrying a moment later does better than one waiting in a queue.
  // A slot is taken only once the body is in: a client trickling its body holds a connection
  // (capped per address, cut off at the body deadline) but never a slot real buyers need.
  let inflight = 0;
  app.addHook('preValidation', (req, reply, done) => {
    // Gone already (its close event has fired): it would never give the slot back.
    if (reply.raw.destroyed) return done();
    inflight++;
    // Once per request, whether its response finished or the connection went first (client
    // gone): onResponse misses the latter, and each such request would keep its slot for good.
    reply.raw.once('close', () => inflight--);
    if (inflight > config.maxInflight && !UNSHED.has(pathOf(req.url))) {
      if (req.routeOptions.url === '/api/sales/:saleId/purchases') metrics.purchases.inc({ outcome: 'busy' });
      const e = new HttpError('busy');
      void reply.code(e.status).header('retry-after', '1').send(e.body());
      return;
    }
    done();
  });
  app.addHook('onResponse', (req, reply, done) => {
    metrics.httpDuration.observe(
      { route: req.routeOptions.url ?? 'unmatched', method: req.method, status: reply.statusCode }, reply.elapsedTime / 1000,
    );
    done();
  });

  // Built once: a bad JWT setting stops the process here (ConfigError), and a JWKS is fetched once.
  const verify = config.authMode === 'jwt' ? createVerifier(config, { logger }) : undefined;
  const userOf = async (req: FastifyRequest): Promise<string> => {
    if (!verify) return checkUserId(req.headers['x-user-id']);
    return verify(bearer(req));
  };
  const requireAdmin = (req: FastifyRequest): void => {
    if (!config.adminToken) throw new HttpError('forbidden', 'The admin API is off: set ADMIN_TOKEN to turn it on.');
    // Compared as digests: constant time whatever the lengths.
    if (!timingSafeEqual(digest(bearer(req)), digest(config.adminToken))) throw new HttpError('forbidden', 'This token is not the admin token.');
  };

  // Sale rules change only by creating a sale; a second of staleness is fine for the view.
  const saleCache = new Map<string, { sale: Sale; until: number }>();
  const cachedSale = async (id: string): Promise<Sale> => {
    const hit = saleCache.get(id);
    if (hit && hit.until > Date.now()) return hit.sale;
    const sale = await getSale(pool, id);
    if (!sale) throw new HttpError('sale_not_found');
    saleCache.set(id, { sale, until: Date.now() + 1000 });
    return sale;
  };

  // JSON only: fastify's built-in text/plain parser would hand a handler a string body.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
    if (body === '') return done(null, undefined);
    let parsed: unknown;
    try {
      parsed = JSON.parse(body as string);
    } catch {
      return done(new HttpError('invalid_json'), undefined);
    }
    const dup = typeof parsed === 'object' && parsed !== null ? duplicateKey(body as string) : undefined;
    if (dup !== undefined) {
      const name = dup.length > 64 ? `${JSON.stringify(dup.slice(0, 64))}...` : JSON.stringify(dup);
      return done(new HttpError('invalid_json', `The key ${name} appears more than once in one object.`), undefined);
    }
    done(null, parsed);
  });

  app.setErrorHandler(onError);
  app.setNotFoundHandler((_req, reply) => {
    const e = new HttpError('not_found');
    void reply.code(e.status).send(e.body());
  });

  const served = new Map<string, Set<string>>();
  app.addHook('onRoute', (route) => {
    const methods = served.get(route.url) ?? new Set<string>();
    for (const m of [route.method].flat()) methods.add(m);
    served.set(route.url, methods);
  });

  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/metrics', async (_req, reply) => reply.type(registry.contentType).send(await registry.metrics()));
  app.get('/readyz', async (_req, reply) => {
    try {
      await Promise.all([redis.ping(), pool.query('select 1')]);
      return { status: 'ready' };
    } catch (err) {
      return reply.code(503).send({ error: 'unavailable', message: `not ready: ${(err as Error).message}` });
    }
  });

  app.post('/api/sales', async (req, reply) => {
    requireAdmin(req);
    const sale = parseSaleInput(req.body);
    await createSale(pool, redis, sale);
    return reply.code(201).send(await saleView(redis, sale));
  });

  app.get('/api/sales/:saleId', async (req) => saleView(redis, await cachedSale(saleIdParam(req))));

  app.post('/api/sales/:saleId/purchases', { bodyLimit: 1024 }, async (req, reply) => {
    const saleId = saleIdParam(req);
    const userId = await userOf(req);
    const qty = parseQty(req.body);
    // Most of a crowd arrives after the sale sold out: answered from memory without building and
    // throwing an error, which profiling showed to cost more than the rest of such a request.
    if (purchaser.soldOut(saleId)) {
      metrics.purchases.inc({ outcome: 'sold_out' });
      return reply.code(409).type('application/json; charset=utf-8').send(SOLD_OUT_BODY);
    }
    try {
      const { orderId } = await purchaser.purchase(saleId, userId, qty);
      metrics.purchases.inc({ outcome: 'queued' });
      return await reply.code(202).send({ orderId, status: 'queued' });
    } catch (err) {
      metrics.purchases.inc({ outcome: err instanceof HttpError ? err.code : 'error' });
      throw err;
    }
  });

  app.get('/api/orders/:orderId', async (req) => {
    const userId = await userOf(req);
    return getOrder(pool, redis, (req.params as { orderId: string }).orderId, userId);
  });

  app.post('/api/orders/:orderId/pay', { bodyLimit: 1024 }, async (req) => {
    const userId = await userOf(req);
    return payOrder(pool, redis, (req.params as { orderId: string }).orderId, userId);
  });

  if (config.development && config.jwtSecret) {
    // Development only: hands out a buyer token so the local page and curl can buy without an IdP.
    app.post('/api/dev/token', async (req) => {
      const userId = checkUserId((req.body as { userId?: unknown } | undefined)?.userId);
      return { token: signJwt(userId, config.jwtSecret!) };
    });
  }

  registerPage(app, { development: config.development });

  // Last, once every route is in: a known path asked with another method is a 405 naming the
  // allowed ones, not the router's 404.
  for (const [url, methods] of [...served]) {
    const allow = [...methods].join(', ');
    app.route({
      method: app.supportedMethods.filter((m) => !methods.has(m)), url,
      handler: async (_req, reply) => {
        void reply.header('allow', allow);
        throw new HttpError('method_not_allowed', `This path takes ${allow}.`);
      },
    });
  }

  return app;
}
