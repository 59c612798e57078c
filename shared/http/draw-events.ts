// GET /api/sales/:saleId/entries/events: the buyer's entry as Server-Sent Events. Each API process
// holds one subscription to DRAW_CHANNEL and hands every tick of a draw to that draw's streams. A
// stream reads its buyer's entry once (and once more when the draw is made, for the rank); from
// then on a tick alone says the state: ranks up to `through` have their order (whose id is derived
// from the rank), the rest wait until `over`. No Postgres query per stream per tick. A change of
// state is written at once, a new entry count at most once per COUNT_EVERY_MS; the stream ends
// after won or lost.
import type { FastifyPluginCallback } from 'fastify';
import { viewFromTick, type DrawTick, type EntryView } from '../draw.js';
import { HttpError } from '../errors.js';
import { DRAW_CHANNEL } from '../keys.js';
import { buyerEntry, drawSale, type DrawDeps } from './draw.js';
import { saleIdParams } from './sales.js';
import { errorResponses, SECURITY, textResponse } from './schemas.js';
import { SaleFeed } from './sale-feed.js';
import { startStream, streamQuery } from './sse.js';
import { tokenFromQuery } from './url-token.js';

export const COUNT_EVERY_MS = 1000;
const FINAL = new Set(['won', 'lost']);

const schema = {
  summary: 'The buyer\'s entry in the draw as Server-Sent Events, until won or lost',
  description: 'Each event\'s data is the view GET .../entries/me answers. A change of state comes at once, a new entry count at most once a second. '
    + 'The stream ends after won (with the orderId) or lost. The token may come as ?access_token= (EventSource cannot send headers).',
  tags: ['draw'], security: SECURITY.buyer, params: saleIdParams,
  querystring: streamQuery,
  response: {
    200: textResponse('text/event-stream', 'the buyer\'s entry: `data: {"saleId", "state", "ticket", "drawRank", "orderId", "entries"}`'),
    ...errorResponses('invalid_id', 'bad_request', 'unauthorized', 'sale_not_found', 'not_a_draw', 'not_entered', 'busy', 'unavailable'),
  },
};

type TickListener = (tick: DrawTick | null) => void;

type Stream = { Params: { saleId: string }; Querystring: { access_token?: string } };

export const drawEvents: FastifyPluginCallback<DrawDeps> = (app, { pool, redis, auth, limits, saleCache, logger }, done) => {
  const feed = new SaleFeed<DrawTick>(redis, DRAW_CHANNEL, 'draw', 'GET .../entries/me', limits.sseMaxStreams, logger);
  const open = new Set<() => void>();
  app.addHook('preClose', (next) => {
    for (const end of [...open]) end();
    next();
  });
  app.addHook('onClose', () => feed.close());

  app.get<Stream>('/api/sales/:saleId/entries/events', { onRequest: tokenFromQuery, preValidation: auth.buyer, schema }, async (req, reply) => {
    const sale = await drawSale(saleCache, req.params.saleId);
    const buyer = req.buyer;
    let latest: DrawTick | null = null;
    let deliver: TickListener = (t) => void (latest = t ?? latest);
    const leave = feed.join(sale.id, buyer, (t) => deliver(t));
    let entry: EntryView;
    try {
      entry = await buyerEntry(pool, sale.id, buyer);
    } catch (err) {
      leave();
      throw err;
    }
    const { res, end } = startStream(reply, open, leave);
    const ticket = entry.ticket;
    let rank = entry.drawRank;
    let sent: EntryView | undefined;
    let sentAt = 0;
    let reading = false;
    const send = (view: EntryView) => {
      if (!open.has(end)) return;
      const now = Date.now();
      if (sent && sent.state === view.state && (sent.entries === view.entries || now - sentAt < COUNT_EVERY_MS)) return;
      sent = view;
      sentAt = now;
      res.write(`data: ${JSON.stringify(view)}\n\n`);
      if (FINAL.has(view.state)) end();
    };
    // From Postgres: once when the draw is made (the rank), and after the subscription was away.
    const reread = () => {
      if (reading || !open.has(end)) return;
      reading = true;
      buyerEntry(pool, sale.id, buyer)
        .then((v) => {
          rank = v.drawRank;
          send(v);
        })
        .catch(() => {})
        .finally(() => (reading = false));
    };
    deliver = (tick) => {
      // A tick older than the entry read (published before the draw): nothing to say.
      if (tick && !tick.drawn && rank !== null) return;
      const view = tick && viewFromTick(ticket, rank, tick);
      if (view) send(view);
      else reread();
    };
    send(entry);
    if (latest) deliver(latest);
    if (res.destroyed) end();
  });
  done();
};
