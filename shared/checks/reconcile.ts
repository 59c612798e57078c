// The conservation check: every unit of a sale's stock is in exactly one place.
//   Redis available + queued + the HOLDING states (pending + paid) + restoring = total
// (restoring: in a RESTORING state (expired, cancelled) in Postgres, not yet back in Redis: both
// give their stock back through the same restored set). Redis is read at one instant (a
// script); Postgres is then counted only up to that instant's purchase number, so purchases,
// writes, payments and restores running meanwhile cannot skew the sum.
// A sale of several variants holds the same sum for each variant, against its own stock: its units
// left (the sale's hash), its queued winners (by their sku), its orders (by their sku) and its
// units restored (restore.lua counts them per variant too).
// An operator's restock or removal changes the stock in both stores (shared/sales/stock.ts): the
// stock counted against is Postgres's, read after Redis in the same statement, and Redis's own copy
// (the meta's stock, changed in the same step as the units) is read before and after the snapshot.
// Unequal, a change ran between the reads or is not committed yet: the count is taken again.
import type { RedisClient } from '../redis/connect.js';
import { withClient, type Pool } from '../runtime/db.js';
import { parseWinner, type Winner } from '../runtime/ids.js';
import { HOLDING, ORDER_STATES, RESTORING, sqlState, sqlStates, type OrderState } from '../orders/states.js';
import { snapshotSale, type SaleSnapshot } from '../pipeline/replay-scripts.js';
import { saleKeys } from '../redis/keys.js';
import { delay } from '../runtime/daemon.js';

/** One variant's units by where they are, as a sale's are. */
export type VariantReconciliation = {
  sku: string;
  total: number;
  available: number;
  queued: number;
  restoring: number;
  holds: boolean;
} & Record<OrderState, number>;

/** Units of a sale by where they are: Redis's places, then every order state's, then restoring. */
export type Reconciliation = {
  saleId: string;
  total: number;
  available: number;
  queued: number;
  restoring: number;
  holds: boolean;
  /** The sale is in Redis's registry with no row in Postgres: nothing to count its stock against. */
  missingInPostgres?: true;
  /** A sale of several variants: each one's own sum (`holds` above is the sale's and every variant's). */
  variants?: VariantReconciliation[];
} & Record<OrderState, number>;

/** Where a unit can be, in the order they add up to the total (the `flashsale_sale_stock` states). */
export const UNIT_PLACES = ['available', 'queued', ...ORDER_STATES, 'restoring'] as const;

const sum = (r: Record<OrderState, number>, states: readonly OrderState[]) => states.reduce((n, s) => n + r[s], 0);

/** The sum conservation checks, spelt out: `available 3 + queued 0 + pending 1 + paid 1 + restoring 0`. */
export function conservationSum(r: Reconciliation | VariantReconciliation): string {
  return (['available', 'queued', ...HOLDING, 'restoring'] as const).map((place) => `${place} ${r[place]}`).join(' + ');
}

const unitsOf = (state: OrderState) =>
  `coalesce(sum(qty) filter (where status = ${sqlState(state)}), 0)::int as ${state}`;
const UNRESTORED = `coalesce(sum(qty) filter (where status in ${sqlStates(RESTORING)} and restored_at is null), 0)::int`;

/** How often a count caught beside a stock change is taken again before it is reported as it is. */
const STOCK_CHANGE_TRIES = 5;

export async function reconcile(
  pool: Pool,
  redis: RedisClient,
  saleId: string,
  /** The sale's stock as the caller read it: counted against when Postgres has no row for the sale. */
  total: number,
  /** The sale's variants; with more than one, each is reconciled too. */
  variants: { sku: string; stock: number }[] = [],
): Promise<Reconciliation> {
  for (let tries = 1; ; tries++) {
    const { r, steady } = await reconcileOnce(pool, redis, saleId, total, variants);
    if (steady || tries === STOCK_CHANGE_TRIES) return r;
    await awaitStockChange(pool, saleId, tries);
  }
}

