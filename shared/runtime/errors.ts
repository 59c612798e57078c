// Every error an HTTP client can see: code, status and message, in one catalogue; and the one
// classification of every other failure, from which the HTTP status, the daemons' retries, the
// metrics' backend label and the CLI's exit code all derive.
import { ReplyError } from 'ioredis';
import pg from 'pg';

export const ERRORS = {
  bad_request: [400, 'The request is malformed.'],
  invalid_json: [400, 'The body is not valid JSON.'],
  invalid_qty: [400, 'qty must be a positive integer.'],
  qty_above_max: [400, "qty is above the sale's maximum per order."],
  invalid_sale: [400, 'The sale definition is invalid.'],
  variant_required: [400, 'This sale sells several variants: name the one to buy as "variant" in the body.'],
  unknown_variant: [400, 'This sale has no variant of that sku.'],
  invalid_id: [400, 'The id in the path is malformed.'],
  invalid_units: [400, 'units must be a whole number from 1 to 10000000.'],
  invalid_end_time: [400, "The new end must be a time to come, after the sale's start."],
  invalid_signature: [400, "The payment provider's signature header is missing, malformed or does not match the body."],
  stale_signature: [400, "The signature's timestamp is more than 300 s away from now."],
  invalid_event: [400, 'The payment event is malformed.'],
  invalid_endpoint: [400, 'An endpoint is a public http(s) URL, with event types among those documented.'],
  unauthorized: [401, 'A valid bearer token is required.'],
  forbidden: [403, 'This token may not do that.'],
  not_started: [403, 'The sale has not started yet.'],
  purchase_token_required: [
    403,
    'This sale needs a purchase token: solve GET /api/sales/:saleId/challenge and exchange it at POST /api/sales/:saleId/purchase-token.',
  ],
  invalid_purchase_token: [403, 'The purchase token is malformed, expired, or for another buyer or sale.'],
  purchase_token_used: [
    403,
    'This purchase token has bought already: a token buys once. Solve a new challenge for the next purchase.',
  ],
  draw_sale: [
    403,
    'This sale sells by draw: enter at POST /api/sales/:saleId/entries; winners get their order from the draw.',
  ],
  email_not_verified: [
    403,
    "This sale is for buyers with a verified email: sign in with an account whose email your identity provider has verified (the token's email_verified claim).",
  ],
  admission_pass_required: [
    403,
    'This sale has a waiting room: join at POST /api/sales/:saleId/queue and buy with the pass you get when admitted.',
  ],
  admission_pass_invalid: [
    403,
    'This admission pass has bought already, has expired, or is for another buyer or sale.',
  ],
  not_admitted: [
    403,
    'This sale sells only to the buyers its admission lets in (an invitation list, say), and this buyer is not among them.',
  ],
  challenge_failed: [403, 'The challenge solution is wrong, expired, used already, or for another buyer or sale.'],
  ended: [403, 'The sale has ended.'],
  not_found: [404, 'No such route.'],
  sale_not_found: [404, 'No such sale.'],
  order_not_found: [404, 'No such order.'],
  not_in_queue: [404, "This buyer has not joined this sale's waiting room."],
  not_entered: [404, "This buyer has not entered this sale's draw."],
  payment_not_found: [404, 'No such payment.'],
  operator_not_found: [404, 'No such operator.'],
  endpoint_not_found: [404, 'No such event endpoint.'],
  event_not_found: [404, 'No such event.'],
  provider_not_found: [404, "No payment provider of this name: each one's webhook is /api/payments/<name>/webhook."],
  method_not_allowed: [405, 'Method not allowed.'],
  request_timeout: [408, 'The request took too long to arrive.'],
  sold_out: [409, 'The sale is sold out.'],
  not_enough_stock: [409, 'Fewer items are left than asked for.'],
  fixed_stock: [409, "This sale's stock is what its record commits to and cannot change."],
  limit_reached: [409, 'This buyer has reached the per-user limit.'],
  paused: [409, 'The sale is paused by its operator: nothing is sold until it resumes. Try again later.'],
  sale_exists: [409, 'A sale with this id already exists.'],
  operator_exists: [409, 'An operator of this name exists already, or did.'],
  no_challenge: [409, 'This sale has no challenge: buy directly.'],
  no_waiting_room: [409, 'This sale has no waiting room: buy directly.'],
  not_a_draw: [409, 'This sale is not a draw: its admission is not draw.'],
  entries_not_open: [409, "Entries to this draw are not open yet: see the sale's entriesOpenAt."],
  entries_closed: [409, "Entries to this draw have closed: see the sale's entriesCloseAt."],
  order_expired: [409, 'The payment window of this order has closed.'],
  order_not_ready: [409, 'The order is still queued; retry in a moment.'],
  order_paid: [409, 'This order is paid: it can no longer be cancelled.'],
  order_cancelled: [409, 'This order was cancelled: it can no longer be paid.'],
  event_conflict: [409, 'This event id was delivered before with a different body: nothing was recorded.'],
  endpoint_exists: [409, 'An event endpoint with this id exists already.'],
  not_refund_due: [409, 'This payment paid its order: there is nothing to refund.'],
  cancel_limit: [409, 'This buyer has cancelled as many orders of this sale as it allows: this order stays as it is.'],
  unpaid_limit: [
    409,
    'This buyer has let as many orders of this sale expire unpaid as it allows: no more purchases here.',
  ],
  payload_too_large: [413, 'The body is too large.'],
  unsupported_media_type: [415, 'Send the body as application/json.'],
  headers_too_large: [431, 'The request headers are too large.'],
  busy: [429, 'The service is busy; retry shortly.'],
  rate_limited: [429, 'Too many attempts; retry after Retry-After seconds.'],
  internal: [500, 'Internal error.'],
  unavailable: [503, 'A backing service is unavailable; retry shortly.'],
} as const satisfies Record<string, readonly [number, string]>;

