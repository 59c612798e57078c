// An operator's stock change whose Redis step ran and whose Postgres commit failed (the connection
// lost, the commit refused): Redis sells from the new units while Postgres counts the old stock.
// adjust_stock.lua records each change in the sale's `stock-changes` hash under the id of its audit
// row, committed with the stock; ids come from a sequence, so a change whose row no audit holds
// never committed. Holding the sale's row (so no change is still in flight), each such change is
// recorded in Postgres as Redis applied it, stock and a new audit row naming it: forward, never
// undone, since the units a restock added may be sold already. The replay runs it for a sale whose
// reconciliation fails.
import type { RedisClient } from '../redis/connect.js';
import { saleKeys } from '../redis/keys.js';
import { type Pool, withTransaction } from '../runtime/db.js';
import { recordAudit } from '../operators/audit.js';
import { lockSale } from './controls.js';
import type { StockChangeRecord } from './scripts.js';

/** Records in Postgres the sale's stock changes applied in Redis and never committed; returns how many. */
export async function repairStockChanges(pool: Pool, redis: RedisClient, saleId: string): Promise<number> {
  const key = saleKeys(saleId).stockChanges;
  const held = await redis.hgetall(key);
  const ids = Object.keys(held);
  if (ids.length === 0) return 0;
  const repaired = await withTransaction(pool, async (client) => {
    await lockSale(client, saleId);
    const known = await client.query<{ id: string }>(
      `select coalesce(detail->>'repairs', id::text) as id from audit
        where sale_id = $1 and (id = any($2::bigint[]) or detail->>'repairs' = any($2::text[]))`,
      [saleId, ids],
    );
    const committed = new Set(known.rows.map((r) => r.id));
    let n = 0;
    for (const id of ids.filter((i) => !committed.has(i))) {
      const c = JSON.parse(held[id]!) as StockChangeRecord;
      await client.query('update sale_variants set stock = stock + $3 where sale_id = $1 and sku = $2', [
        saleId,
        c.sku,
        c.units,
      ]);
      await client.query('update sales set stock = stock + $2 where id = $1', [saleId, c.units]);
      await recordAudit(client, {
        operator: c.by,
        action: c.units > 0 ? 'sale.restock' : 'sale.remove',
        saleId,
        detail: { sku: c.sku, units: Math.abs(c.units), repairs: id },
      });
      n++;
    }
    return n;
  });
  await redis.hdel(key, ...ids);
  return repaired;
}
