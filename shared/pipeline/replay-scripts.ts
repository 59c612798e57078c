// The wrappers of the replay's scripts: a sale's snapshot for reconciliation (shared/checks/reconcile.ts)
// and forgetting a settled sale's per-order keys (shared/sales/settle.ts).
import { saleKeys } from '../redis/keys.js';
import type { RedisClient } from '../redis/connect.js';
import { run } from '../redis/scripts.js';

export interface SaleSnapshot {
  available: number;
  seq: number;
  restoredQty: number;
  /** A sale of several variants: each one's units left, and units restored (sku -> units); empty for a sale of one. */
  variantsLeft: Map<string, number>;
  restoredByVariant: Map<string, number>;
  entries: string[];
}

const bySku = (pairs: string[]) => {
  const m = new Map<string, number>();
  for (let i = 0; i < pairs.length; i += 2) m.set(pairs[i]!, Number(pairs[i + 1]));
  return m;
};

/** Re-reads of the writers a snapshot allows: each means a writer joined between the read and the script. */
const SNAPSHOT_TRIES = 5;

export async function snapshotSale(redis: RedisClient, saleId: string): Promise<SaleSnapshot> {
  const k = saleKeys(saleId);
  for (let tries = 1; ; tries++) {
    const writers = await redis.zrange(k.writers, '0', '-1');
    const res = (await run(
      redis,
      'snapshot',
      [
        k.available,
        k.seq,
        k.winners,
        k.writers,
        k.restoredQty,
        k.variantsLeft,
        k.restoredByVariant,
        ...writers.map((w) => k.processing(w)),
      ],
      writers,
    )) as [number, number, number, string[], string[], ...string[]] | null;
    if (res) {
      const [available, seq, restoredQty, left, restoredBy, ...entries] = res;
      return {
        available,
        seq,
        restoredQty,
        variantsLeft: bySku(left),
        restoredByVariant: bySku(restoredBy),
        entries,
      };
    }
    if (tries === SNAPSHOT_TRIES)
      throw new Error(`sale ${saleId}: its writers changed during each of ${SNAPSHOT_TRIES} snapshots`);
  }
}

/** settle_sale.lua: marks a settled sale so nothing restores there again, and deletes its per-order keys, its buyer counts hash and its unpaid expiries. */
export async function forgetSettledOrders(redis: RedisClient, saleId: string): Promise<void> {
  const k = saleKeys(saleId);
  await run(
    redis,
    'settle_sale',
    [
      k.meta,
      k.restored,
      k.restoredQty,
      k.cancels,
      k.purchased,
      k.deadlines,
      k.writers,
      k.queue,
      k.room,
      k.passes,
      k.entries,
      k.buyCounts,
      k.unpaid,
      k.restoredByVariant,
      k.variantBuys,
    ],
    [],
  );
}