export type ErrorCode = keyof typeof ERRORS;

export class HttpError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  /** Seconds, answered as Retry-After (a 429 rate_limited says when the window ends). */
  readonly retryAfter: number | undefined;
  constructor(code: ErrorCode, message?: string, retryAfter?: number) {
    // An answer to a client, not a fault: its stack is never logged, and capturing one for every
    // refused buyer of a sold-out crowd cost a tenth of the API's CPU (bench/, BENCHMARKS.md).
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(message ?? ERRORS[code][1]);
    Error.stackTraceLimit = limit;
    this.code = code;
    this.status = ERRORS[code][0];
    this.retryAfter = retryAfter;
  }

  body(): { error: ErrorCode; message: string } {
    return { error: this.code, message: this.message };
  }
}

/**
 * What a failure means:
 * - `client`: the caller's mistake (an HttpError, a bad setting): answered or reported, never retried.
 * - `unavailable`: a dependency is away or refused for now (a lost connection, Postgres shutting
 *   down, a serialization failure or deadlock, Redis loading or read-only): 503, retried with backoff.
 * - `bug`: anything else: 500 internal, logged once with its stack, never retried without a limit.
 */
export type Failure = 'client' | 'unavailable' | 'bug';
export type Backend = 'postgres' | 'redis' | 'unknown';

/** Errors that mean "fix what you asked or set", whatever module raised them. */
export class ClientError extends Error {
  readonly code: string = 'client';
}

/** A dependency other than Redis and Postgres is away for now (the identity provider's key set). */
export class UnavailableError extends Error {
  readonly code: string = 'unavailable';
}

