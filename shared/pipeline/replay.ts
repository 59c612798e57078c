// The guarantee behind the events: a periodic sweep over Postgres that closes every overdue
// order no event closed, finishes restores a crash interrupted, re-drives batches of dead
// writers, checks conservation per unsettled sale (and reports a sale Redis sells that Postgres
// lacks), and settles sales that are over, so past sales cost no per-tick work. One pass at a time
// across all instances (a Postgres advisory lock, released by Postgres itself if the holder dies).
// A failed pass is retried by what failed (daemon.ts Retries) before the next tick; a bug that
// keeps failing makes the replay give up (`failed`), and its process exits 1.
import cron, { type ScheduledTask } from 'node-cron';
import type { RedisClient } from '../redis/connect.js';
import { delay, failureSignal, Retries } from '../runtime/daemon.js';
import { withClient, type Pool } from '../runtime/db.js';
import { sweepOverdue } from '../orders/close.js';
import { SALES_REGISTRY } from '../redis/keys.js';
import type { Logger } from '../runtime/logger.js';
import {
  missingInPostgres,
  reconcile,
  reconcileMissing,
  UNIT_PLACES,
  type Reconciliation,
} from '../checks/reconcile.js';
import { metrics } from '../runtime/metrics.js';
import { countOpenRefunds } from '../payments/refunds.js';
import { settleSales, unsettledSales } from '../sales/settle.js';
import { repairStockChanges } from '../sales/stock-repair.js';
import { recoverDeadWriters } from './lease.js';
import type { ReplicaAcks } from '../redis/replication.js';

const REPLAY_LOCK = 7_042_001;

export interface ReplayDeps {
  pool: Pool;
  redis: RedisClient;
  /** REDIS_MIN_REPLICAS_ACK's confirmation of `redis`'s writes (services.ts connect); undefined at 0. */
  replicaAcks?: ReplicaAcks;
  logger: Logger;
  /** Where passes add up for the info line; without it (one pass alone), each pass logs its own. */
  summary?: PassSummary;
}

export interface ReplayReport {
  ran: boolean;
  redriven: number;
  closed: number;
  restored: number;
  /** Sales settled by this pass, and settled sales it found still in the registry and dropped. */
  settled: number;
  unregistered: number;
  /** One per unsettled sale, and one per registry sale missing in Postgres (never holds). */
  reconciliations: Reconciliation[];
}

export async function replayOnce({
  pool,
  redis,
  replicaAcks,
  logger,
  summary = new PassSummary(),
}: ReplayDeps): Promise<ReplayReport> {
  const report: ReplayReport = {
    ran: false,
    redriven: 0,
    closed: 0,
    restored: 0,
    settled: 0,
    unregistered: 0,
    reconciliations: [],
  };
  await withClient(pool, async (lock) => {
    const got = await lock.query<{ ok: boolean }>('select pg_try_advisory_lock($1) as ok', [REPLAY_LOCK]);
    if (!got.rows[0]!.ok) return;
    report.ran = true;
    try {
      const registry = await redis.smembers(SALES_REGISTRY);
      report.redriven = await recoverDeadWriters(redis, registry);
      const swept = await sweepOverdue(pool, redis, 'replay', replicaAcks);
      report.closed = swept.closed;
      report.restored = swept.restored;
      const held = new Set<string>();
      for (const sale of await unsettledSales(pool)) {
        let r = await reconcile(pool, redis, sale.id, sale.stock, sale.variants);
        // An operator's stock change applied in Redis whose commit failed: recorded now, counted again.
        const repaired = r.holds ? 0 : await repairStockChanges(pool, redis, sale.id);
        if (repaired > 0) {
          logger.warn(
            { saleId: sale.id, repaired },
            'stock changes applied in Redis and never committed: recorded in Postgres',
          );
          r = await reconcile(pool, redis, sale.id, sale.stock, sale.variants);
        }
        report.reconciliations.push(r);
        if (r.holds) {
          held.add(sale.id);
          logger.debug({ reconciliation: r }, 'reconciliation ok');
        } else {
          metrics.reconciliationFailures.inc({ sale: sale.id });
          logger.error(
            { reconciliation: r, alert: 'CONSERVATION_VIOLATED' },
            'RECONCILIATION FAILED: available + queued + pending + paid + restoring != total',
          );
        }
      }
      for (const saleId of await missingInPostgres(pool, registry)) {
        const r = await reconcileMissing(redis, saleId);
        report.reconciliations.push(r);
        metrics.reconciliationFailures.inc({ sale: saleId });
        logger.error(
          { reconciliation: r, alert: 'SALE_MISSING_IN_POSTGRES' },
          'RECONCILIATION FAILED: the sale is in the Redis registry but has no row in Postgres',
        );
      }
      showStock(report.reconciliations);
      // One count on the partial index of open refunds: cheap, and the alert needs one series, not one per API.
      metrics.refundsOpen.set(await countOpenRefunds(pool));
      const settled = await settleSales(pool, redis, registry, held);
      report.settled = settled.settled.length;
      report.unregistered = settled.unregistered.length;
    } finally {
      await lock.query('select pg_advisory_unlock($1)', [REPLAY_LOCK]);
    }
  });
  if (report.ran) {
    metrics.replayPasses.inc();
    summary.add(report);
    summary.flush(logger);
  }
  return report;
}

