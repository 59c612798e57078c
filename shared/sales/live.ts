// One sale's live numbers for the operator's page, in one round trip: where its units are (the
// reconciliation), how many purchases Redis has accepted, how far the writer is behind, how late
// expired orders were closed, each variant's units (variant-figures.ts), the admission mode's figures (a waiting room's, a draw's), and this API instance's purchase outcomes.
//
// Everything but the outcomes is read from Redis and Postgres, so any API instance answers the
// same. Refusals are never written to Redis (a write per refusal would cost the sold-out path,
// which answers from memory): they are this process's counters, for all sales, and named so.
import type { RedisClient } from '../redis/connect.js';
import type { Pool } from '../runtime/db.js';
import { parseWinner } from '../runtime/ids.js';
import { sqlState, TRANSITIONS } from '../orders/states.js';
import { saleKeys } from '../redis/keys.js';
import { metrics } from '../runtime/metrics.js';
import { reconcile, type Reconciliation } from '../checks/reconcile.js';
import { modeOf, registeredModes } from '../admission/modes.js';
import { saleView, type Sale, type SaleView } from './sale.js';
import { variantFigures, type VariantFigures } from './variant-figures.js';

/** Expiry lateness is taken from the orders closed in this window, at most LATENESS_SAMPLE of them. */
export const LATENESS_WINDOW_MS = 60_000;
export const LATENESS_SAMPLE = 10_000;

export interface Lateness {
  /** Orders of the sale closed unpaid in the window (up to LATENESS_SAMPLE). */
  closes: number;
  /** closed_at - expires_at, null without closes. */
  p50Ms: number | null;
  p99Ms: number | null;
}

export interface SaleLive {
  /** The server's clock when the numbers were read (ISO 8601). */
  at: string;
  sale: SaleView;
  reconciliation: Omit<Reconciliation, 'saleId' | 'missingInPostgres'>;
  /** Purchases Redis has accepted in this sale so far, by every API instance (the purchase counter). */
  purchases: number;
  /** Age of the oldest winner not yet taken off Redis by a writer; null when none waits. */
  writerLagMs: number | null;
  lateness: Lateness;
  /** Each variant's stock, price and units by place, in the sale's order. */
  variants: VariantFigures[];
  /** Each admission mode's figures under its key (`room` a waiting room's, `draw` a draw's): the sale's mode's, null for the others. */
  [modeKey: string]: unknown;
  /** flashsale_purchases_total of the API process that answered, all sales, since it started. */
  thisInstance: { outcomes: Record<string, number> };
}

/**
 * The oldest winner still in Redis: the tail of the shared list (the writer takes from there) or
 * of a writer's processing list (a batch in flight, or held by a writer that died).
 */
async function oldestWinnerAt(
  redis: RedisClient,
  saleId: string,
): Promise<{ purchases: number; oldestAt: number | null }> {
  const k = saleKeys(saleId);
  const [seq, tail, writers] = await Promise.all([
    redis.get(k.seq),
    redis.lindex(k.winners, -1),
    redis.zrange(k.writers, '0', '-1'),
  ]);
  const tails = await Promise.all(writers.map((w) => redis.lindex(k.processing(w), -1)));
  const times = [tail, ...tails].filter((e): e is string => e !== null).map((e) => parseWinner(e).purchasedAt);
  return { purchases: Number(seq ?? 0), oldestAt: times.length > 0 ? Math.min(...times) : null };
}

/** p50 and p99 of how late the sale's expired orders were closed in the last minute (a bounded sample). */
export async function closeLateness(pool: Pool, saleId: string, now: Date): Promise<Lateness> {
  const res = await pool.query<{ closes: number; p50: number | null; p99: number | null }>(
    `select count(*)::int as closes,
            percentile_cont(0.5) within group (order by late) as p50,
            percentile_cont(0.99) within group (order by late) as p99
     from (select extract(epoch from closed_at - expires_at) * 1000 as late from orders
           where sale_id = $1 and status = ${sqlState(TRANSITIONS.expire.to)} and closed_at > $2 limit $3) recent`,
    [saleId, new Date(now.getTime() - LATENESS_WINDOW_MS), LATENESS_SAMPLE],
  );
  const { closes, p50, p99 } = res.rows[0]!;
  const ms = (v: number | null) => (v === null ? null : Math.round(Number(v)));
  return { closes, p50Ms: ms(p50), p99Ms: ms(p99) };
}

async function outcomesOfThisInstance(): Promise<Record<string, number>> {
  const { values } = await metrics.purchases.get();
  return Object.fromEntries(values.map((v) => [String(v.labels.outcome), v.value]));
}

export async function saleLive(pool: Pool, redis: RedisClient, sale: Sale, now = new Date()): Promise<SaleLive> {
  const live = modeOf(sale.admission)?.live;
  const [view, rec, winners, lateness, figures, outcomes] = await Promise.all([
    saleView(redis, sale, now.getTime()),
    reconcile(pool, redis, sale.id, sale.stock, sale.variants),
    oldestWinnerAt(redis, sale.id),
    closeLateness(pool, sale.id, now),
    live?.figures(pool, redis, sale, now.getTime()) ?? null,
    outcomesOfThisInstance(),
  ]);
  const { saleId: _id, missingInPostgres: _missing, ...reconciliation } = rec;
  return {
    at: now.toISOString(),
    sale: view,
    reconciliation,
    purchases: winners.purchases,
    writerLagMs: winners.oldestAt === null ? null : Math.max(0, now.getTime() - winners.oldestAt),
    lateness,
    variants: variantFigures(sale, rec),
    ...Object.fromEntries(liveKeys().map((key) => [key, key === live?.key ? figures : null])),
    thisInstance: { outcomes },
  };
}

/** The keys the admission modes' figures take in the live view. */
export const liveKeys = (): string[] => registeredModes().flatMap(({ live }) => (live ? [live.key] : []));
