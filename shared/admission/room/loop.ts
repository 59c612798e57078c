// A waiting room's part of the admission loop's tick (shared/admission/loop.ts): one admit.lua step
// per room (passes to the next buyers at the sale's rate, within the units left), then one message
// on ADMISSION_CHANNEL for the API's queue streams when the room changed.
import { ADMISSION_CHANNEL } from '../../redis/keys.js';
import { metrics } from '../../runtime/metrics.js';
import type { Sale } from '../../sales/model.js';
import type { ModeStep, StepDeps } from '../mode.js';
import { admitStep, Phase, type AdmitStep } from './room.js';

/** A room with nothing new still publishes this often, so a stream that missed a message catches up. */
const PUBLISH_EVERY_MS = 1000;

/** What a tick tells the streams of a sale's room (shared/http/routes/admission/room-events.ts). */
export interface RoomTick {
  saleId: string;
  phase: Phase;
  admitted: number;
  waiting: number;
  available: number;
  /** The expiry of the passes this tick handed out (ms), 0 when none. */
  passExpiresAt: number;
  /** Redis's TIME of the step (ms): a stream judges the sale's end by it, not by the loop's clock. */
  at: number;
}

export class RoomLoop implements ModeStep {
  private readonly published = new Map<string, { tick: RoomTick; sentAt: number }>();

  constructor(private readonly deps: StepDeps) {}

  /** `now` (the loop's clock) only paces the messages: each room is judged by Redis's TIME in admit.lua. */
  async tick(sales: Sale[], now: number): Promise<RoomTick[]> {
    const { redis, logger } = this.deps;
    const ticks: RoomTick[] = [];
    for (const sale of sales) {
      const step = await admitStep(redis, sale, Math.max(1, sale.admitRatePerSecond!));
      observe(sale, step);
      const tick: RoomTick = {
        saleId: sale.id,
        phase: step.phase,
        admitted: step.admitted,
        waiting: step.waiting,
        available: step.available,
        passExpiresAt: step.passExpiresAt,
        at: step.now,
      };
      if (step.admittedNow > 0)
        logger.debug({ saleId: sale.id, admitted: step.admittedNow, waiting: step.waiting }, 'admitted');
      if (this.news(tick, now)) {
        await redis.publish(ADMISSION_CHANNEL, JSON.stringify(tick));
        ticks.push(tick);
      }
    }
    return ticks;
  }

  // A former leader's last figures would sit beside the new leader's, and the stuck-queue alert
  // takes the max over instances: only the leader exports rooms.
  resign(): void {
    for (const gauge of [
      metrics.queueWaiting,
      metrics.queueAvailable,
      metrics.queuePassesOutstanding,
      metrics.queueAdmittable,
    ])
      gauge.reset();
  }

  /** Publish when the room changed, or after PUBLISH_EVERY_MS of quiet. */
  private news(tick: RoomTick, now: number): boolean {
    const last = this.published.get(tick.saleId);
    const changed =
      !last ||
      last.tick.phase !== tick.phase ||
      last.tick.admitted !== tick.admitted ||
      last.tick.waiting !== tick.waiting ||
      last.tick.available > 0 !== tick.available > 0;
    if (!changed && now - last.sentAt < PUBLISH_EVERY_MS) return false;
    this.published.set(tick.saleId, { tick, sentAt: now });
    return true;
  }
}

function observe({ id: sale, admitOverbook }: Sale, step: AdmitStep): void {
  if (step.phase === Phase.NotQueue) return;
  metrics.queueWaiting.set({ sale }, step.waiting);
  // admit.lua's budget after this step: what the loop should admit next unless the rate holds it
  // back. Waiting buyers with stock left but every pass out is no stuck queue.
  const budget = Math.floor(step.available * admitOverbook! + 1e-9) - step.outstanding;
  metrics.queueAdmittable.set({ sale }, step.phase === Phase.Open ? Math.max(0, Math.min(step.waiting, budget)) : 0);
  metrics.queueAvailable.set({ sale }, step.available);
  metrics.queuePassesOutstanding.set({ sale }, step.outstanding);
  // Incremented by 0 too: the series exists from the first tick, for the stuck-queue alert's increase().
  metrics.queueAdmitted.inc({ sale }, step.admittedNow);
  metrics.queuePassesExpired.inc({ sale }, step.expiredNow);
}
