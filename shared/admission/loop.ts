// The admission loop: every TICK_MS, for each unsettled sale with a waiting room, one admit.lua
// step (passes to the next buyers at the sale's rate, within the units left), then one message on
// ADMISSION_CHANNEL for the API's queue streams. One loop admits for the whole deployment: each
// instance asks for a Redis lease every tick and steps only while it holds it; a loop that dies
// loses it after LEASE_MS and another takes over. admit.lua itself stays correct with two loops
// (its rate is a bucket refilled by elapsed time, its admitted count only grows); the lease only
// saves the work. A draw's tick is shared/admission/draw/loop.ts's (the draw, its awards and backfill, a
// DrawTick on DRAW_CHANNEL). Sales are re-read from Postgres every SALES_REFRESH_MS, beside the
// ticks: the rooms live in Redis, so a Postgres outage or a slow query only delays learning of new
// sales, never the passes of the ones known. A draw over for more than DRAW_OVER_KEPT is no longer read.
import { randomBytes } from 'node:crypto';
import { delay, failureSignal, Retries } from '../runtime/daemon.js';
import type { Pool } from '../runtime/db.js';
import { ADMISSION_CHANNEL, ADMISSION_LEASE } from '../redis/keys.js';
import type { Logger } from '../runtime/logger.js';
import { metrics } from '../runtime/metrics.js';
import type { RedisClient } from '../redis/connect.js';
import { holdLease } from '../pipeline/writer-scripts.js';
import { DrawLoop } from './draw/loop.js';
import { admitStep, Phase, type AdmitStep } from './room/room.js';
import { fromRow, type Sale, type SaleRow } from '../sales/sale.js';

export const TICK_MS = 100;
/** How long a silent leader keeps the lease: a SIGKILLed loop is replaced within this. */
export const LEASE_MS = 2000;
export const SALES_REFRESH_MS = 1000;
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
  at: number;
}

export interface AdmissionDeps {
  pool: Pool;
  redis: RedisClient;
  logger: Logger;
  /** BUY_COUNT_TTL_SECONDS, for a draw's awards (default 86,400, as the setting's). */
  buyCountTtlSeconds?: number;
}

/** A draw over still publishes its last tick this long (for streams that missed it), then is left alone. */
const DRAW_OVER_KEPT = '1 minute';

export async function admissionSales(pool: Pool): Promise<Sale[]> {
  const res = await pool.query<SaleRow>(
    `select * from sales where admission <> 'first-come' and settled_at is null
       and (draw_over_at is null or draw_over_at > now() - interval '${DRAW_OVER_KEPT}') order by starts_at`,
  );
  return res.rows.map(fromRow);
}

export class AdmissionLoop {
  readonly id = randomBytes(8).toString('hex');
  private readonly abort = new AbortController();
  private readonly signal = failureSignal();
  readonly failed = this.signal.failed;
  private running: Promise<void> | undefined;
  private sales: Sale[] = [];
  private salesAt = 0;
  private refreshing: Promise<void> | undefined;
  private readonly published = new Map<string, { tick: RoomTick; sentAt: number }>();
  private readonly draws: DrawLoop;
  /** The draws' pass in progress: the room steps never wait for it (see tick). */
  private drawing: Promise<void> | undefined;
  /** Whether this loop held the lease at its last tick. */
  leader = false;

  constructor(private readonly deps: AdmissionDeps) {
    this.draws = new DrawLoop({ ...deps, buyCountTtlSeconds: deps.buyCountTtlSeconds ?? 86_400 });
  }

  start(): void {
    this.running ??= this.run();
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await this.running;
    await this.refreshing;
    await this.drawing;
  }

  private async run(): Promise<void> {
    const retries = new Retries(this.deps.logger, this.signal.fail);
    while (!this.abort.signal.aborted) {
      let wait = TICK_MS;
      try {
        await this.tick(Date.now(), false);
        retries.succeeded();
      } catch (err) {
        const retryIn = retries.failed(err, 'admission tick failed');
        if (retryIn === null) return;
        wait = retryIn;
      }
      await delay(wait, this.abort.signal);
    }
  }

