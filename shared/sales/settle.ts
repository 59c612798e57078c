// Settling: a sale that has ended (at its set end, or early by POST /api/sales/:id/end, which brings
// ends_at forward) with every order final leaves every per-tick loop and gives back the memory its
// buyers made it take. The replay, once the sale's reconciliation held in the same pass, records it
// in Postgres (`settled_at`), then deletes its per-order and per-buyer keys (the restored set and
// units, cancel notes, purchased ids, deadlines, leases, every buyer's count; buyers' cancels are
// counted in Postgres, see cancel-allowance.ts), then drops the sale from the Redis registry, which
// the writer and the listener's nudger walk each tick. In that order: a crash in between leaves a
// settled sale in the registry, and the next pass forgets and drops every such sale it finds there.
// What stays is constant in size: `available` (the buyer's page reads it), the rules (`meta`:
// purchases answer `403 ended`, a reload cannot hand the stock out again, and restore.lua finds the
// sale settled and restores nothing) and the purchase counter (`seq`, the purchases shown to the admin).
import type { RedisClient } from '../redis/connect.js';
import type { Pool } from '../runtime/db.js';
import { UnavailableError } from '../runtime/errors.js';
import { SALES_REGISTRY, saleKeys } from '../redis/keys.js';
import { OPEN, RESTORING, sqlStates } from '../orders/states.js';
import { saleNode } from '../redis/connect.js';
import { forgetSettledOrders } from '../pipeline/replay-scripts.js';
import { variantsColumn, type Variant } from './variants.js';

/**
 * How long after its end (by Postgres's clock) a sale may settle. purchase.lua judges the end by
 * its master's TIME, which may run behind Postgres's: a purchase that master accepted just before
 * its own view of `ends_at` must still find the sale in the registry when the writer drains it.
 */
export const SETTLE_AFTER_END_SECONDS = 60;

export interface UnsettledSale {
  id: string;
  stock: number;
  variants: Variant[];
}

/** The sales the replay still reconciles. */
export async function unsettledSales(pool: Pool): Promise<UnsettledSale[]> {
  const res = await pool.query<UnsettledSale>(
    `select id, stock, ${variantsColumn()} from sales where settled_at is null order by starts_at, id`,
  );
  return res.rows;
}

/** Of `ids`, the sales already settled in Postgres. */
export async function settledAmong(pool: Pool, ids: string[]): Promise<string[]> {
  if (ids.length === 0) return [];
  const res = await pool.query<{ id: string }>(
    'select id from sales where id = any($1::text[]) and settled_at is not null',
    [ids],
  );
  return res.rows.map((r) => r.id);
}

// An order not yet final: open (pending), or closed (expired, cancelled) with its stock not yet back in Redis.
const OPEN_ORDER = `exists (select 1 from orders o where o.sale_id = s.id
  and (o.status in ${sqlStates(OPEN)} or (o.status in ${sqlStates(RESTORING)} and o.restored_at is null)))`;

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
export async function markSettled(
  pool: Pool,
  saleIds: string[],
  afterEndSeconds = SETTLE_AFTER_END_SECONDS,
): Promise<string[]> {
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
 * on different nodes; a sale's keys share one slot), with the TIME of the master holding them: a
 * lease's expiry is stamped by that clock (claim.lua), so it is judged by it, not by this process's.
 */
export async function idleInRedis(redis: RedisClient, saleIds: string[]): Promise<string[]> {
  const idle = await Promise.all(saleIds.map((id) => saleIdle(redis, id)));
  return saleIds.filter((_, i) => idle[i]);
}

async function saleIdle(redis: RedisClient, saleId: string): Promise<boolean> {
  const k = saleKeys(saleId);
  const [winners, queued, leases, [s, us]] = results(
    await redis.multi().llen(k.winners).hlen(k.queued).zrange(k.writers, '0', '-1', 'WITHSCORES').time().exec(),
  ) as [number, number, string[], [string, string]];
  if (winners > 0 || queued > 0) return false;
  const now = Number(s) * 1000 + Math.floor(Number(us) / 1000);
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
export async function settleSales(
  pool: Pool,
  redis: RedisClient,
  registry: string[],
  held: ReadonlySet<string>,
): Promise<SettleResult> {
  const unregistered = await settledAmong(pool, registry);
  for (const id of unregistered) await forgetSale(redis, id);
  if (unregistered.length > 0) await redis.srem(SALES_REGISTRY, ...unregistered);
  const candidates = (await settleCandidates(pool)).filter((id) => held.has(id));
  const settled: string[] = [];
  for (let i = 0; i < candidates.length; i += CHUNK) {
    const idle = await idleInRedis(redis, candidates.slice(i, i + CHUNK));
    if (idle.length === 0) continue;
    // Postgres first: the registry entry is the one thing a crash here may leave behind.
    const marked = await markSettled(pool, idle);
    for (const id of marked) await forgetSale(redis, id);
    if (marked.length > 0) await redis.srem(SALES_REGISTRY, ...marked);
    settled.push(...marked);
  }
  return { settled, unregistered };
}

/** Keys one SCAN call looks at, and at most how many keys one UNLINK deletes: neither holds Redis long. */
const SCAN_BATCH = 1000;

/**
 * Deletes what a settled sale kept per order and per buyer. Its buyer counts hash goes with
 * settle_sale.lua; counts in the older format (purchase.lua, "Buyer counts") are one key each, and so
 * are expiry keys a paid order's best-effort drop left behind (they would only fire and find the
 * order final): both are found by SCAN on the node serving the sale's slot (every key of the sale
 * shares its hash tag) and unlinked a batch at a time through the client, which follows a slot that
 * moved. A key a reshard moves mid-scan may be missed; it still expires on its own.
 */
export async function forgetSale(redis: RedisClient, saleId: string): Promise<void> {
  await forgetSettledOrders(redis, saleId);
  const node = saleNode(redis, saleId);
  // Left in the registry: the next pass forgets the sale again.
  if (!node) throw new UnavailableError(`no master is known for sale ${saleId}'s slot`);
  const { buysPrefix, expiryPrefix, everyKey } = saleKeys(saleId);
  const perBuyerOrOrder = (key: string) => key.startsWith(buysPrefix) || key.startsWith(expiryPrefix);
  let cursor = '0';
  do {
    const [next, keys] = await node.scan(cursor, 'MATCH', everyKey, 'COUNT', SCAN_BATCH);
    cursor = next;
    const gone = keys.filter(perBuyerOrOrder);
    if (gone.length > 0) await redis.unlink(...gone);
  } while (cursor !== '0');
}
