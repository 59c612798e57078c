// What one slow or greedy client may hold: open connections per address, and time to send a body.
// Without these, a client that opens connections and trickles bodies ties up the process for
// REQUEST_TIMEOUT_MS at a time while costing itself nothing.
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyHttpOptions } from 'fastify';
import type { Config } from '../config.js';
import { HttpError } from '../errors.js';

/** The server's own limits on a request: its size, its ids, and how long it may take to arrive. */
export function serverLimits(config: Pick<Config, 'requestTimeoutMs'>): FastifyHttpOptions<Server> {
  return {
    bodyLimit: 16 * 1024, routerOptions: { maxParamLength: 256 }, return503OnClosing: true,
    requestTimeout: config.requestTimeoutMs,
    // Node enforces these only every connectionsCheckingInterval (30 s by default), and with its
    // headersTimeout (60 s) above requestTimeout it uses the larger for the body: a client that
    // stalls mid-body would hold its connection for up to 90 s (the body deadline is shorter).
    http: { headersTimeout: config.requestTimeoutMs, connectionsCheckingInterval: Math.min(1000, config.requestTimeoutMs) },
  };
}

/** An error answered on the raw socket, in our shape, closing the connection: for clients the HTTP server never hands to a route. */
export function rawAnswer(e: HttpError, extra = ''): string {
  const body = JSON.stringify(e.body());
  return `HTTP/1.1 ${e.status} ${e.code}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}connection: close\r\n\r\n${body}`;
}

const REFUSED = rawAnswer(new HttpError('busy', 'Too many open connections from this address; retry shortly.'), 'retry-after: 1\r\n');

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
 * Fails the body's parse with 408 request_timeout if the body is not complete within `ms`; the
 * answer then closes the connection. Until the body is in, a request holds no in-flight slot (see
 * load-shedding.ts), so this bounds only how long a trickling client keeps its connection.
 */
export function bodyDeadline(req: IncomingMessage, res: ServerResponse, ms: number): void {
  // A timer and an error event on the request itself: wrapping every body in a PassThrough that
  // could be failed instead cost about 15 us a request, a quarter of a sold-out answer.
  const timer = setTimeout(() => {
    // Only while the body parser listens (a request answered early, 413 or 415, is done with it).
    if (req.complete || req.listenerCount('error') === 0) return;
    res.shouldKeepAlive = false;
    // The status line of a request REQUEST_TIMEOUT_MS cuts off (errors.ts onClientError): a client
    // sees one kind of 408, whichever deadline came first.
    res.statusMessage = 'request_timeout';
    req.emit('error', new HttpError('request_timeout', `The request body did not arrive within ${ms} ms.`));
  }, ms);
  const done = () => clearTimeout(timer);
  req.once('end', done);
  res.once('close', done);
}
