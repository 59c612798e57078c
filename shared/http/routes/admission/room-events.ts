// GET /api/sales/:saleId/queue/events: the buyer's place in a waiting room as Server-Sent Events.
// Each API process holds one subscription to ADMISSION_CHANNEL and hands every tick of a sale to
// that sale's streams. A stream knows its buyer's place (read once the room is open; places never
// change after), so a tick gives its position without a Redis call: position = place - admitted.
// Only becoming admitted needs one (the pass's expiry, to sign it). A state change is written at
// once; a position that only moved is written at most once per POSITION_EVERY_MS, which keeps 50,000
// streams at 50,000 writes a second or fewer. The stream ends once the buyer is admitted (the
// event carries the pass) or is out of the line (used, expired, ended).
import type { FastifyPluginCallback } from 'fastify';
import type { RoomTick } from '../../../admission/room/loop.js';
import { HttpError } from '../../../runtime/errors.js';
import { ADMISSION_CHANNEL } from '../../../redis/keys.js';
import { Phase, readPlace, viewOf, type Place, type QueueView } from '../../../admission/room/room.js';
import type { Sale } from '../../../sales/model.js';
import { saleStreamRoute } from '../../streams/feed-stream.js';
import { queueSale, withPass, type QueueDeps } from './queue.js';

export const POSITION_EVERY_MS = 1000;
const OUT_OF_LINE = new Set(['admitted', 'used', 'expired', 'ended']);

export const roomEvents: FastifyPluginCallback<QueueDeps> = (app, deps, done) => {
  const { redis, challenges } = deps;
  saleStreamRoute<RoomTick>(
    app,
    deps,
    {
      path: 'queue',
      kind: 'queue',
      channel: ADMISSION_CHANNEL,
      sale: queueSale,
      refusals: ['no_waiting_room', 'not_in_queue'],
      summary: "The buyer's place in the waiting room as Server-Sent Events; the last event carries the pass",
      data: 'the buyer\'s place: `data: {"saleId", "state", "position", "ahead", "waiting", "estimatedWaitSeconds", "seed", "pass"?, "passExpiresAt"?}`',
      description:
        'A state change comes at once, a new position at most once a second. The stream ends once the buyer is admitted (with the pass), used, expired or ended.',
    },
    async (follow, sale, buyer, reply) => {
      // The place is known once the room is open; before that it is drawn at the opening.
      let rank: number | null = null;
      // From Redis: the place (once open), and the pass when admitted.
      const view = (p: Place) => {
        if (p.open) rank = p.rank;
        return withPass(challenges, viewOf(sale, p), buyer, p.pass);
      };
      await follow<QueueView>(reply, sale.id, buyer, {
        first: async () => {
          const place = await readPlace(redis, sale.id, buyer);
          if (place.rank < 0) throw new HttpError('not_in_queue');
          return view(place);
        },
        read: async () => view(await readPlace(redis, sale.id, buyer)),
        moved: (sent, v) => sent.waiting !== v.waiting || sent.position !== v.position,
        everyMs: POSITION_EVERY_MS,
        final: OUT_OF_LINE,
        onTick: (tick, send, reread) => {
          if (!tick || tick.phase === Phase.NotQueue) return reread();
          if (tick.phase !== Phase.NotStarted && rank === null) return reread();
          if (rank !== null && rank < tick.admitted) return reread();
          send(fromTick(sale, tick, rank));
        },
      });
    },
  );
  done();
};

/** A waiting buyer's view from a tick alone: their place is fixed, the tick says how many went before. */
function fromTick(sale: Sale, tick: RoomTick, rank: number | null): QueueView {
  const open = tick.phase !== Phase.NotStarted;
  return viewOf(sale, {
    rank: rank ?? 0,
    open,
    admitted: tick.admitted,
    total: tick.admitted + tick.waiting,
    pass: -1,
    available: tick.available,
    expired: 0,
    now: tick.at,
  });
}
