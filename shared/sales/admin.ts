// Sales administration: the admin's list of sales, and ending a sale early. An early end is an
// ordinary end brought forward: purchases stop, pending orders keep their deadline and stay
// payable, and the replay settles the sale like any other once its orders are final.
import type { RedisClient } from '../redis/connect.js';
import type { Pool } from '../runtime/db.js';
import { withTransaction } from '../runtime/db.js';
import { modeOf } from '../admission/modes.js';
import { HttpError } from '../runtime/errors.js';
import { recordAudit } from '../operators/audit.js';
import { recordEvents, saleEnded } from '../events/record.js';
import { ORDER_STATES, type OrderState } from '../orders/states.js';
import { endSaleScript } from './scripts.js';
import { variantsColumn } from './variants.js';
import { fromRow, SALE_COLUMNS, saleView, type Sale, type SaleRow, type SaleState, type SaleView } from './sale.js';

/**
 * A sale's orders in Postgres by status, every state. Orders, not units (`sale status` sums units):
 * a count is answered from the (sale_id, status) index alone, a sum reads every row, about 3x slower.
 */
export type OrderCounts = Record<OrderState, number>;

export type SaleListItem = SaleView & OrderCounts;

export interface SalePage {
  sales: SaleListItem[];
  /** Pass as `before` for the next page; null on the last. */
  next: string | null;
}

export const LIST_LIMIT = { default: 50, max: 100 };

export interface ListOptions {
  state?: SaleState;
  limit?: number;
  /** The id of a sale: only sales created before it (the previous page's `next`). */
  before?: string;
}

// What the clock alone decides; open and sold_out differ by stock, which only Redis knows.
const BY_TIME: Record<SaleState, string> = {
  upcoming: 's.starts_at > $3',
  ended: 's.ends_at <= $3',
  open: 's.starts_at <= $3 and (s.ends_at is null or s.ends_at > $3)',
  sold_out: 's.starts_at <= $3 and (s.ends_at is null or s.ends_at > $3)',
};

async function orderCounts(pool: Pool, saleIds: string[]): Promise<Map<string, OrderCounts>> {
  const res = await pool.query<{ sale_id: string; status: OrderState; n: number }>(
    `select sale_id, status, count(*)::int as n from orders where sale_id = any($1::text[]) group by sale_id, status`,
    [saleIds],
  );
  const counts = new Map(saleIds.map((id) => [id, Object.fromEntries(ORDER_STATES.map((s) => [s, 0])) as OrderCounts]));
  for (const r of res.rows) counts.get(r.sale_id)![r.status] = r.n;
  return counts;
}

/**
 * Newest first (by creation, then id), one page. A page of `open` or `sold_out` may hold fewer
 * than `limit` sales: running sales are paged in Postgres and told apart by their stock in Redis.
 */
export async function listSalePage(
  pool: Pool,
  redis: RedisClient,
  opts: ListOptions = {},
  now = Date.now(),
): Promise<SalePage> {
  const limit = Math.min(opts.limit ?? LIST_LIMIT.default, LIST_LIMIT.max);
  if (
    opts.before !== undefined &&
    (await pool.query('select 1 from sales where id = $1', [opts.before])).rowCount === 0
  ) {
    throw new HttpError(
      'bad_request',
      `before must be the id of a sale (a page's next), and no sale has the id "${opts.before}".`,
    );
  }
  const res = await pool.query<SaleRow>(
    `select s.*, ${variantsColumn('s')} from sales s
     where ($1::text is null or (s.created_at, s.id) < (select created_at, id from sales where id = $1))
       and ${opts.state ? BY_TIME[opts.state] : '$3::timestamptz is not null'}
     order by s.created_at desc, s.id desc limit $2`,
    [opts.before ?? null, limit + 1, new Date(now)],
  );
  const rows = res.rows.slice(0, limit);
  const sales = rows.map(fromRow);
  const [views, counts] = await Promise.all([
    Promise.all(sales.map((sale) => saleView(redis, sale, now))),
    orderCounts(
      pool,
      sales.map((s) => s.id),
    ),
  ]);
  const items = views.map((v) => ({ ...v, ...counts.get(v.id)! }));
  return {
    sales: opts.state ? items.filter((v) => v.state === opts.state) : items,
    next: res.rows.length > limit ? rows[rows.length - 1]!.id : null,
  };
}

/** Every sale (of `state`), newest first, page by page. */
export async function listAllSales(pool: Pool, redis: RedisClient, state?: SaleState): Promise<SaleListItem[]> {
  const all: SaleListItem[] = [];
  let before: string | undefined;
  do {
    const page = await listSalePage(pool, redis, { state, limit: LIST_LIMIT.max, before });
    all.push(...page.sales);
    before = page.next ?? undefined;
  } while (before !== undefined);
  return all;
}

export interface EndResult {
  sale: Sale;
  /** False when the sale had ended already: nothing changed. */
  ended: boolean;
}

/**
 * Ends a sale at `at`, by default Postgres's `now()`, never an API host's clock (purchases are then judged against it by Redis's TIME): Postgres's
 * end and Redis's are set in one transaction, Redis failing rolls the row back. A sale that has
 * ended already is left as it is, but its end is written to Redis again, so a Redis that missed
 * an earlier end (the commit failed after Redis took it, or Redis lost it) catches up. The sale's
 * admission mode ends with it, in the same transaction (`ending`: a draw's entries stop and every
 * entrant without an order has lost), and tells its buyers once committed (`ended`). `by`: the
 * operator, recorded in the audit when the end changed something.
 */
export async function endSale(
  pool: Pool,
  redis: RedisClient,
  saleId: string,
  at?: Date,
  by?: string,
): Promise<EndResult> {
  const result = await withTransaction(pool, async (client) => {
    const updated = await client.query<SaleRow>(
      `update sales set ends_at = e.at, starts_at = least(starts_at, e.at)
       from (select coalesce($2::timestamptz, statement_timestamp()) as at) e
       where id = $1 and settled_at is null and (ends_at is null or ends_at > e.at)
       returning ${SALE_COLUMNS}`,
      [saleId, at ?? null],
    );
    const row =
      updated.rows[0] ??
      (await client.query<SaleRow>(`select ${SALE_COLUMNS} from sales where id = $1`, [saleId])).rows[0];
    if (!row) throw new HttpError('sale_not_found', `No sale with id "${saleId}".`);
    const sale = fromRow(row);
    if (by !== undefined && updated.rowCount === 1)
      await recordAudit(client, {
        operator: by,
        action: 'sale.end',
        saleId,
        detail: { at: sale.endsAt!.toISOString() },
      });
    if (updated.rowCount === 1) await recordEvents(client, [saleEnded(sale)]);
    await modeOf(sale.admission)?.ending?.(client, redis, sale);
    // Not loaded (-1): there is nothing in Redis to sell from, and a reload takes its end from this row.
    await endSaleScript(redis, sale.id, sale.endsAt!.getTime());
    return { sale, ended: updated.rowCount === 1 };
  });
  await modeOf(result.sale.admission)?.ended?.(pool, redis, result.sale);
  return result;
}