/**
 * Waits for a stock change in flight to commit: it holds the sale's row FOR UPDATE from before its
 * Redis step until its commit, and FOR KEY SHARE waits for that (nothing else). A role that may not
 * lock rows (a read-only `flashsale check`) waits a moment instead.
 */
async function awaitStockChange(pool: Pool, saleId: string, tries: number): Promise<void> {
  try {
    await pool.query('select 1 from sales where id = $1 for key share', [saleId]);
  } catch (err) {
    if ((err as { code?: string }).code !== '42501') throw err;
    await delay(10 * tries);
  }
}

async function reconcileOnce(
  pool: Pool,
  redis: RedisClient,
  saleId: string,
  callerTotal: number,
  callerVariants: { sku: string; stock: number }[],
): Promise<{ r: Reconciliation; steady: boolean }> {
  const metaKey = saleKeys(saleId).meta;
  const redisStock = await redis.hget(metaKey, 'stock');
  const snap = await snapshotSale(redis, saleId);
  const redisStockAfter = await redis.hget(metaKey, 'stock');
  const queuedEntries = new Map(snap.entries.map((e) => parseWinner(e)).map((w) => [w.orderId, w]));
  // A winner may still sit in a list after its row was written (a re-driven batch, or a batch
  // between insert and ack): count it once. Which winners are written is read in the same
  // statement as the sums: with two statements, a batch the writer commits in between is in
  // neither count.
  // A settled sale's restored units are no longer in Redis (settle.ts deletes them once its
  // reconciliation held); nothing of it moves any more, so Postgres alone says what is restoring:
  // its closed orders whose restore is not recorded, none once it is settled. Redis is read
  // first and the sale settled before its keys go, so a read on either side of that is consistent.
  // A sale of several variants has its sums by variant too, in the same statement for the same reason.
  const byVariant = callerVariants.length > 1;
  const res = await pool.query<
    Record<OrderState, number> & {
      unrestored: number;
      settled: boolean;
      written: string[];
      per: VariantRow[] | null;
      stock: number | null;
      stocks: Record<string, number> | null;
    }
  >(
    `select ${ORDER_STATES.map(unitsOf).join(',\n            ')},
            ${UNRESTORED} as unrestored,
            exists (select 1 from sales where id = $1 and settled_at is not null) as settled,
            (select stock from sales where id = $1) as stock,
            (select json_object_agg(sku, stock) from sale_variants where sale_id = $1) as stocks,
            (select coalesce(array_agg(id), '{}') from orders where id = any($3::text[])) as written,
            ${
              byVariant
                ? `(select json_agg(p) from (select sku, ${ORDER_STATES.map(unitsOf).join(', ')}, ${UNRESTORED} as unrestored
                   from orders where sale_id = $1 and seq <= $2 group by sku) p)`
                : 'null'
            } as per
     from orders where sale_id = $1 and seq <= $2`,
    [saleId, snap.seq, [...queuedEntries.keys()]],
  );
  const { unrestored, settled, written, per, stock, stocks, ...units } = res.rows[0]!;
  const total = stock ?? callerTotal;
  const variants = callerVariants.map((v) => ({ sku: v.sku, stock: stocks?.[v.sku] ?? v.stock }));
  const steady = redisStock === redisStockAfter && (redisStock === null || Number(redisStock) === total);
  for (const id of written) queuedEntries.delete(id);
  const queued = [...queuedEntries.values()].reduce((n, w) => n + w.qty, 0);
  const r: Reconciliation = { saleId, total, available: snap.available, queued, ...units, restoring: 0, holds: false };
  r.restoring = settled ? unrestored : sum(r, RESTORING) - snap.restoredQty;
  r.holds =
    snap.available >= 0 && r.restoring >= 0 && snap.available + queued + sum(r, HOLDING) + r.restoring === total;
  if (byVariant) {
    r.variants = reconcileVariants(per ?? [], snap, [...queuedEntries.values()], settled, variants);
    r.holds &&= r.variants.every((v) => v.holds);
  }
  return { r, steady };
}

