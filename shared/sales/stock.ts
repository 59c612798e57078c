// An operator's live stock controls of one variant: restock (units added) and remove (unsold units
// taken out). Like pause (controls.ts), each is one transaction that locks the sale's row, changes
// the variant's and the sale's stock, records the audit row and writes Redis while holding the row,
// so the stock Postgres records and the units Redis sells from change together: Redis refusing or
// failing rolls the rows back, and two operators acting at once are taken one after the other.
// Redis applied and the commit failed: the change stays recorded in Redis under its audit row's id,
// which no row then has, and the replay records it in Postgres (stock-repair.ts).
import type { RedisClient } from '../redis/connect.js';
import type { Pool } from '../runtime/db.js';
import { withTransaction } from '../runtime/db.js';
import { HttpError } from '../runtime/errors.js';
import { modeOf } from '../admission/mode.js';
import { saleKeys } from '../redis/keys.js';
import { recordAudit } from '../operators/audit.js';
import { ended, lockSale } from './controls.js';
import { adjustStockScript } from './scripts.js';
import { fromRow, type Sale, type SaleRow } from './sale.js';
import { variantsColumn } from './variants.js';

export type StockChange = 'restock' | 'remove';

/** The most units one call moves, and the most a sale may hold (as at its creation). */
export const MAX_UNITS = 10_000_000;

export interface Restocked {
  sale: Sale;
  sku: string;
  /** The units this call added (restock) or took out (remove). */
  units: number;
  /** The variant's stock after it. */
  stock: number;
  /** The variant's units left to sell after it, as Redis counts them. */
  available: number;
}

/** `units` as given (a number from the API, text from the CLI): a whole number from 1 to MAX_UNITS. */
export function readUnits(given: unknown): number {
  const n = typeof given === 'string' && /^[0-9]+$/.test(given) ? Number(given) : given;
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 1 || n > MAX_UNITS)
    throw new HttpError('invalid_units', `units must be a whole number from 1 to ${MAX_UNITS}.`);
  return n;
}

const notEnough = (sku: string, left: number) =>
  new HttpError(
    'not_enough_stock',
    `Variant ${sku} has ${left} unit${left === 1 ? '' : 's'} available: at most ${left} can be removed; the rest are held by buyers.`,
  );

/**
 * Adds units to a variant, or removes unsold ones: Postgres's sale_variants.stock and sales.stock,
 * and in Redis the sale's `available` and the variant's units left (adjust_stock.lua), so
 * conservation holds for the variant and the sale. A removal takes only units available now, never
 * a buyer's (409 not_enough_stock, saying how many are). Not idempotent: a retried call adds (or
 * removes) again, and its answer shows the stock it left. An ended sale is refused (403 ended).
 */
export async function changeStock(
  pool: Pool,
  redis: RedisClient,
  saleId: string,
  sku: string,
  change: StockChange,
  unitsGiven: unknown,
  by: string,
): Promise<Restocked> {
  const units = readUnits(unitsGiven);
  const delta = change === 'restock' ? units : -units;
  let id: string | undefined;
  const done = await withTransaction(pool, async (client) => {
    const row = await lockSale(client, saleId);
    if (ended(row)) throw new HttpError('ended', `Sale "${saleId}" has ended: its stock can no longer change.`);
    if (modeOf(row.admission as string | null)?.fixedStock)
      throw new HttpError(
        'fixed_stock',
        `Sale "${saleId}" is a ${row.admission}: its stock is what its record commits to and cannot change.`,
      );
    const found = await client.query<{ stock: number }>(
      'select stock from sale_variants where sale_id = $1 and sku = $2',
      [saleId, sku],
    );
    const before = found.rows[0]?.stock;
    if (before === undefined) {
      const known = await client.query<{ sku: string }>(
        'select sku from sale_variants where sale_id = $1 order by position',
        [saleId],
      );
      const skus = known.rows.map((r) => r.sku);
      throw new HttpError(
        'unknown_variant',
        `Sale "${saleId}" has no variant "${sku}": its variants are ${skus.join(', ')}.`,
      );
    }
    // Redis judges a removal by the units left (below); this bounds it where Redis holds no sale.
    if (before + delta < 0) throw notEnough(sku, before);
    const total = Number(row.stock) + delta;
    if (total > MAX_UNITS)
      throw new HttpError(
        'invalid_units',
        `Adding ${units} would bring the sale's stock to ${total}, above ${MAX_UNITS}.`,
      );
    await client.query('update sale_variants set stock = stock + $3 where sale_id = $1 and sku = $2', [
      saleId,
      sku,
      delta,
    ]);
    // The variants' column reads the update above: the same transaction.
    const updated = await client.query<SaleRow>(
      `update sales set stock = stock + $2 where id = $1 returning sales.*, ${variantsColumn()}`,
      [saleId, delta],
    );
    id = await recordAudit(client, { operator: by, action: `sale.${change}`, saleId, detail: { sku, units } });
    const [code, left] = await adjustStockScript(redis, saleId, sku, delta, { id, by });
    // Any refusal rolls the rows back: nothing changed in either store.
    if (code === -7) throw notEnough(sku, left);
    if (code === -3) throw new HttpError('ended', `Sale "${saleId}" has ended by Redis's clock.`);
    if (code === -18) throw new HttpError('unknown_variant', `Redis knows no variant "${sku}" of sale "${saleId}".`);
    const sale = fromRow(updated.rows[0]!);
    // Not loaded (-1): nothing sells from Redis; a load takes the stock from the rows.
    const available = code === 1 ? left : (sale.variants.find((v) => v.sku === sku)?.stock ?? 0);
    return { sale, sku, units, stock: before + delta, available };
  });
  // Committed: the record in Redis has done its part (left behind, the repair finds the audit row and drops it).
  await redis.hdel(saleKeys(saleId).stockChanges, id!).catch(() => {});
  return done;
}
