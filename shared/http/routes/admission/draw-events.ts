// GET /api/sales/:saleId/entries/events: the buyer's entry as Server-Sent Events. Each API process
// holds one subscription to DRAW_CHANNEL and hands every tick of a draw to that draw's streams. A
// stream reads its buyer's entry once (and once more when the draw is made, for the rank); from
// then on a tick alone says the state: ranks up to `through` have their order (whose id is derived
// from the rank), the rest wait until `over`; on a sale of several variants, the stream reads its
// entry again only when a tick shows a unit given of a variant it wants (draw.ts viewFromTick).
// No Postgres query per stream per quiet tick. A change of
// state is written at once, a new entry count at most once per COUNT_EVERY_MS; the stream ends
// after won or lost.
import type { FastifyPluginCallback } from 'fastify';
import {
  viewFromTick,
  wonMark,
  type DrawTick,
  type EntryView,
  type StreamEntry,
} from '../../../admission/draw/draw.js';
import { DRAW_CHANNEL } from '../../../redis/keys.js';
import { saleStreamRoute } from '../../streams/feed-stream.js';
import { buyerEntry, drawSale, type DrawDeps } from './draw.js';

export const COUNT_EVERY_MS = 1000;
const FINAL = new Set(['won', 'lost']);

export const drawEvents: FastifyPluginCallback<DrawDeps> = (app, deps, done) => {
  saleStreamRoute<DrawTick>(
    app,
    deps,
    {
      path: 'entries',
      kind: 'draw',
      channel: DRAW_CHANNEL,
      sale: drawSale,
      refusals: ['not_a_draw', 'not_entered'],
      summary: "The buyer's entry in the draw as Server-Sent Events, until won or lost",
      data: 'the buyer\'s entry: `data: {"saleId", "state", "ticket", "secret", "drawRank", "orderId", "variant", "secondChoice", "sku", "entries"}`',
      description:
        'A change of state comes at once, a new entry count at most once a second. The stream ends after won (with the orderId) or lost.',
    },
    async (follow, sale, buyer, reply) => {
      let entry: StreamEntry = { ticket: '', secret: null, variant: '', secondChoice: null };
      let rank: number | null = null;
      // A sale of several variants: the tick's units given of this entry's choices when it was last read.
      let seen: string | undefined;
      // From Postgres: before the stream, once when the draw is made (the rank), and after the subscription was away.
      const read = async () => {
        const view = await buyerEntry(deps.pool, sale.id, buyer);
        entry = { ticket: view.ticket, secret: view.secret, variant: view.variant, secondChoice: view.secondChoice };
        rank = view.drawRank;
        return view;
      };
      await follow<EntryView>(reply, sale.id, buyer, {
        first: read,
        read,
        moved: (sent, view) => sent.entries !== view.entries,
        everyMs: COUNT_EVERY_MS,
        final: FINAL,
        onTick: (tick, send, reread) => {
          // A tick older than the entry read (published before the draw): nothing to say.
          if (tick && !tick.drawn && rank !== null) return;
          const view = tick && viewFromTick(entry, rank, tick, seen);
          if (view) return send(view);
          if (tick?.won && rank !== null) seen = wonMark(entry, tick);
          reread();
        },
      });
    },
  );
  done();
};
