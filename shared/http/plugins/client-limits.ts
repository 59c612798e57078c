// What one slow or greedy client may hold: open connections per address, and time to send a body.
// Without these, a client that opens connections and trickles bodies ties up the process for
// REQUEST_TIMEOUT_MS at a time while costing itself nothing.
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyHttpOptions } from 'fastify';
import type { Config } from '../../config/index.js';
import { HttpError } from '../../runtime/errors.js';
import { PAYMENT_ID_MAX } from '../../payments/provider.js';

/** The server's own limits on a request: its size, its ids, and how long it may take to arrive. */
export function serverLimits(config: Pick<Config, 'requestTimeoutMs'>): FastifyHttpOptions<Server> {
  return {
    // The longest id in a path is a recorded payment's (the refund route); every other id's own
    // pattern is far shorter and refuses anything longer as invalid_id.
    bodyLimit: 16 * 1024,
    routerOptions: { maxParamLength: PAYMENT_ID_MAX },
    return503OnClosing: true,
    requestTimeout: config.requestTimeoutMs,
    // Node enforces these only every connectionsCheckingInterval (30 s by default), and with its
    // headersTimeout (60 s) above requestTimeout it uses the larger for the body: a client that
    // stalls mid-body would hold its connection for up to 90 s (the body deadline is shorter).
    http: {
      headersTimeout: config.requestTimeoutMs,
      connectionsCheckingInterval: Math.min(1000, config.requestTimeoutMs),
    },
  };
}

/** An error answered on the raw socket, in our shape, closing the connection: for clients the HTTP server never hands to a route. */
export function rawAnswer(e: HttpError, extra = ''): string {
  const body = JSON.stringify(e.body());
  return `HTTP/1.1 ${e.status} ${e.code}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}connection: close\r\n\r\n${body}`;
}

const REFUSED = rawAnswer(
  new HttpError('busy', 'Too many open connections from this address; retry shortly.'),
  'retry-after: 1\r\n',
);

/**
 * Past `max` open connections from one address, a new one is answered 429 busy and closed before
 * the HTTP server sees it: it never reaches a route, so it cannot buy, and it counts against
 * nobody else. The server's own 'connection' listeners are moved behind the gate.
 */
export function capConnectionsPerClient(server: Server, max: number): void {
  if (max <= 0) return;
  const open = new Map<string, number>();
  const listeners = server.listeners('connection') as ((socket: Socket) => void)[];
  server.removeAllListeners('connection');
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? '';
    const held = open.get(address) ?? 0;
    if (held >= max) {
      refuse(socket);
      return;
    }
    open.set(address, held + 1);
    socket.once('close', () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left === 0) open.delete(address);
      else open.set(address, left);
    });
    for (const listener of listeners) listener.call(server, socket);
  });
}

function refuse(socket: Socket): void {
  socket.on('error', () => socket.destroy());
  // Whatever the client already sent is read and dropped, so the close is a FIN after our answer,
  // not a reset that could discard the answer; a client that never hangs up is cut off soon after.
  socket.resume();
  socket.once('end', () => socket.destroy());
  socket.setTimeout(1000, () => socket.destroy());
  socket.end(REFUSED);
}

/**
 * The body must be complete within `ms`: while it is awaited, its parse fails with 408
 * request_timeout, and the answer closes the connection; once a request was answered before its
 * body was read (a sold-out purchase, a refusal in onRequest), the connection is closed, where
 * Node would wait REQUEST_TIMEOUT_MS for the rest before reading the next request. Until the body
 * is in, a request holds no in-flight slot (see load-shedding.ts), so this bounds only how long a
 * trickling client keeps its connection. Looked at once the parser has read what came with the
 * headers: most bodies are complete by then and cost nothing more than this push.
 */
export function bodyDeadline(req: IncomingMessage, res: ServerResponse, ms: number): void {
  if (owed.push({ req, res, ms }) === 1) setImmediate(checkOwed);
}

const owed: { req: IncomingMessage; res: ServerResponse; ms: number }[] = [];

function checkOwed(): void {
  for (const { req, res, ms } of owed) if (!req.complete) bodies.watch(req as Body, res, ms);
  owed.length = 0;
}

/** The body is in (the route's preValidation): its deadline is dropped at once, not at the next sweep. */
export function bodyArrived(req: IncomingMessage): void {
  bodies.done(req as Body);
}

type Body = IncomingMessage & { [DEADLINE]?: { at: number; res: ServerResponse; ms: number } };
const DEADLINE = Symbol('bodyDeadline');

/**
 * Every body in flight, checked by one sweep a few times a second: a timer and two listeners per
 * request cost about 4 µs of a sold-out answer's 50. A body that arrives leaves the set at once
 * (bodyArrived); one whose request ended otherwise (refused early, client gone) at the next sweep;
 * one past its deadline fails at most a tick late, or, answered already, closes its connection.
 */
class BodyDeadlines {
  private readonly watched = new Set<Body>();
  private timer: NodeJS.Timeout | undefined;
  private tickMs = 250;

  watch(req: Body, res: ServerResponse, ms: number): void {
    req[DEADLINE] = { at: Date.now() + ms, res, ms };
    this.watched.add(req);
    // A tenth of the shortest deadline, so a deadline is kept to within 10%.
    const tick = Math.max(10, Math.min(250, Math.floor(ms / 10)));
    if (this.timer && tick >= this.tickMs) return;
    clearInterval(this.timer);
    this.tickMs = tick;
    this.timer = setInterval(() => this.sweep(), tick).unref();
  }

  done(req: Body): void {
    this.watched.delete(req);
  }

  private sweep(): void {
    const now = Date.now();
    for (const req of this.watched) {
      const d = req[DEADLINE]!;
      // An answer given before the body leaves the body owed on the connection (which inject()
      // does not have); one not given yet, on the response.
      const gone = d.res.writableEnded ? req.socket?.destroyed !== false : d.res.destroyed;
      if (req.complete || gone) {
        this.watched.delete(req);
      } else if (now >= d.at) {
        this.watched.delete(req);
        // Answered already: nothing is left to say, and the connection cannot take another request.
        if (d.res.writableEnded) req.socket.destroy();
        else expire(req, d.res, d.ms);
      }
    }
    if (this.watched.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
      this.tickMs = 250;
    }
  }
}

const bodies = new BodyDeadlines();

function expire(req: IncomingMessage, res: ServerResponse, ms: number): void {
  // Only while the body parser listens (a request answered early, 413 or 415, is done with it).
  if (req.listenerCount('error') === 0) return;
  res.shouldKeepAlive = false;
  // The status line of a request REQUEST_TIMEOUT_MS cuts off (errors.ts onClientError): a client
  // sees one kind of 408, whichever deadline came first.
  res.statusMessage = 'request_timeout';
  req.emit('error', new HttpError('request_timeout', `The request body did not arrive within ${ms} ms.`));
}
