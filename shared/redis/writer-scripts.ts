// The wrappers of the scripts that hand out work under a lease: the order writer's batches (claim,
// ack, recover_writer; see writer-lease.ts) and the admission loop's lease (lease.lua).
import { saleKeys } from '../keys.js';
import type { RedisClient } from './connect.js';
import { run } from './scripts.js';

/** lease.lua: whether `holder` holds `key` for the next `ms` (taken or renewed). */
export async function holdLease(redis: RedisClient, key: string, holder: string, ms: number): Promise<boolean> {
  return (await run(redis, 'lease', [key], [holder, ms])) === 1;
}

export async function claimBatch(redis: RedisClient, saleId: string, writerId: string, size: number, leaseUntil: number): Promise<string[]> {
  const k = saleKeys(saleId);
  return (await run(redis, 'claim', [k.winners, k.processing(writerId), k.writers], [size, writerId, leaseUntil])) as string[];
}

export async function ackBatch(
  redis: RedisClient, saleId: string, writerId: string, now: number,
  pending: { orderId: string; expiresAt: number }[], orderIds: string[],
): Promise<number> {
  const k = saleKeys(saleId);
  // Each pending order's expiry key is declared (KEYS[5..]); its id is sent once: its queued entry goes with it.
  const keys = [k.processing(writerId), k.queued, k.deadlines, k.purchased];
  const args: (string | number)[] = [now];
  for (const p of pending) {
    keys.push(k.expiry(p.orderId));
    args.push(p.orderId);
  }
  for (const p of pending) args.push(p.expiresAt);
  const pendingIds = new Set(pending.map((p) => p.orderId));
  for (const id of orderIds) if (!pendingIds.has(id)) args.push(id);
  return (await run(redis, 'ack', keys, args)) as number;
}

export async function recoverWriter(redis: RedisClient, saleId: string, writerId: string, now: number): Promise<number> {
  const k = saleKeys(saleId);
  return (await run(redis, 'recover_writer', [k.winners, k.processing(writerId), k.writers], [writerId, now])) as number;
}
