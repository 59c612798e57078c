// Load shedding: past maxInflight requests in hand, answer 429 at once instead of queueing without
// bound; a buyer retrying a moment later does better than one waiting in a queue. With it, what
// one client may hold: its open connections, and the time to send a body (client-limits.ts).
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyReply } from 'fastify';
import type { Config } from '../../config/index.js';
import { HttpError } from '../../runtime/errors.js';
import { purchaseOutcome } from '../../runtime/metrics.js';
import { PURCHASE_URL } from '../routes/purchase.js';
import { bodyArrived, bodyDeadline, capConnectionsPerClient } from './client-limits.js';
import fp from 'fastify-plugin';

type Limits = Pick<Config, 'maxInflight' | 'maxConnectionsPerClient' | 'bodyTimeoutMs'>;

/** Paths served whatever the load: probes and metrics must answer during a storm. */
const UNSHED = new Set(['/healthz', '/readyz', '/metrics']);
/** Methods whose body fastify never reads. */
const BODYLESS = new Set(['GET', 'HEAD', 'TRACE']);
const pathOf = (url: string): string => {
  const q = url.indexOf('?');
  return q === -1 ? url : url.slice(0, q);
};

/**
 * Slots are counted without a listener per request (one cost about 4 µs of a sold-out answer's
 * 50): a response holds its slot until onResponse (it finished or failed) or until its connection
 * closes, which a listener per connection catches for all of that connection's requests at once.
 */
const HELD = Symbol('slotsHeld');
/** A connection: how many of its requests hold a slot (0 from its close on: their slots came back then). */
type Conn = Socket & { [HELD]?: number };
/** A response: its connection while it holds a slot, and how to give the slot back (its app's release). */
type Holder = ServerResponse & { [HELD]?: Conn | null; [RELEASE]?: (res: Holder) => void };
const RELEASE = Symbol('release');

/**
 * Gives the request's slot back before its response ends: for a long-lived stream, once its
 * headers are out. Its work from then on is a write now and then, and holding a slot for hours
 * would let a few hundred open streams shed every purchase.
 */
export function releaseSlot(reply: FastifyReply): void {
  const res = reply.raw as Holder;
  res[RELEASE]?.(res);
}

export const loadShedding = fp<{ limits: Limits }>(
  (app, { limits }, done) => {
    // Wired on the server, not as a hook: inject() has no connections, and a refused connection
    // must never reach the router.
    capConnectionsPerClient(app.server, limits.maxConnectionsPerClient);
    // A body gets bodyTimeoutMs once its headers are in, whatever answers it, and however early;
    // requests without one go straight on.
    app.addHook('onRequest', (req, reply, next) => {
      const { headers } = req;
      const hasBody =
        headers['transfer-encoding'] !== undefined ||
        (headers['content-length'] !== undefined && headers['content-length'] !== '0');
      if (hasBody && !BODYLESS.has(req.method)) bodyDeadline(req.raw, reply.raw, limits.bodyTimeoutMs);
      next();
    });

    // A slot is taken only once the body is in: a client trickling its body holds a connection
    // (capped per address, cut off at the body deadline) but never a slot real buyers need.
    let inflight = 0;
    const release = (res: Holder) => {
      const conn = res[HELD];
      if (!conn) return;
      res[HELD] = null;
      // Zero once the connection closed: its requests' slots came back then.
      if (conn[HELD]! > 0) {
        conn[HELD]!--;
        inflight--;
      }
    };
    const closed = function (this: Conn) {
      inflight -= this[HELD]!;
      this[HELD] = 0;
    };
    app.addHook('onResponse', (_req, reply, next) => {
      release(reply.raw as Holder);
      next();
    });
    app.addHook('preValidation', (req, reply, next) => {
      bodyArrived(req.raw);
      const conn = req.raw.socket as Conn;
      // Gone already (its close event has fired): it would never give the slot back.
      if (reply.raw.destroyed || conn.destroyed) return next();
      if (conn[HELD] === undefined) {
        conn[HELD] = 0;
        conn.once('close', closed);
      }
      conn[HELD]++;
      inflight++;
      const res = reply.raw as Holder;
      res[HELD] = conn;
      res[RELEASE] = release;
      if (inflight > limits.maxInflight && !UNSHED.has(pathOf(req.url))) {
        if (req.routeOptions.url === PURCHASE_URL) purchaseOutcome('busy').inc();
        const e = new HttpError('busy');
        void reply.code(e.status).header('retry-after', '1').send(e.body());
        return;
      }
      next();
    });
    done();
  },
  { name: 'flashsale-load-shedding', fastify: '5.x' },
);
