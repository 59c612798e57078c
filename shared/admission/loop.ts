// The admission loop: every TICK_MS, each admission mode's step (shared/admission/mode.ts) over
// the mode's unsettled sales: a waiting room's admit.lua step and its message on ADMISSION_CHANNEL
// (admission/room/loop.ts), a draw's steps (admission/draw/loop.ts). One loop admits for the whole deployment: each
// instance asks for a Redis lease every tick and steps only while it holds it; a loop that dies
// loses it after LEASE_MS and another takes over. admit.lua itself stays correct with two loops
// (its rate is a bucket refilled by elapsed time, its admitted count only grows); the lease only
// saves the work. Sales are re-read from Postgres every SALES_REFRESH_MS, beside the
// ticks: the rooms live in Redis, so a Postgres outage or a slow query only delays learning of new
// sales, never the passes of the ones known. A draw over for more than DRAW_OVER_KEPT is no longer read.
import { randomBytes } from 'node:crypto';
import { delay, failureSignal, Retries } from '../runtime/daemon.js';
import type { Pool } from '../runtime/db.js';
import { ADMISSION_LEASE } from '../redis/keys.js';
import type { Logger } from '../runtime/logger.js';
import type { RedisClient } from '../redis/connect.js';
import { holdLease } from '../pipeline/writer-scripts.js';
import { fromRow, SALE_COLUMNS, type Sale, type SaleRow } from '../sales/sale.js';
import type { AdmissionMode, ModeStep } from './mode.js';
import { registeredModes } from './modes.js';

export const TICK_MS = 100;
/** How long a silent leader keeps the lease: a SIGKILLed loop is replaced within this. */
export const LEASE_MS = 2000;
export const SALES_REFRESH_MS = 1000;

import type { RoomTick } from './room/loop.js';

export type { RoomTick };

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
    `select ${SALE_COLUMNS} from sales where admission <> 'first-come' and settled_at is null
       and (draw_over_at is null or draw_over_at > now() - interval '${DRAW_OVER_KEPT}') order by starts_at`,
  );
  return res.rows.map(fromRow);
}

interface Stepping {
  mode: AdmissionMode;
  step: ModeStep;
  /** A step run beside: its pass in progress, which the others never wait for (see tick). */
  running?: Promise<object[]>;
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
  private readonly steps: Stepping[];
  /** Whether this loop held the lease at its last tick. */
  leader = false;

  constructor(private readonly deps: AdmissionDeps) {
    const stepDeps = { ...deps, buyCountTtlSeconds: deps.buyCountTtlSeconds ?? 86_400 };
    this.steps = registeredModes().flatMap((mode) => (mode.step ? [{ mode, step: mode.step(stepDeps) }] : []));
  }

  start(): void {
    this.running ??= this.run();
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await this.running;
    await this.refreshing;
    await Promise.all(this.steps.map((s) => s.running));
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

  /** Re-reads the sales with an admission mode (the ticks start one every SALES_REFRESH_MS, see refreshBeside). */
  async refreshSales(): Promise<void> {
    this.sales = await admissionSales(this.deps.pool);
    this.salesAt = Date.now();
    const ids = new Set(this.sales.map((s) => s.id));
    for (const { step } of this.steps) step.keepOnly?.(ids);
  }

  /** A re-read that the ticks do not wait for; a failed one is logged and tried again an interval later. */
  private refreshBeside(): void {
    this.refreshing ??= this.refreshSales()
      .catch((err: unknown) => {
        this.salesAt = Date.now();
        this.deps.logger.warn(
          { err, sales: this.sales.length },
          'admission: sales not re-read from Postgres; admitting for the ones known',
        );
      })
      .finally(() => (this.refreshing = undefined));
  }

  /**
   * One tick: the lease, then each mode's step over its sales. The steps run beside (a draw's
   * Postgres transactions) start first, one pass at a time each, so a slow or blocked Postgres never
   * holds up a room's passes nor the lease; the loop itself does not wait for them (`waitForDraws`
   * false), tests do. Answers the ticks the other steps published (today only the waiting room's
   * step runs inline: RoomTicks). `now` is the draws' clock (Postgres judges their steps); a room's
   * step is judged by Redis's TIME inside admit.lua. Public for tests, which drive the draws' clock.
   */
  async tick(now = Date.now(), waitForDraws = true): Promise<RoomTick[]> {
    const { redis, logger } = this.deps;
    const wasLeader = this.leader;
    this.leader = await holdLease(redis, ADMISSION_LEASE, this.id, LEASE_MS);
    if (this.leader !== wasLeader)
      logger.info({ loop: this.id }, this.leader ? 'admission: this loop leads' : 'admission: another loop leads');
    if (wasLeader && !this.leader) for (const { step } of this.steps) step.resign?.();
    if (!this.leader) return [];
    // Another loop may have led meanwhile, and failed in the middle of a step.
    if (!wasLeader) for (const { step } of this.steps) step.forget?.();
    // Only a loop that knows no sales yet waits for Postgres.
    if (this.salesAt === 0) await this.refreshSales();
    else if (Date.now() - this.salesAt >= SALES_REFRESH_MS) this.refreshBeside();
    const beside = this.steps.filter((s) => s.step.beside);
    // A caller that waits for the draws (tests) gets a pass at its own `now`, after any pass in flight.
    if (waitForDraws) await Promise.all(beside.map((s) => s.running));
    // A step run beside never throws (ModeStep.tick): nothing here can reject unhandled.
    const started = beside.map(
      (s) => (s.running ??= s.step.tick(this.salesOf(s.mode), now).finally(() => (s.running = undefined))),
    );
    const ticks: object[] = [];
    for (const s of this.steps) if (!s.step.beside) ticks.push(...(await s.step.tick(this.salesOf(s.mode), now)));
    if (waitForDraws) await Promise.all(started);
    return ticks as RoomTick[];
  }

  private salesOf(mode: AdmissionMode): Sale[] {
    return this.sales.filter((s) => s.admission === mode.name);
  }
}