let shownSales = new Set<string>();

/** flashsale_sale_stock as this pass reconciled it; a sale no longer reconciled (settled) drops out. */
function showStock(reconciliations: Reconciliation[]): void {
  const now = new Set(reconciliations.map((r) => r.saleId));
  for (const sale of shownSales)
    if (!now.has(sale)) for (const state of UNIT_PLACES) metrics.saleStock.remove({ sale, state });
  shownSales = now;
  for (const r of reconciliations)
    for (const state of UNIT_PLACES) metrics.saleStock.set({ sale: r.saleId, state }, r[state]);
  showVariants(reconciliations);
}

/** Each shown variant's series, by sale: the skus shown last time, so a settled sale's go. */
let shownVariants = new Map<string, string[]>();

function showVariants(reconciliations: Reconciliation[]): void {
  const now = new Map(reconciliations.map((r) => [r.saleId, (r.variants ?? []).map((v) => v.sku)]));
  for (const [sale, skus] of shownVariants)
    for (const sku of skus) if (!now.get(sale)?.includes(sku)) metrics.variantUnitsAvailable.remove({ sale, sku });
  shownVariants = now;
  for (const r of reconciliations)
    for (const v of r.variants ?? []) metrics.variantUnitsAvailable.set({ sale: r.saleId, sku: v.sku }, v.available);
}

/**
 * The replay's info line: what the passes since the last line checked and did, at most once every
 * `everyMs` (the first pass logs at once), so a quiet replay still says it is alive once a minute
 * and a busy one never floods the log. The per-sale lines are debug, or error when one fails.
 */
export class PassSummary {
  private lastLogged = -Infinity;
  private totals = PassSummary.zero();

  constructor(
    private readonly everyMs = 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  private static zero() {
    return {
      passes: 0,
      salesChecked: 0,
      violations: 0,
      closed: 0,
      restored: 0,
      redriven: 0,
      settled: 0,
      unregistered: 0,
    };
  }

  add(r: ReplayReport): void {
    const t = this.totals;
    t.passes++;
    t.salesChecked += r.reconciliations.length;
    t.violations += r.reconciliations.filter((c) => !c.holds).length;
    t.closed += r.closed;
    t.restored += r.restored;
    t.redriven += r.redriven;
    t.settled += r.settled;
    t.unregistered += r.unregistered;
  }

  flush(logger: Logger): void {
    const now = this.now();
    if (this.totals.passes === 0 || now - this.lastLogged < this.everyMs) return;
    logger.info(this.totals, 'replay summary');
    this.lastLogged = now;
    this.totals = PassSummary.zero();
  }
}

/** The schedule of an interval shared/config/index.ts has validated (1-59 s, or whole minutes up to an hour). */
export function cronExpression(intervalSeconds: number): string {
  return intervalSeconds < 60 ? `*/${intervalSeconds} * * * * *` : `0 */${intervalSeconds / 60} * * * *`;
}

export class Replay {
  private task: ScheduledTask | undefined;
  private current: Promise<unknown> = Promise.resolve();
  private readonly abort = new AbortController();
  private readonly fatal = failureSignal();
  private readonly retries: Retries;
  private readonly summary = new PassSummary();
  /** Rejects when the replay gives up: a bug that failed every retry (see Retries). */
  readonly failed = this.fatal.failed;

  constructor(
    private readonly deps: ReplayDeps,
    private readonly intervalSeconds: number,
  ) {
    this.retries = new Retries(deps.logger, (err) => {
      void this.task?.stop();
      this.fatal.fail(err);
    });
  }

  start(): void {
    this.task = cron.schedule(cronExpression(this.intervalSeconds), () => this.tick(), {
      name: 'replay',
      noOverlap: true,
    });
  }

  private tick(): Promise<unknown> {
    this.current = this.pass();
    return this.current;
  }

  /** One pass, tried again after a failure; ticks that come meanwhile are skipped (noOverlap). */
  private async pass(): Promise<void> {
    while (!this.abort.signal.aborted) {
      try {
        await replayOnce({ ...this.deps, summary: this.summary });
        this.retries.succeeded();
        return;
      } catch (err) {
        const retryInMs = this.retries.failed(err, 'replay pass failed');
        if (retryInMs === null) return;
        await delay(retryInMs, this.abort.signal);
      }
    }
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await this.task?.stop();
    await this.task?.destroy();
    await this.current;
  }
}