// SQLSTATE classes 08 (connection), 53 (resources), 57P (shutdown), and the retryable 40001
// (serialization), 40P01 (deadlock), 55P03 (lock not available).
const PG_UNAVAILABLE = /^(08|53|57P|40001$|40P01$|55P03$)/;
// Redis refusing for now, by the reply's error prefix. A master dying, failing over or handing a
// slot on answers: CLUSTERDOWN (slot not served yet), TRYAGAIN (a multi-key command or script
// whose slot is half migrated), MOVED/ASK (a redirection the client could not follow: mixed
// errors in one pipeline), READONLY (a demoted master), UNBLOCKED (a WAIT cut short when its
// server became a replica), NOREPLICAS (min-replicas-to-write), "ERR WAIT cannot be used with
// replica instances" (a WAIT sent to a master demoted meanwhile), and a script whose keys a reshard
// is moving (ours touch keys of one slot only, so never otherwise). Any other ERR, a WRONGTYPE or a
// script's own error is ours to fix.
const REDIS_UNAVAILABLE =
  /^(LOADING|BUSY|READONLY|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|MOVED|ASK|UNBLOCKED|NOREPLICAS|OOM|NOAUTH|WRONGPASS|ERR Script attempted to access a non local key|ERR WAIT cannot be used with replica instances)\b/;
// What ioredis says, as a plain Error, when a connection is gone or never came. On a cluster also:
// a node down until its replica is promoted, redirections that never settled, no startup node, and
// an auto-pipeline whose commands' slots a reshard moved to different nodes while it was queued.
const REDIS_LOST =
  /^(Connection is closed|Stream isn't writeable|Command timed out|Too many Cluster redirections|Failed to refresh slots cache|Cluster isn't ready|None of startup nodes is available|All keys in the pipeline should belong to the same slots allocation group)/;
// ioredis's own error classes (by name: the package exports none of them but ReplyError): the slot
// map could be read from no node; a command's retries ran out while reconnecting; a command of a
// pipeline (auto-pipelining, a WAIT behind a script) lost with its connection before its reply.
const REDIS_CLIENT_ERRORS: Record<string, RegExp> = {
  ClusterAllFailedError: /^/,
  MaxRetriesPerRequestError: /^/,
  AbortError: /^Command aborted due to connection close$/,
};
const PG_LOST =
  /connection terminated|timeout exceeded when trying to connect|client has encountered a connection error|client was closed and is not queryable/i;
// Socket errors carry a code; a host that resolves to both ::1 and 127.0.0.1 fails with an
// AggregateError of them (Node 20), which has the code but no syscall.
const SOCKET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

const message = (err: unknown) => String((err as { message?: unknown } | null)?.message ?? '');

/** A Redis reply that means "not now": by its prefix, or a MULTI discarded only for such replies. */
function redisRefusedForNow(err: Error): boolean {
  if (REDIS_UNAVAILABLE.test(message(err))) return true;
  const previous = (err as { previousErrors?: unknown[] }).previousErrors;
  return (
    message(err).startsWith('EXECABORT') &&
    !!previous?.length &&
    previous.every((e) => e instanceof ReplyError && REDIS_UNAVAILABLE.test(message(e)))
  );
}

/** The Redis client lost the connection, or never had one, before the command was answered. */
function redisLost(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const byClass = Object.hasOwn(REDIS_CLIENT_ERRORS, err.name) ? REDIS_CLIENT_ERRORS[err.name] : undefined;
  if (byClass) return byClass.test(err.message);
  return err.constructor === Error && REDIS_LOST.test(err.message);
}

export function classify(err: unknown): Failure {
  if (err instanceof HttpError || err instanceof ClientError) return 'client';
  if (err instanceof UnavailableError) return 'unavailable';
  if (err instanceof pg.DatabaseError) return PG_UNAVAILABLE.test(err.code ?? '') ? 'unavailable' : 'bug';
  if (err instanceof ReplyError) return redisRefusedForNow(err as Error) ? 'unavailable' : 'bug';
  // A socket error (ECONNREFUSED, ECONNRESET, ETIMEDOUT...) from either client.
  const e = err as { syscall?: unknown; code?: unknown } | null;
  if (typeof e?.syscall === 'string' || SOCKET_CODES.has(String(e?.code))) return 'unavailable';
  if (redisLost(err) || PG_LOST.test(message(err))) return 'unavailable';
  return 'bug';
}

export function backendOf(err: unknown): Backend {
  if (err instanceof pg.DatabaseError || PG_LOST.test(message(err))) return 'postgres';
  if (err instanceof ReplyError || redisLost(err)) return 'redis';
  return 'unknown';
}
