// One buyer's event stream that follows a SaleFeed: the waiting room's place (room-events.ts) and
// the draw's entry (draw-events.ts). The stream joins the feed before reading the buyer's state, so
// a tick published during that read is kept and handed on once the first view is written. From
// then on each tick either says the new view by itself, or asks for one read of the store (never
// two at once). A change of state is written at once; a view that only moved within its state at
// most once per `everyMs`; the stream ends after a final state.
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { SaleFeed, TickListener } from './sale-feed.js';
import { startStream } from './sse.js';

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

  return async function follow<V extends { state: string }>(reply: FastifyReply, saleId: string, buyer: string, f: Following<T, V>): Promise<void> {
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
      if (reading || !open.has(end)) return;
      reading = true;
      f.read()
        .then(send)
        .catch(() => {})
        .finally(() => (reading = false));
    };
    deliver = (tick) => f.onTick(tick, send, reread);
    send(first);
    if (latest) deliver(latest);
    if (res.destroyed) end();
  };
}
