// Closing unpaid orders and giving their stock back: the one home of that sequence. Postgres
// decides (a conditional update that only moves a pending order past its deadline); Redis is
// restored afterwards through an idempotent script, and `restored_at` records it so a crash in
// between is finished by the next sweep. The writer, the listener and the replay only decide when.
// A buyer's cancel (shared/orders/cancel.ts) gives its stock back through the same `restore`, and the same
// sweep finishes a cancelled order's restore that a crash interrupted.
import type { RedisClient } from '../redis/connect.js';
import type { Pool } from '../runtime/db.js';
import { metrics, observeClosed, type ClosedBy } from '../runtime/metrics.js';
import { publishOrderEvents } from './events.js';
import { closeDue, closeOverdue, markRestored, unrestored, type ClosedOrder } from './queries.js';
import { TRANSITIONS } from './states.js';
import { restoreStocks } from './scripts.js';
import { confirmReplicated, type ReplicaAcks } from '../redis/replication.js';

/** Most orders one close statement takes; a burst of deadlines closes in fewer, larger statements. */
export const CLOSE_BATCH = 2000;

export interface Closed {
  /** Orders this call closed. */
  closed: ClosedOrder[];
  /** Units of stock this call gave back. */
  restored: number;
}

/**
 * Orders just closed (expired, or cancelled by their buyer): tells the buyers' event streams, one
 * message per batch, before the restore (the order is final already), gives their stock back and
 * counts it. Returns the units this call gave back.
 */
export async function finishClosed(
  pool: Pool,
  redis: RedisClient,
  closed: ClosedOrder[],
  by: ClosedBy,
  status: 'expired' | 'cancelled' = TRANSITIONS.expire.to,
  acks?: ReplicaAcks,
): Promise<number> {
  // Counted as soon as Postgres has closed them: whatever fails next, they are closed, once.
  observeClosed(by, closed);
  await publishOrderEvents(
    redis,
    closed.map((o) => ({ orderId: o.id, status })),
  );
  return restore(pool, redis, closed, acks);
}

/**
 * Restores each order's stock and quota (once per order, whoever else tries) and records it, once
 * `acks` (REDIS_MIN_REPLICAS_ACK, where set) says the replicas have it. Returns the units this call gave back.
 */
export async function restore(
  pool: Pool,
  redis: RedisClient,
  orders: ClosedOrder[],
  acks?: ReplicaAcks,
): Promise<number> {
  if (orders.length === 0) return 0;
  const bySale = new Map<string, ClosedOrder[]>();
  for (const o of orders) {
    const of = bySale.get(o.saleId);
    if (of) of.push(o);
    else bySale.set(o.saleId, [o]);
  }
  // One script call per sale (per RESTORE_CHUNK orders), not one per order.
  const restored = await Promise.all(
    [...bySale].map(async ([saleId, of]) => {
      const done = await restoreStocks(
        redis,
        saleId,
        of.map((o) => ({ orderId: o.id, userId: o.userId, qty: o.qty, unpaid: o.unpaid, sku: o.sku })),
      );
      return of.reduce((sum, o, i) => (done[i] ? sum + o.qty : sum), 0);
    }),
  );
  const units = restored.reduce((a, b) => a + b, 0);
  if (units > 0) metrics.stockRestored.inc(units);
  // Recorded only once the replicas have it (REDIS_MIN_REPLICAS_ACK): a restore a failover lost
  // is then still unrecorded, and the next sweep runs it again.
  await confirmReplicated(
    acks,
    orders.map((o) => o.saleId),
  );
  await markRestored(
    pool,
    orders.map((o) => o.id),
  );
  return units;
}

/** These ids are due: closes those that are pending and past their deadline, gives their stock back, records and counts it. */
export async function closeOrders(
  pool: Pool,
  redis: RedisClient,
  ids: string[],
  by: ClosedBy,
  acks?: ReplicaAcks,
): Promise<Closed> {
  const closed = await closeDue(pool, ids);
  return { closed, restored: await finishClosed(pool, redis, closed, by, 'expired', acks) };
}

/**
 * Sweeps what is overdue: every pending order past its deadline, then every expired order whose
 * stock a crash left unrestored, a batch at a time until none is left.
 */
export async function sweepOverdue(
  pool: Pool,
  redis: RedisClient,
  by: ClosedBy,
  acks?: ReplicaAcks,
): Promise<{ closed: number; restored: number }> {
  const total = { closed: 0, restored: 0 };
  for (let n = CLOSE_BATCH; n === CLOSE_BATCH; ) {
    const closed = await closeOverdue(pool, CLOSE_BATCH);
    total.closed += closed.length;
    total.restored += await finishClosed(pool, redis, closed, by, 'expired', acks);
    n = closed.length;
  }
  for (let n = CLOSE_BATCH; n === CLOSE_BATCH; ) {
    const left = await unrestored(pool, CLOSE_BATCH);
    total.restored += await restore(pool, redis, left, acks);
    n = left.length;
  }
  return total;
}
