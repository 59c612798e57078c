// Every failure a request can meet, answered in our {error, message} shape: our own refusals
// (HttpError), fastify's (a bad URL, a body too large, a route schema refusing its input), Node's
// HTTP parser's (on the raw socket), and anything else by classify(): a dependency away is 503
// unavailable, a bug 500 internal.
import type { Socket } from 'node:net';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { backendOf, classify, HttpError, type ErrorCode } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/logger.js';
import { countBackendError } from '../../runtime/metrics.js';
import { redactUrlToken } from '../url-token.js';
import { rawAnswer } from './client-limits.js';
import fp from 'fastify-plugin';

const FASTIFY_ERRORS: Record<string, ErrorCode> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'payload_too_large',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupported_media_type',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'bad_request',
  // The router raises these for a path parameter, and every parameter we have is an id.
  FST_ERR_BAD_URL: 'invalid_id',
  FST_ERR_MAX_PARAM_LENGTH: 'invalid_id',
};

/**
 * How a route schema says what its refusal is: `refusal(code, message)` on the schema (or the
 * property) whose rule failed; an object refusing fields it does not take says so with
 * `unknownFields`, in which `{fields}` lists them.
 */
const REFUSAL = 'x-refusal';
type Refusal = [ErrorCode, string, string?];
export const refusal = (code: ErrorCode, message: string, unknownFields?: string) => ({
  [REFUSAL]: [code, message, unknownFields] as Refusal,
});

/**
 * Route schemas validated as our contract reads: no coercion ("1" is not a qty), nothing dropped
 * silently (an unknown field is refused), and each failure carries the schema that refused it.
 */
export const SCHEMA_OPTIONS = {
  customOptions: { coerceTypes: false, removeAdditional: false, verbose: true, keywords: [REFUSAL] },
};

interface SchemaFailure {
  keyword: string;
  data?: unknown;
  parentSchema?: { [REFUSAL]?: Refusal; properties?: Record<string, unknown> };
}

function fromSchema(err: FastifyError): HttpError {
  // ajv stops at the first failure (allErrors off: collecting them all lets a crafted body cost unbounded work).
  const failure = err.validation![0] as SchemaFailure;
  const refused = failure.parentSchema?.[REFUSAL];
  if (!refused) return new HttpError('bad_request', err.message);
  const [code, message, unknownFields] = refused;
  if (failure.keyword !== 'additionalProperties' || !unknownFields) return new HttpError(code, message);
  const known = failure.parentSchema?.properties ?? {};
  const fields = Object.keys(failure.data as object).filter((k) => !Object.hasOwn(known, k));
  return new HttpError(
    code,
    unknownFields.replace('{fields}', () => fields.join(', ')),
  );
}

/** What the client is answered for any failure. */
export function answerFor(err: unknown): HttpError {
  if (err instanceof HttpError) return err;
  const e = err as FastifyError;
  if (e.validation) return fromSchema(e);
  if (e.code && FASTIFY_ERRORS[e.code]) return new HttpError(FASTIFY_ERRORS[e.code]!);
  if (e.statusCode && e.statusCode >= 400 && e.statusCode < 500) return new HttpError('bad_request', e.message);
  switch (classify(err)) {
    case 'client':
      return new HttpError('bad_request', e.message);
    case 'unavailable':
      return new HttpError('unavailable');
    default:
      return new HttpError('internal');
  }
}

/** How long a client answered 503 unavailable waits before retrying: a failover takes a second or two. */
export const RETRY_AFTER_SECONDS = 1;

/** What a log line says of a request: never a token, whichever route it came to. */
const requestForLog = (req: FastifyRequest) => ({ method: req.method, url: redactUrlToken(req.url) });

/**
 * The handler of every error: a bug is logged once at error with its stack; a dependency away is
 * counted against its backend and logged as a warning naming the error, without a stack, once per
 * error a second (it fails every request at once, and a stack per request would bury the news).
 */
export function errorHandler(logger: Logger) {
  const quietUntil = new Map<string, number>();
  const warn = (err: Error, req: FastifyRequest) => {
    const backend = backendOf(err);
    countBackendError(err, backend);
    const reason = String(err.message);
    const now = Date.now();
    if ((quietUntil.get(reason) ?? 0) > now) return;
    if (quietUntil.size > 100) quietUntil.clear();
    quietUntil.set(reason, now + 1000);
    logger.warn(
      { backend, error: err.name, reason, request: requestForLog(req) },
      'request failed: a backing service is unavailable',
    );
  };
  return (err: Error, req: FastifyRequest, reply: FastifyReply): void => {
    const answer = answerFor(err);
    if (!(err instanceof HttpError)) {
      if (answer.code === 'internal') logger.error({ err, request: requestForLog(req) }, 'request failed: a bug');
      else if (answer.code === 'unavailable') warn(err, req);
    }
    const retryAfter = answer.code === 'unavailable' ? RETRY_AFTER_SECONDS : answer.retryAfter;
    if (retryAfter !== undefined) void reply.header('retry-after', String(retryAfter));
    void reply.code(answer.status).send(answer.body());
  };
}

/** Errors Node's HTTP parser raises before fastify sees a request, answered in our shape. */
export function onClientError(err: Error & { code?: string }, socket: Socket): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const code: ErrorCode =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? 'headers_too_large'
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? 'request_timeout'
        : 'bad_request';
  socket.end(rawAnswer(new HttpError(code)));
}

/** Route errors and unknown routes, through the same handler as the router's own errors. */
export const errorMapping = fp<{ onError: ReturnType<typeof errorHandler> }>(
  (app, { onError }, done) => {
    app.setErrorHandler(onError);
    app.setNotFoundHandler((_req, reply) => {
      const e = new HttpError('not_found');
      void reply.code(e.status).send(e.body());
    });
    done();
  },
  { name: 'flashsale-errors', fastify: '5.x' },
);
