// The wrappers of the scripts that close orders and give their stock back: restore (expiry and
// cancels, shared/orders/close.ts), cancel (shared/orders/cancel.ts), due and touch_due (the
// listener's nudger), and the expiry key a paid or cancelled order no longer needs.
import { saleKeys, STOCK_CHANNEL } from '../redis/keys.js';
import type { RedisClient } from '../redis/connect.js';
import { run } from '../redis/scripts.js';
import { parseWinner, type Winner } from '../runtime/ids.js';

export interface Restorable {
  orderId: string;
  userId: string;
  qty: number;
  /** Its variant's sku (absent: the sale's one variant). */
  sku?: string;
  /** It expired unpaid (not cancelled): counted against its buyer once, with its restore (MAX_UNPAID_PER_SALE). */
  unpaid?: boolean;
}

/** Most orders one restore.lua call takes: a bigger batch is split, so no single call holds Redis long. */
export const RESTORE_CHUNK = 1000;

/** Gives one sale's orders their stock and quota back (restore.lua); for each order, true if this call restored it. */
export async function restoreStocks(redis: RedisClient, saleId: string, orders: Restorable[]): Promise<boolean[]> {
  const k = saleKeys(saleId);
  const calls: Promise<boolean[]>[] = [];
  for (let from = 0; from < orders.length; from += RESTORE_CHUNK) {
    const keys = [
      k.available,
      k.restored,
      k.restoredQty,
      k.meta,
      k.buyCounts,
      k.unpaid,
      k.variantsLeft,
      k.restoredByVariant,
      k.variantBuys,
    ];
    const countAt = new Map<string, number>(); // buyer -> index of their own count key in KEYS (1-based, as Lua)
    const args: (string | number)[] = [saleId, STOCK_CHANNEL];
    for (const o of orders.slice(from, from + RESTORE_CHUNK)) {
      let at = countAt.get(o.userId);
      if (at === undefined) countAt.set(o.userId, (at = keys.push(k.buys(o.userId))));
      args.push(o.orderId, o.qty, o.userId, at, o.unpaid ? 1 : 0, o.sku ?? '');
    }
    calls.push(run(redis, 'restore', keys, args).then((res) => (res as number[]).map((r) => r === 1)));
  }
  return (await Promise.all(calls)).flat();
}

export async function restoreStock(redis: RedisClient, o: Restorable & { saleId: string }): Promise<boolean> {
  const [restored] = await restoreStocks(redis, o.saleId, [o]);
  return restored!;
}

/** cancel.lua: a still-queued order of this buyer, noted as being cancelled; its winner, or null. */
export async function markCancelling(
  redis: RedisClient,
  saleId: string,
  orderId: string,
  userId: string,
): Promise<Winner | null> {
  const k = saleKeys(saleId);
  // The entry is parsed here, where its format is known (ids.ts); cancel.lua notes the cancel only
  // if the order is still queued with the very entry read, so the buyer checked is still its buyer.
  const entry = await redis.hget(k.queued, orderId);
  if (entry === null) return null;
  const winner = parseWinner(entry);
  if (winner.userId !== userId) return null;
  return (await run(redis, 'cancel', [k.queued, k.cancels], [orderId, entry])) === 1 ? winner : null;
}

/** Takes back cancel.lua's note of a cancel that was then refused (the buyer's cancel limit): the order is still just queued. */
export async function unmarkCancelling(redis: RedisClient, saleId: string, orderId: string): Promise<void> {
  await redis.hdel(saleKeys(saleId).cancels, orderId);
}

/**
 * Forgets a paid or cancelled order's expiry key and its deadline entry, so the nudger no longer
 * looks at it, and puts its id back in the purchased set in the same transaction (see keys.ts).
 * The entry may be the expiry key name an older writer stored.
 */
export async function dropExpiry(redis: RedisClient, saleId: string, orderId: string): Promise<void> {
  const k = saleKeys(saleId);
  const expiryKey = k.expiry(orderId);
  await redis.multi().del(expiryKey).zrem(k.deadlines, orderId, expiryKey).sadd(k.purchased, orderId).exec();
}

/**
 * touch_due.lua over the deadlines due by the sale's master's TIME (due.lua), `aheadMs` later for
 * tests: up to `limit` members per call, `calls` calls at once on disjoint members (read first, so
 * the script can declare their keys). Returns the keys found gone.
 */
export async function touchDue(
  redis: RedisClient,
  saleId: string,
  limit: number,
  calls = 1,
  aheadMs = 0,
): Promise<number> {
  const k = saleKeys(saleId);
  const due = (await run(redis, 'due', [k.deadlines], [limit * calls, aheadMs])) as string[];
  const runs: Promise<unknown>[] = [];
  for (let from = 0; from < due.length; from += limit) {
    const keys = [k.deadlines, k.purchased];
    const args: string[] = [];
    for (const member of due.slice(from, from + limit)) {
      // An older writer's member is the expiry key name itself.
      const orderId = member.startsWith('{') ? member.slice(k.expiryPrefix.length) : member;
      keys.push(k.expiry(orderId));
      args.push(member, orderId);
    }
    runs.push(run(redis, 'touch_due', keys, args));
  }
  return (await Promise.all(runs)).reduce<number>((sum, gone) => sum + (gone as number), 0);
}