/** One variant's orders, as reconcile's statement sums them. */
type VariantRow = Record<OrderState, number> & { sku: string; unrestored: number };

/** Each variant's sum, counted as the sale's is: Postgres up to the snapshot's purchase number. */
function reconcileVariants(
  per: VariantRow[],
  snap: SaleSnapshot,
  queued: Winner[],
  settled: boolean,
  variants: { sku: string; stock: number }[],
): VariantReconciliation[] {
  const rows = new Map(per.map((row) => [row.sku, row]));
  const none = Object.fromEntries(ORDER_STATES.map((st) => [st, 0])) as Record<OrderState, number>;
  return variants.map(({ sku, stock }) => {
    const { unrestored = 0, ...units } = rows.get(sku) ?? { ...none, unrestored: 0 };
    delete (units as { sku?: string }).sku;
    const available = snap.variantsLeft.get(sku) ?? 0;
    const q = queued.filter((w) => w.sku === sku).reduce((n, w) => n + w.qty, 0);
    const v: VariantReconciliation = {
      sku,
      total: stock,
      available,
      queued: q,
      ...none,
      ...units,
      restoring: 0,
      holds: false,
    };
    v.restoring = settled ? unrestored : sum(v, RESTORING) - (snap.restoredByVariant.get(sku) ?? 0);
    v.holds = available >= 0 && v.restoring >= 0 && available + q + sum(v, HOLDING) + v.restoring === stock;
    return v;
  });
}

/**
 * A sale Redis sells (it is in the registry) with no row in Postgres: its rows were lost, or it was
 * created in Redis only. Its Redis side is shown as it is; it never holds.
 */
export async function reconcileMissing(redis: RedisClient, saleId: string): Promise<Reconciliation> {
  const snap = await snapshotSale(redis, saleId);
  const queued = new Map(snap.entries.map((e) => parseWinner(e)).map((w) => [w.orderId, w.qty]));
  const q = [...queued.values()].reduce((sum, n) => sum + n, 0);
  const none = Object.fromEntries(ORDER_STATES.map((s) => [s, 0])) as Record<OrderState, number>;
  return {
    saleId,
    total: 0,
    available: snap.available,
    queued: q,
    ...none,
    restoring: 0,
    holds: false,
    missingInPostgres: true,
  };
}

/**
 * Of `ids` (read from the registry), the sales with no row in Postgres. Creating a sale adds it to
 * the registry inside its transaction, just before the commit; an insert of the same key waits for
 * that transaction, so a sale being created is seen rather than reported. The probe rows are
 * always rolled back; a creation still open after the lock timeout is left to the next look.
 */
export async function missingInPostgres(pool: Pool, ids: string[]): Promise<string[]> {
  if (ids.length === 0) return [];
  const visible = await pool.query<{ id: string }>('select id from sales where id = any($1::text[])', [ids]);
  const seen = new Set(visible.rows.map((r) => r.id));
  const unseen = [...new Set(ids)].filter((id) => !seen.has(id));
  if (unseen.length === 0) return [];
  return withClient(pool, async (client) => {
    try {
      await client.query('begin');
      await client.query(`set local lock_timeout = '5s'`);
      const res = await client.query<{ id: string }>(
        `insert into sales (id, name, stock) select id, id, 0 from unnest($1::text[]) as id on conflict (id) do nothing returning id`,
        [unseen],
      );
      return res.rows.map((r) => r.id);
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code === '55P03') return [];
      // A role without INSERT on sales cannot probe: report what it cannot see.
      if (code === '42501') return unseen;
      throw err;
    } finally {
      await client.query('rollback').catch(() => {});
    }
  });
}
