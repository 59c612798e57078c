// A draw's part of the admission loop's tick (shared/admission/loop.ts): which step is due (admission/draw/steps.ts)
// and the DrawTick for the entry streams. What it knows of each draw is kept between ticks, so a
// draw costs Postgres queries only when something happens (the draw, an award, the end) or after
// a failure; a quiet tick is one GET of the units left, and a draw that is over costs nothing.
import type { Logger } from '../../runtime/logger.js';
import { DRAW_CHANNEL, saleKeys } from '../../redis/keys.js';
import type { DrawTick } from './draw.js';
import { readProgress, type Progress } from './queries.js';
import { awardUnits, endBackfill, makeDraw, type DrawDeps } from './steps.js';
import type { Sale } from '../../sales/model.js';

/** A draw with nothing new still publishes this often, so a stream that missed a message catches up. */
const PUBLISH_EVERY_MS = 1000;
/** How often the entry count is re-read while entries are open. */
const COUNT_EVERY_MS = 1000;
/** How long a draw's failing step waits before it is tried again. */
const RETRY_MS = 1000;

interface Known {
  progress?: Progress;
  /** Postgres's clock minus the loop's, at the last read: the draw's times are judged on Postgres's. */
  offset: number;
  /** Record awards a failed step may have left before awarding more. */
  recheck: boolean;
  countedAt: number;
  retryAt: number;
  sent?: DrawTick;
  sentAt: number;
  /** A sale of several variants: units left and units come back, as read before the last award's pass. */
  passed?: string;
}

/** What a draw's entry streams are told of its progress. */
export function drawTick(sale: Sale, p: Progress, at: number): DrawTick {
  const tick: DrawTick = { saleId: sale.id, drawn: p.drawn, entries: p.entries, through: p.through, over: p.over, at };
  if (sale.variants.length > 1) tick.won = p.won;
  return tick;
}

export class DrawLoop {
  private readonly known = new Map<string, Known>();

  constructor(private readonly deps: DrawDeps & { logger: Logger }) {}

  /** Forgets what it knew: a loop that has just become the leader, where another may have failed mid-step. */
  forget(): void {
    this.known.clear();
  }

  /** Forgets the draws no longer among the loop's sales (over, settled). */
  keepOnly(saleIds: Set<string>): void {
    for (const id of this.known.keys()) if (!saleIds.has(id)) this.known.delete(id);
  }

  /** One tick of one draw: the step due, and the tick published if it says something new. Never throws. */
  async tick(sale: Sale, now: number): Promise<DrawTick | null> {
    let k = this.known.get(sale.id);
    if (!k) this.known.set(sale.id, (k = { offset: 0, recheck: true, countedAt: 0, retryAt: 0, sentAt: 0 }));
    if (now < k.retryAt) return null;
    try {
      const progress = await this.step(sale, k, now);
      const tick = drawTick(sale, progress, now);
      if (!this.news(k, tick, now)) return null;
      await this.deps.redis.publish(DRAW_CHANNEL, JSON.stringify(tick));
      return tick;
    } catch (err) {
      k.recheck = true;
      k.progress = undefined;
      k.retryAt = now + RETRY_MS;
      this.deps.logger.warn({ err, saleId: sale.id }, 'draw step failed');
      return null;
    }
  }

  private async step(sale: Sale, k: Known, now: number): Promise<Progress> {
    const { pool, redis } = this.deps;
    const reread = async () => {
      k.progress = await readProgress(pool, sale.id);
      k.offset = k.progress.dbNow - now;
      return k.progress;
    };
    let p = k.progress ?? (await reread());
    // The loop's clock may be off by seconds: when a step is due is read on Postgres's, which then
    // decides each step in its transaction. `now` stays the loop's for its own pacing.
    const at = () => now + k.offset;
    // An early end (sales/admin.ts endSale) finishes the draw outside the loop: look again.
    if (!p.over && sale.endsAt && at() >= sale.endsAt.getTime()) p = await reread();
    if (p.over) return p;
    if (!p.drawn) {
      if (at() < sale.entriesCloseAt!.getTime() || at() < sale.startsAt.getTime()) {
        if (now - k.countedAt >= COUNT_EVERY_MS) {
          k.countedAt = now;
          // Redis's copy: a count for the streams only (the draw reads Postgres).
          p.entries = Math.max(p.entries, await redis.scard(saleKeys(sale.id).entries));
        }
        return p;
      }
      const ranked = await makeDraw(pool, sale, at());
      this.deps.logger.info({ saleId: sale.id, ranked }, 'draw made');
      p = await reread();
    }
    if (at() >= sale.backfillUntil!.getTime()) {
      const lost = await endBackfill(this.deps, sale, at());
      this.deps.logger.info({ saleId: sale.id, lost }, 'draw over: backfill ended');
      return reread();
    }
    if (k.recheck || (p.waiting > 0 && (await this.worthAPass(sale, k)))) {
      const awarded = await awardUnits(this.deps, sale, at(), k.recheck);
      k.recheck = false;
      if (awarded > 0) this.deps.logger.debug({ saleId: sale.id, awarded }, 'draw awarded units');
      return reread();
    }
    return p;
  }

  /**
   * Whether units are left for those waiting. On a sale of several variants, those left may be
   * wanted by nobody waiting: a pass is tried again only once units are left and something changed
   * since the last one (a unit given, or one come back), so a quiet tick stays one read of Redis.
   */
  private async worthAPass(sale: Sale, k: Known): Promise<boolean> {
    const keys = saleKeys(sale.id);
    if (sale.variants.length <= 1) return Number((await this.deps.redis.get(keys.available)) ?? 0) > 0;
    const [available, back] = await this.deps.redis.mget(keys.available, keys.restoredQty);
    if (!(Number(available ?? 0) > 0)) return false;
    const mark = `${available}:${back ?? 0}`;
    if (mark === k.passed) return false;
    k.passed = mark;
    return true;
  }

  /** Publish when the draw changed, or after PUBLISH_EVERY_MS of quiet. */
  private news(k: Known, tick: DrawTick, now: number): boolean {
    const last = k.sent;
    const changed =
      !last ||
      last.drawn !== tick.drawn ||
      last.entries !== tick.entries ||
      last.through !== tick.through ||
      JSON.stringify(last.won) !== JSON.stringify(tick.won) ||
      last.over !== tick.over;
    if (!changed && now - k.sentAt < PUBLISH_EVERY_MS) return false;
    k.sent = tick;
    k.sentAt = now;
    return true;
  }
}