  /** Re-reads the sales with a room or a draw (the ticks start one every SALES_REFRESH_MS, see refreshBeside). */
  async refreshSales(): Promise<void> {
    this.sales = await admissionSales(this.deps.pool);
    this.salesAt = Date.now();
    this.draws.keepOnly(new Set(this.sales.map((s) => s.id)));
  }

  /** A re-read that the ticks do not wait for; a failed one is logged and tried again an interval later. */
  private refreshBeside(): void {
    this.refreshing ??= this.refreshSales()
      .catch((err: unknown) => {
        this.salesAt = Date.now();
        this.deps.logger.warn({ err, sales: this.sales.length }, 'admission: sales not re-read from Postgres; admitting for the ones known');
      })
      .finally(() => (this.refreshing = undefined));
  }

  /**
   * One tick: the lease, then a step per sale. The draws' steps (Postgres transactions) run beside
   * the rooms' (Redis only), one pass at a time, so a slow or blocked Postgres never holds up a
   * room's passes nor the lease; the loop itself does not wait for them (`waitForDraws` false),
   * tests do. Public for tests, which drive the clock.
   */
  async tick(now: number, waitForDraws = true): Promise<RoomTick[]> {
    const { redis, logger } = this.deps;
    const wasLeader = this.leader;
    this.leader = await holdLease(redis, ADMISSION_LEASE, this.id, LEASE_MS);
    if (this.leader !== wasLeader) logger.info({ loop: this.id }, this.leader ? 'admission: this loop leads' : 'admission: another loop leads');
    // A former leader's last figures would sit beside the new leader's, and the stuck-queue alert
    // takes the max over instances: only the leader exports rooms.
    if (wasLeader && !this.leader) forgetRooms();
    if (!this.leader) return [];
    // Another loop may have led meanwhile, and failed in the middle of a draw's step.
    if (!wasLeader) this.draws.forget();
    // Only a loop that knows no sales yet waits for Postgres.
    if (this.salesAt === 0) await this.refreshSales();
    else if (Date.now() - this.salesAt >= SALES_REFRESH_MS) this.refreshBeside();
    // A caller that waits for the draws (tests) gets a pass at its own `now`, after any pass in flight.
    if (waitForDraws) await this.drawing;
    const draws = this.sales.filter((s) => s.admission === 'draw');
    // DrawLoop.tick never throws: nothing here can reject unhandled.
    const drawing = (this.drawing ??= Promise.all(draws.map((s) => this.draws.tick(s, now))).then(() => {}).finally(() => (this.drawing = undefined)));
    const ticks: RoomTick[] = [];
    for (const sale of this.sales) {
      if (sale.admission !== 'queue') continue;
      const step = await admitStep(redis, sale, now, Math.max(1, sale.admitRatePerSecond!));
      observe(sale, step);
      const tick: RoomTick = { saleId: sale.id, phase: step.phase, admitted: step.admitted, waiting: step.waiting, available: step.available, passExpiresAt: step.passExpiresAt, at: now };
      if (step.admittedNow > 0) logger.debug({ saleId: sale.id, admitted: step.admittedNow, waiting: step.waiting }, 'admitted');
      if (this.news(tick, now)) {
        await redis.publish(ADMISSION_CHANNEL, JSON.stringify(tick));
        ticks.push(tick);
      }
    }
    if (waitForDraws) await drawing;
    return ticks;
  }

  /** Publish when the room changed, or after PUBLISH_EVERY_MS of quiet. */
  private news(tick: RoomTick, now: number): boolean {
    const last = this.published.get(tick.saleId);
    const changed = !last || last.tick.phase !== tick.phase || last.tick.admitted !== tick.admitted || last.tick.waiting !== tick.waiting
      || (last.tick.available > 0) !== (tick.available > 0);
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

function forgetRooms(): void {
  for (const gauge of [metrics.queueWaiting, metrics.queueAvailable, metrics.queuePassesOutstanding, metrics.queueAdmittable]) gauge.reset();
}
