// An operator's live controls of a sale: pause and resume, and a new end. Each is one transaction
// that locks the sale's row, writes Redis while holding it and records the audit row, so Postgres
// (the record) and Redis (what purchases are judged by) change together: Redis refusing or failing
// rolls the row back, and two operators acting at once are taken one after the other.
import type { RedisClient } from '../redis/connect.js';
import type { Pool, PoolClient } from '../runtime/db.js';
import { withTransaction } from '../runtime/db.js';
import { HttpError } from '../runtime/errors.js';
import { recordAudit } from '../operators/audit.js';
import { readTime } from './input.js';
import { pauseScript, setEndScript } from './scripts.js';
import { fromRow, type Sale, type SaleRow } from './sale.js';

export interface Controlled {
  sale: Sale;
  paused: boolean;
  /** False when the sale was so already: nothing changed and nothing was recorded. */
  changed: boolean;
}

export type LockedRow = SaleRow & { paused_at: Date | null; settled_at: Date | null; now: Date };

/** The sale's row, locked until the transaction ends, with Postgres's now() (the statement's). */
export async function lockSale(client: PoolClient, saleId: string): Promise<LockedRow> {
  const res = await client.query<LockedRow>(
    'select *, statement_timestamp() as now from sales where id = $1 for update',
    [saleId],
  );
  if (!res.rows[0]) throw new HttpError('sale_not_found', `No sale with id "${saleId}".`);
  return res.rows[0];
}

export const ended = (row: LockedRow) =>
  row.settled_at !== null || (row.ends_at instanceof Date && row.ends_at.getTime() <= row.now.getTime());

/**
 * Pauses (or resumes) the whole sale: buyers' purchases answer 409 paused and the waiting room
 * admits nobody (purchase.lua, admit.lua read the flag); a draw takes its entries as before.
 * A sale paused already is left as it is, one pause and one audit row however often it is asked,
 * but its flag is written to Redis again, so a Redis that missed it catches up. An ended sale has
 * nothing to pause (403 ended); resuming one clears its flag.
 */
export async function setPaused(
  pool: Pool,
  redis: RedisClient,
  saleId: string,
  paused: boolean,
  by: string,
): Promise<Controlled> {
  return withTransaction(pool, async (client) => {
    const row = await lockSale(client, saleId);
    const was = row.paused_at !== null;
    if (paused && !was && ended(row))
      throw new HttpError('ended', `Sale "${saleId}" has ended: there is nothing to pause.`);
    if (paused !== was) {
      await client.query(`update sales set paused_at = ${paused ? 'statement_timestamp()' : 'null'} where id = $1`, [
        saleId,
      ]);
      await recordAudit(client, { operator: by, action: paused ? 'sale.pause' : 'sale.resume', saleId });
    }
    // Not loaded (-1): nothing sells from Redis, and a reload takes the flag from the row.
    await pauseScript(redis, saleId, paused);
    return { sale: fromRow(row), paused, changed: paused !== was };
  });
}

/**
 * Moves a live sale's end, earlier or later. The new end must be to come and after the start
 * (400 invalid_end_time), and the sale live (403 ended: to stop a sale now, end it), by both
 * clocks that judge the end: Postgres's now() here, Redis's TIME in set_end.lua, where purchases
 * are judged. A draw's end stays after its entries close and not before its backfill ends.
 */
export async function setEndTime(
  pool: Pool,
  redis: RedisClient,
  saleId: string,
  endsAtText: unknown,
  by: string,
): Promise<Sale> {
  let endsAt: Date;
  try {
    endsAt = readTime('endsAt', endsAtText);
  } catch (err) {
    throw new HttpError('invalid_end_time', (err as Error).message);
  }
  return withTransaction(pool, async (client) => {
    const row = await lockSale(client, saleId);
    const sale = fromRow(row);
    if (ended(row)) throw new HttpError('ended', `Sale "${saleId}" has ended: its end can no longer change.`);
    const refuse = (why: string) => new HttpError('invalid_end_time', `endsAt ${endsAt.toISOString()} ${why}.`);
    if (endsAt <= row.now) throw refuse(`is not to come (now is ${row.now.toISOString()})`);
    if (endsAt <= sale.startsAt) throw refuse(`is not after the sale's start, ${sale.startsAt.toISOString()}`);
    if (sale.entriesCloseAt && endsAt <= sale.entriesCloseAt)
      throw refuse(`is not after the draw's entriesCloseAt, ${sale.entriesCloseAt.toISOString()}`);
    if (sale.backfillUntil && endsAt < sale.backfillUntil)
      throw refuse(`is before the draw's backfillUntil, ${sale.backfillUntil.toISOString()}`);
    const updated = await client.query<SaleRow>('update sales set ends_at = $2 where id = $1 returning *', [
      saleId,
      endsAt,
    ]);
    const [code, redisNow] = await setEndScript(redis, saleId, endsAt.getTime());
    // Redis's clock disagrees with Postgres's: its refusal rolls the row back.
    if (code === -3) throw new HttpError('ended', `Sale "${saleId}" has ended by Redis's clock.`);
    if (code === -2) throw refuse(`is not to come by Redis's clock (now is ${new Date(redisNow).toISOString()})`);
    await recordAudit(client, {
      operator: by,
      action: 'sale.end-time',
      saleId,
      detail: { from: sale.endsAt?.toISOString() ?? null, to: endsAt.toISOString() },
    });
    return fromRow(updated.rows[0]!);
  });
}

/** Whether Postgres records the sale as paused (undefined: no such sale). */
export async function isPaused(pool: Pool, saleId: string): Promise<boolean | undefined> {
  const res = await pool.query<{ paused: boolean }>('select paused_at is not null as paused from sales where id = $1', [
    saleId,
  ]);
  return res.rows[0]?.paused;
}
