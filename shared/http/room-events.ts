// GET /api/sales/:saleId/queue/events: the buyer's place in a waiting room as Server-Sent Events.
// Each API process holds one subscription to ADMISSION_CHANNEL and hands every tick of a sale to
// that sale's streams. A stream knows its buyer's place (read once the room is open; places never
// change after), so a tick gives its position without a Redis call: position = place - admitted.
// Only becoming admitted needs one (the pass's expiry, to sign it). A state change is written at
// once; a position that only moved is written at most once per POSITION_EVERY_MS, which keeps 50,000
// streams at 50,000 writes a second or fewer. The stream ends once the buyer is admitted (the
// event carries the pass) or is out of the line (used, expired, ended).
import type { FastifyPluginCallback } from 'fastify';
import type { RoomTick } from '../admission.js';
import { HttpError } from '../errors.js';
import { ADMISSION_CHANNEL } from '../keys.js';
import { Phase, readPlace, viewOf, type QueueView } from '../room.js';
import type { Sale } from '../sales.js';
import { queueSale, withPass, type QueueDeps } from './queue.js';
import { saleIdParams } from './sales.js';
import { errorResponses, SECURITY, textResponse } from './schemas.js';
import { SaleFeed } from './sale-feed.js';
import { startStream, streamQuery } from './sse.js';
import { tokenFromQuery } from './url-token.js';

export const POSITION_EVERY_MS = 1000;
const OUT_OF_LINE = new Set(['admitted', 'used', 'expired', 'ended']);

const schema = {
  summary: 'The buyer\'s place in the waiting room as Server-Sent Events; the last event carries the pass',
  description: 'Each event\'s data is the view GET .../queue/me answers. A state change comes at once, a new position at most once a second. '
    + 'The stream ends once the buyer is admitted (with the pass), used, expired or ended. The token may come as ?access_token= (EventSource cannot send headers).',
  tags: ['queue'], security: SECURITY.buyer, params: saleIdParams,
  querystring: streamQuery,
  response: {
    200: textResponse('text/event-stream', 'the buyer\'s place: `data: {"saleId", "state", "position", "ahead", "waiting", "estimatedWaitSeconds", "pass"?, "passExpiresAt"?}`'),
    ...errorResponses('invalid_id', 'bad_request', 'unauthorized', 'sale_not_found', 'no_waiting_room', 'not_in_queue', 'busy', 'unavailable'),
  },
};

type TickListener = (tick: RoomTick | null) => void;

type Stream = { Params: { saleId: string }; Querystring: { access_token?: string } };

export const roomEvents: FastifyPluginCallback<QueueDeps> = (app, { redis, auth, limits, saleCache, challenges, logger }, done) => {
  const feed = new SaleFeed<RoomTick>(redis, ADMISSION_CHANNEL, 'queue', 'GET .../queue/me', limits.sseMaxStreams, logger);
  const open = new Set<() => void>();
  app.addHook('preClose', (next) => {
    for (const end of [...open]) end();
    next();
  });
  app.addHook('onClose', () => feed.close());

  app.get<Stream>('/api/sales/:saleId/queue/events', { onRequest: tokenFromQuery, preValidation: auth.buyer, schema }, async (req, reply) => {
    const sale = await queueSale(saleCache, req.params.saleId);
    const buyer = req.buyer;
    let latest: RoomTick | null = null;
    let deliver: TickListener = (t) => void (latest = t ?? latest);
    const leave = feed.join(sale.id, buyer, (t) => deliver(t));
    let place;
    try {
      place = await readPlace(redis, sale.id, buyer);
      if (place.rank < 0) throw new HttpError('not_in_queue');
    } catch (err) {
      leave();
      throw err;
    }

    const { res, end } = startStream(reply, open, leave);

    // The place is known once the room is open; before that it is drawn at the opening.
    let rank: number | null = place.open ? place.rank : null;
    let sent: QueueView | undefined;
    let sentAt = 0;
    let reading = false;
    const send = (view: QueueView) => {
      if (!open.has(end)) return;
      const now = Date.now();
      const moved = !sent || sent.state !== view.state || sent.waiting !== view.waiting || sent.position !== view.position;
      if (!moved || (sent && sent.state === view.state && now - sentAt < POSITION_EVERY_MS)) return;
      sent = view;
      sentAt = now;
      res.write(`data: ${JSON.stringify(view)}\n\n`);
      if (OUT_OF_LINE.has(view.state)) end();
    };
    // From Redis: the place (once open), and the pass when admitted.
    const reread = () => {
      if (reading || !open.has(end)) return;
      reading = true;
      readPlace(redis, sale.id, buyer)
        .then(async (p) => {
          if (p.open) rank = p.rank;
          send(await withPass(challenges, viewOf(sale, p, Date.now()), buyer, p.pass));
        })
        .catch(() => {})
        .finally(() => (reading = false));
    };
    deliver = (tick) => {
      if (!tick || tick.phase === Phase.NotQueue) return reread();
      if (tick.phase !== Phase.NotStarted && rank === null) return reread();
      if (rank !== null && rank < tick.admitted) return reread();
      send(fromTick(sale, tick, rank));
    };
    send(await withPass(challenges, viewOf(sale, place, Date.now()), buyer, place.pass));
    if (latest) deliver(latest);
    if (res.destroyed) end();
  });
  done();
};

/** A waiting buyer's view from a tick alone: their place is fixed, the tick says how many went before. */
function fromTick(sale: Sale, tick: RoomTick, rank: number | null): QueueView {
  const open = tick.phase !== Phase.NotStarted;
  return viewOf(sale, {
    rank: rank ?? 0, open, admitted: tick.admitted, total: tick.admitted + tick.waiting, pass: -1, available: tick.available, expired: 0,
  }, tick.at);
}
