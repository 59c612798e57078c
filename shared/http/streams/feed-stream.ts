// One buyer's event stream that follows a SaleFeed, and its route: the waiting room's place
// (routes/room-events.ts) and the draw's entry (routes/draw-events.ts). The stream joins the feed
// before reading the buyer's state, so a tick published during that read is kept and handed on
// once the first view is written. From then on each tick either says the new view by itself, or
// asks for one read of the store (never two at once). A change of state is written at once; a view
// that only moved within its state at most once per `everyMs`; the stream ends after a final state.
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { Auth } from '../../buyers/auth.js';
import type { Config } from '../../config/index.js';
import type { ErrorCode } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/logger.js';
import type { RedisClient } from '../../redis/connect.js';
import type { Sale } from '../../sales/model.js';
import type { SaleCache } from '../sale-cache.js';
import { SaleFeed, type TickListener } from './sale-feed.js';
import { errorResponses, saleIdParams, SECURITY, textResponse } from '../schemas.js';
import { startStream, streamQuery } from './sse.js';
import { tokenFromQuery } from '../url-token.js';

export interface Following<T, V extends { state: string }> {
  /** The buyer's view before the stream starts; throwing refuses the request (no stream is opened). */
  first(): Promise<V>;
  /** The buyer's view from the store, when a tick cannot say it (or the subscription was away: `null`). */
  read(): Promise<V>;
  /** Within one state, whether `view` says anything `sent` did not. */
  moved(sent: V, view: V): boolean;
  everyMs: number;
  final: ReadonlySet<string>;
  /** A tick (or `null` after a reconnect): send the view it gives, call reread, or do neither. */
  onTick(tick: T | null, send: (view: V) => void, reread: () => void): void;
}

/**
 * Registers the feed's streams on `app` (a shutdown ends each; the feed closes with the app) and
 * returns what a route calls to turn its reply into one buyer's stream.
 */
export function feedStreams<T extends { saleId: string }>(app: FastifyInstance, feed: SaleFeed<T>) {
  const open = new Set<() => void>();
  app.addHook('preClose', (next) => {
    for (const end of [...open]) end();
    next();
  });
  app.addHook('onClose', () => feed.close());

  return async function follow<V extends { state: string }>(
    reply: FastifyReply,
    saleId: string,
    buyer: string,
    f: Following<T, V>,
  ): Promise<void> {
    let latest: T | null = null;
    let deliver: TickListener<T> = (t) => void (latest = t ?? latest);
    const leave = feed.join(saleId, buyer, (t) => deliver(t));
    let first: V;
    try {
      first = await f.first();
    } catch (err) {
      leave();
      throw err;
    }
    const { res, end } = startStream(reply, open, leave);
    let sent: V | undefined;
    let sentAt = 0;
    let reading = false;
    // A read asked for during one runs after it: the one in flight may have begun before the change.
    let again = false;
    const send = (view: V) => {
      if (!open.has(end)) return;
      const now = Date.now();
      if (sent && sent.state === view.state && (!f.moved(sent, view) || now - sentAt < f.everyMs)) return;
      sent = view;
      sentAt = now;
      res.write(`data: ${JSON.stringify(view)}\n\n`);
      if (f.final.has(view.state)) end();
    };
    const reread = () => {
      if (!open.has(end)) return;
      if (reading) return void (again = true);
      reading = true;
      f.read()
        .then(send)
        .catch(() => {})
        .finally(() => {
          reading = false;
          if (again) {
            again = false;
            reread();
          }
        });
    };
    deliver = (tick) => f.onTick(tick, send, reread);
    send(first);
    if (latest) deliver(latest);
    if (res.destroyed) end();
  };
}

/** What tells one kind of buyer's stream from another: its route and words, its feed, its sales. */
export interface SaleStream {
  /** The stream is GET /api/sales/:saleId/{path}/events, beside the view it streams, GET .../{path}/me. */
  path: string;
  /** The OpenAPI tag, and the streams' name in messages and logs. */
  kind: string;
  channel: string;
  /** The sale, refused when it is not of this kind. */
  sale(saleCache: SaleCache, id: string): Promise<Sale>;
  refusals: ErrorCode[];
  summary: string;
  /** When a view is sent and when the stream ends. */
  description: string;
  /** What each event's data holds. */
  data: string;
}

type StreamDeps = {
  redis: RedisClient;
  auth: Auth;
  limits: Pick<Config, 'sseMaxStreams'>;
  saleCache: SaleCache;
  logger: Logger;
};
type Stream = { Params: { saleId: string }; Querystring: { access_token?: string } };

/**
 * GET /api/sales/:saleId/{path}/events for a buyer, whose token may come in the query (EventSource
 * cannot send headers): `handler` turns the reply into the stream of `sale` with `follow`, which
 * hands on the feed's ticks. The route's schema is the same for every kind but for its words.
 */
export function saleStreamRoute<T extends { saleId: string }>(
  app: FastifyInstance,
  { redis, auth, limits, saleCache, logger }: StreamDeps,
  s: SaleStream,
  handler: (follow: ReturnType<typeof feedStreams<T>>, sale: Sale, buyer: string, reply: FastifyReply) => Promise<void>,
): void {
  const view = `GET .../${s.path}/me`;
  const follow = feedStreams(app, new SaleFeed<T>(redis, s.channel, s.kind, view, limits.sseMaxStreams, logger));
  const schema = {
    summary: s.summary,
    description: `Each event's data is the view ${view} answers. ${s.description} The token may come as ?access_token= (EventSource cannot send headers).`,
    tags: [s.kind],
    security: SECURITY.buyer,
    params: saleIdParams,
    querystring: streamQuery,
    response: {
      200: textResponse('text/event-stream', s.data),
      ...errorResponses(
        'invalid_id',
        'bad_request',
        'unauthorized',
        'sale_not_found',
        ...s.refusals,
        'busy',
        'unavailable',
      ),
    },
  };
  app.get<Stream>(
    `/api/sales/:saleId/${s.path}/events`,
    { onRequest: tokenFromQuery, preValidation: auth.buyer, schema },
    async (req, reply) => {
      await handler(follow, await s.sale(saleCache, req.params.saleId), req.buyer.id, reply);
    },
  );
}
