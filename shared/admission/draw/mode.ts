// The draw (admission 'draw') as an admission mode: buyers enter, the loop makes the draw and
// reserves each winner's unit itself (draw/loop.ts, purchase.lua's gate 'draw'), so no purchase
// through the API ever buys.
import type { FastifyPluginCallback } from 'fastify';
import { draw } from '../../http/routes/admission/draw.js';
import { drawEvents } from '../../http/routes/admission/draw-events.js';
import { drawRecord } from '../../http/routes/admission/draw-record.js';
import { drawOnly } from '../../purchase/rules/draw-only.js';
import { DRAW_CHANNEL } from '../../redis/keys.js';
import type { RedisClient } from '../../redis/connect.js';
import type { Pool } from '../../runtime/db.js';
import type { Sale } from '../../sales/model.js';
import type { ModeRouteDeps } from '../../http/routes/admission/deps.js';
import type { AdmissionMode, ModeStep } from '../mode.js';
import { drawFigures, drawFiguresSchema } from './live.js';
import { DrawLoop, drawTick } from './loop.js';
import { readProgress } from './queries.js';
import { endDraw } from './steps.js';

const routes: FastifyPluginCallback<ModeRouteDeps> = (app, deps, done) => {
  void app.register(draw, deps);
  void app.register(drawRecord, deps);
  void app.register(drawEvents, deps);
  done();
};

/** The draw's tick, published now rather than at the admission loop's next look (a hint: the streams re-read Postgres). */
async function tellEntrants(pool: Pool, redis: RedisClient, sale: Sale): Promise<void> {
  const p = await readProgress(pool, sale.id);
  await redis.publish(DRAW_CHANNEL, JSON.stringify(drawTick(sale, p, Date.now())));
}

export const drawMode: AdmissionMode = {
  name: 'draw',
  label: 'Draw',
  gate: 'draw',
  seeded: true,
  rule: drawOnly,
  step: (deps): ModeStep => {
    const draws = new DrawLoop(deps);
    return {
      beside: true,
      // DrawLoop.tick never throws.
      tick: async (sales, now) => (await Promise.all(sales.map((s) => draws.tick(s, now)))).filter((t) => t !== null),
      keepOnly: (ids) => draws.keepOnly(ids),
      forget: () => draws.forget(),
    };
  },
  // draw verify recomputes the award from each variant's stock: a change would make the record disagree.
  fixedStock: true,
  live: { key: 'draw', schema: drawFiguresSchema, figures: (pool, _redis, sale) => drawFigures(pool, sale.id) },
  routes,
  // Public once the draw is made, as the sale's row in Postgres says (drawn_at): never by a
  // process's clock, which could show it while another API still takes entries.
  seedPublic: async (_redis, sale) => sale.drawnAt !== null,
  // Entries stop with the sale, in its transaction, and every entrant without an order has lost;
  // the entry streams are told at once.
  ending: async (client, redis, sale) => void (await endDraw(client, redis, sale)),
  ended: (pool, redis, sale) => tellEntrants(pool, redis, sale),
};
