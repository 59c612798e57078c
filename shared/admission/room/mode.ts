// The waiting room (admission 'queue') as an admission mode: buyers join, the loop hands out
// passes at the sale's rate (room/loop.ts), and a purchase needs the buyer's latest unused pass.
import type { FastifyPluginCallback } from 'fastify';
import { queue } from '../../http/routes/admission/queue.js';
import { roomEvents } from '../../http/routes/admission/room-events.js';
import { admissionPass } from '../../purchase/rules/admission-pass.js';
import { saleKeys } from '../../redis/keys.js';
import type { ModeRouteDeps } from '../../http/routes/admission/deps.js';
import type { AdmissionMode } from '../mode.js';
import { roomFigures, roomFiguresSchema } from './live.js';
import { RoomLoop } from './loop.js';

const routes: FastifyPluginCallback<ModeRouteDeps> = (app, deps, done) => {
  void app.register(queue, deps);
  void app.register(roomEvents, deps);
  done();
};

export const queueMode: AdmissionMode = {
  name: 'queue',
  label: 'Waiting room',
  gate: 'pass',
  seeded: true,
  // join_queue.lua places each joiner in the pre-queue by it.
  seedInMeta: true,
  rule: admissionPass,
  step: (deps) => new RoomLoop(deps),
  live: {
    key: 'room',
    schema: roomFiguresSchema,
    figures: (_pool, redis, sale, now) => roomFigures(redis, sale.id, now),
  },
  routes,
  // The room has opened when admit.lua has set its phase (at the start, by the sale's master's
  // clock): the pre-queue's places are final then, so its seed is public and anyone can redo the
  // order, sha1(seed + ':' + buyer), from it. Before, the seed would let a joiner pick a good place.
  seedPublic: async (redis, sale) => (await redis.hget(saleKeys(sale.id).room, 'phase')) === 'open',
};
