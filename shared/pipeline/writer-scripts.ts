// The wrappers of the scripts that hand out work under a lease: the order writer's batches (claim,
// ack, recover_writer; see pipeline/lease.ts) and the admission loop's lease (lease.lua).
import { saleKeys } from '../redis/keys.js';
import type { RedisClient } from '../redis/connect.js';
import { run } from '../redis/scripts.js';

/** lease.lua: whether `holder` holds `key` for the next `ms` (taken or renewed). */
export async function holdLease(redis: RedisClient, key: string, holder: string, ms: number): Promise<boolean> {
  return (await run(redis, 'lease', [key], [holder, ms])) === 1;
}

/**
 * claim.lua: up to `size` winners for this writer, its lease renewed for `leaseMs` by Redis's clock;
 * `soldOut`: no unit is left and no winner queued behind them (the writer records sale.sold_out).
 */
export async function claimBatch(
  redis: RedisClient,
  saleId: string,
  writerId: string,
  size: number,
  leaseMs: number,
): Promise<{ entries: string[]; soldOut: boolean }> {
  const k = saleKeys(saleId);
  const [soldOut, entries] = (await run(
    redis,
    'claim',
    [k.winners, k.processing(writerId), k.writers, k.available],
    [size, writerId, leaseMs],
  )) as [number, string[]];
  return { entries, soldOut: soldOut === 1 };
}

/**
 * ack.lua: sets each pending order's expiry key and forgets the batch. `overdue`: the pending
 * orders whose deadline had passed by Redis's clock, whose keys were not set: the caller closes them.
 */
export async function acknowledgeBatch(
  redis: RedisClient,
  saleId: string,
  writerId: string,
  pending: { orderId: string; expiresAt: number }[],
  orderIds: string[],
): Promise<{ set: number; overdue: string[] }> {
  const k = saleKeys(saleId);
  // Each pending order's expiry key is declared (KEYS[5..]); its id is sent once: its queued entry goes with it.
  const keys = [k.processing(writerId), k.queued, k.deadlines, k.purchased];
  const args: (string | number)[] = [];
  for (const p of pending) {
    keys.push(k.expiry(p.orderId));
    args.push(p.orderId);
  }
  for (const p of pending) args.push(p.expiresAt);
  const pendingIds = new Set(pending.map((p) => p.orderId));
  for (const id of orderIds) if (!pendingIds.has(id)) args.push(id);
  const [set, ...overdue] = (await run(redis, 'ack', keys, args)) as [number, ...string[]];
  return { set, overdue };
}

/** recover_writer.lua: re-drives the writer's batch if its lease has run out by Redis's clock. */
export async function recoverWriter(redis: RedisClient, saleId: string, writerId: string): Promise<number> {
  const k = saleKeys(saleId);
  return (await run(redis, 'recover_writer', [k.winners, k.processing(writerId), k.writers], [writerId])) as number;
}
