// Every error an HTTP client can see: code, status and message, in one catalogue.

export const ERRORS = {
  bad_request: [400, 'The request is malformed.'],
  invalid_json: [400, 'The body is not valid JSON.'],
  invalid_qty: [400, 'qty must be a positive integer.'],
  qty_above_max: [400, 'qty is above the sale\'s maximum per order.'],
  invalid_sale: [400, 'The sale definition is invalid.'],
  invalid_id: [400, 'The id in the path is malformed.'],
  unauthorized: [401, 'A valid bearer token is required.'],
  forbidden: [403, 'This token may not do that.'],
  not_started: [403, 'The sale has not started yet.'],
  ended: [403, 'The sale has ended.'],
  not_found: [404, 'No such route.'],
  sale_not_found: [404, 'No such sale.'],
  order_not_found: [404, 'No such order.'],
  method_not_allowed: [405, 'Method not allowed.'],
  request_timeout: [408, 'The request took too long to arrive.'],
  sold_out: [409, 'The sale is sold out.'],
  not_enough_stock: [409, 'Fewer items are left than asked for.'],
  limit_reached: [409, 'This buyer has reached the per-user limit.'],
  sale_exists: [409, 'A sale with this id already exists.'],
  order_expired: [409, 'The payment window of this order has closed.'],
  order_not_ready: [409, 'The order is still queued; retry in a moment.'],
  payload_too_large: [413, 'The body is too large.'],
  unsupported_media_type: [415, 'Send the body as application/json.'],
  headers_too_large: [431, 'The request headers are too large.'],
  busy: [429, 'The service is busy; retry shortly.'],
  internal: [500, 'Internal error.'],
  unavailable: [503, 'A backing service is unavailable; retry shortly.'],
} as const satisfies Record<string, readonly [number, string]>;

export type ErrorCode = keyof typeof ERRORS;

export class HttpError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  constructor(code: ErrorCode, message?: string) {
    // An answer to a client, not a fault: its stack is never logged, and capturing one for every
    // refused buyer of a sold-out crowd cost a tenth of the API's CPU (bench/, BENCHMARKS.md).
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(message ?? ERRORS[code][1]);
    Error.stackTraceLimit = limit;
    this.code = code;
    this.status = ERRORS[code][0];
  }

  body(): { error: ErrorCode; message: string } {
    return { error: this.code, message: this.message };
  }
}
