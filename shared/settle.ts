// Settling: a sale that has ended (at its set end, or early by POST /api/sales/:id/end, which brings
// ends_at forward) with every order final leaves every per-tick loop. The replay
// records it in Postgres (`settled_at`) and then drops the sale from the Redis registry, which the
// writer and the listener's nudger walk each tick. In that order: a crash in between leaves a
// settled sale in the registry, and the next pass drops every such sale it finds there (also one
// a reload put back). Nothing else of the sale leaves Redis: the buyer's page still reads
// `available`.
import type { RedisClient } from './redis.js';
import type { Pool } from './db.js';
import { SALES_REGISTRY, saleKeys } from './keys.js';

/**
 * How long after its end a sale may settle. The purchase script compares the end with the API
 * process's clock, which may run behind Postgres's: a purchase accepted just after `ends_at` must
 * still find the sale in the registry when the writer drains it.
 */
export const SETTLE_AFTER_END_SECONDS = 60;

export interface UnsettledSale {
  id: string;
  stock: number;
}

/** The sales the replay still reconciles. */
export async function unsettledSales(pool: Pool): Promise<UnsettledSale[]> {
  const res = await pool.query<UnsettledSale>('select id, stock from sales where settled_at is null order by starts_at, id');
  return res.rows;
}

/** Of `ids`, the sales already settled in Postgres. */
export async function settledAmong(pool: Pool, ids: string[]): Promise<string[]> {
  if (ids.length === 0) return [];
  const res = await pool.query<{ id: string }>('select id from sales where id = any($1::text[]) and settled_at is not null', [ids]);
  return res.rows.map((r) => r.id);
}

// An order not yet final: pending, or expired or cancelled with its stock not yet back in Redis.
const OPEN_ORDER = `exists (select 1 from orders o where o.sale_id = s.id
  and (o.status = 'pending' or (o.status in ('expired', 'cancelled') and o.restored_at is null)))`;

/** Unsettled sales past their end (and the grace) with no order left to close or restore. */
export async function settleCandidates(pool: Pool, afterEndSeconds = SETTLE_AFTER_END_SECONDS): Promise<string[]> {
  const res = await pool.query<{ id: string }>(
    `select s.id from sales s
     where s.settled_at is null and s.ends_at <= now() - make_interval(secs => $1) and not ${OPEN_ORDER}
     order by s.ends_at`,
    [afterEndSeconds],
  );
  return res.rows.map((r) => r.id);
}

/** Records the settlement of those of `saleIds` for which everything the candidate query saw still holds; returns them. */
export async function markSettled(pool: Pool, saleIds: string[], afterEndSeconds = SETTLE_AFTER_END_SECONDS): Promise<string[]> {
  const res = await pool.query<{ id: string }>(
    `update sales s set settled_at = now()
     where s.id = any($1::text[]) and s.settled_at is null and s.ends_at <= now() - make_interval(secs => $2) and not ${OPEN_ORDER}
     returning s.id`,
    [saleIds, afterEndSeconds],
  );
  return res.rows.map((r) => r.id);
}

function results(res: [Error | null, unknown][] | null): unknown[] {
  return (res ?? []).map(([err, v]) => {
    if (err) throw err;
    return v;
  });
}

/**
 * Those of `saleIds` with nothing in flight in Redis: no winner waiting, no unacknowledged order,
 * no writer lease still running (a writer between its insert and its ack holds one) and no batch
 * left by a dead writer. Each sale is read in one transaction of its own (on a cluster, sales live
 * on different nodes; a sale's keys share one slot).
 */
export async function idleInRedis(redis: RedisClient, saleIds: string[], now = Date.now()): Promise<string[]> {
  const idle = await Promise.all(saleIds.map((id) => saleIdle(redis, id, now)));
  return saleIds.filter((_, i) => idle[i]);
}

async function saleIdle(redis: RedisClient, saleId: string, now: number): Promise<boolean> {
  const k = saleKeys(saleId);
  const [winners, queued, leases] = results(await redis.multi().llen(k.winners).hlen(k.queued).zrange(k.writers, '0', '-1', 'WITHSCORES').exec()) as [
    number, number, string[],
  ];
  if (winners > 0 || queued > 0) return false;
  const writers: string[] = [];
  for (let j = 0; j < leases.length; j += 2) {
    if (Number(leases[j + 1]) > now) return false;
    writers.push(leases[j]!);
  }
  if (writers.length === 0) return true;
  // Leases run out: a batch a dead writer held and nobody has re-driven yet keeps its sale.
  const tx = redis.multi();
  for (const w of writers) tx.llen(k.processing(w));
  return (results(await tx.exec()) as number[]).every((n) => n === 0);
}

export interface SettleResult {
  /** Sales settled by this pass. */
  settled: string[];
  /** Sales settled earlier but still in the registry (a crash between the two steps, or a reload). */
  unregistered: string[];
}

/** Sales settled per round trip: one Redis transaction and one statement each. */
const CHUNK = 1000;

/**
 * Settles every sale that is ended, final and idle and whose reconciliation held in this pass
 * (`held`), then drops it from the registry. `registry` is the registry as the pass read it.
 */
export async function settleSales(pool: Pool, redis: RedisClient, registry: string[], held: ReadonlySet<string>): Promise<SettleResult> {
  const unregistered = await settledAmong(pool, registry);
  if (unregistered.length > 0) await redis.srem(SALES_REGISTRY, ...unregistered);
  const candidates = (await settleCandidates(pool)).filter((id) => held.has(id));
  const settled: string[] = [];
  for (let i = 0; i < candidates.length; i += CHUNK) {
    const idle = await idleInRedis(redis, candidates.slice(i, i + CHUNK));
    if (idle.length === 0) continue;
    // Postgres first: the registry entry is the one thing a crash here may leave behind.
    const marked = await markSettled(pool, idle);
    if (marked.length > 0) await redis.srem(SALES_REGISTRY, ...marked);
    settled.push(...marked);
  }
  return { settled, unregistered };
}
