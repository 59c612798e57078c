// The conservation check: every unit of a sale's stock is in exactly one place.
//   Redis available + queued + pending + paid + restoring = total
// (restoring: expired in Postgres, not yet back in Redis). Redis is read at one instant (a
// script); Postgres is then counted only up to that instant's purchase number, so purchases,
// writes, payments and restores running meanwhile cannot skew the sum.
import type { Redis } from 'ioredis';
import type { Pool } from './db.js';
import { parseWinner } from './keys.js';
import { snapshotSale } from './redis.js';

export interface Reconciliation {
  saleId: string;
  total: number;
  available: number;
  queued: number;
  pending: number;
  paid: number;
  expired: number;
  restoring: number;
  holds: boolean;
}

export async function reconcile(pool: Pool, redis: Redis, saleId: string, total: number): Promise<Reconciliation> {
  const snap = await snapshotSale(redis, saleId);
  const queuedEntries = new Map(snap.entries.map((e) => parseWinner(e)).map((w) => [w.orderId, w]));
  // A winner may still sit in a list after its row was written (a re-driven batch, or a batch
  // between insert and ack): count it once. Which winners are written is read in the same
  // statement as the sums: with two statements, a batch the writer commits in between is in
  // neither count.
  const res = await pool.query<{ pending: number; paid: number; expired: number; written: string[] }>(
    `select coalesce(sum(qty) filter (where status = 'pending'), 0)::int as pending,
            coalesce(sum(qty) filter (where status = 'paid'), 0)::int as paid,
            coalesce(sum(qty) filter (where status = 'expired'), 0)::int as expired,
            (select coalesce(array_agg(id), '{}') from orders where id = any($3::text[])) as written
     from orders where sale_id = $1 and seq <= $2`,
    [saleId, snap.seq, [...queuedEntries.keys()]],
  );
  const { pending, paid, expired, written } = res.rows[0]!;
  for (const id of written) queuedEntries.delete(id);
  const queued = [...queuedEntries.values()].reduce((sum, w) => sum + w.qty, 0);
  const restoring = expired - snap.restoredQty;
  const holds = snap.available >= 0 && restoring >= 0 && snap.available + queued + pending + paid + restoring === total;
  return { saleId, total, available: snap.available, queued, pending, paid, expired, restoring, holds };
}
