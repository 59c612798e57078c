// The steps of a draw, each safe to retry after a crash anywhere in it, run by the admission
// loop's leader (shared/admission/draw/loop.ts) and by tests that stop between them:
//   makeDraw      once entries have closed: the ranks, in one transaction (Postgres only: a Redis
//                 that lost its copy of the entries cannot change the draw);
//   awardUnits    while units are left and before backfillUntil: the waiting ranks in order get an
//                 order each of a variant they want (purchase.lua, gate 'draw', under the rank's
//                 derived order id), then 'won' in Postgres. First the stock alone, as awardWalk
//                 recomputes it; once no one waiting wants what is left of it, the units that came
//                 back. A crash between the two leaves the rank waiting with a unit reserved; the
//                 retry's reservation is a no-op (purchase.lua's resend guard) and records it;
//   recoverAwards the same record without reserving anything: the waiting ranks whose order Redis
//                 holds (run after a failure, a change of leader, and before the end);
//   endBackfill   at backfillUntil (by Postgres's clock): everyone still waiting has lost;
//   endDraw       the sale ended early: the draw is made if it was not, and everyone waiting has lost.
// Each runs under the sale's row lock, so two loops (a lease lost mid-step) take turns.
import { withTransaction, type Pool, type PoolClient } from '../../runtime/db.js';
import { drawOrder, entriesDigest, pick } from './draw.js';
import { parseWinner } from '../../runtime/ids.js';
import { lockDraw, recordOver, recordRanks, recordWon, stockLeft, unranked, waitingAfter } from './queries.js';
import { drawOrderId } from '../../runtime/ids.js';
import { saleKeys } from '../../redis/keys.js';
import { Refusal } from '../../purchase/purchaser.js';
import type { RedisClient } from '../../redis/connect.js';
import { purchaseScript } from '../../sales/scripts.js';
import type { Sale } from '../../sales/model.js';

export interface DrawDeps {
  pool: Pool;
  redis: RedisClient;
  /** BUY_COUNT_TTL_SECONDS, as the API's purchases use it. */
  buyCountTtlSeconds: number;
}

/** How many waiting entries one read takes. */
const PAGE = 500;

/**
 * Ranks the entries once entries have closed and the sale is not drawn yet; returns how many were
 * ranked. `now` (the loop's clock) only spares a transaction before the close: Postgres's clock,
 * the one that judged the entries, decides.
 */
export async function makeDraw(pool: Pool, sale: Sale, now: number): Promise<number> {
  if (sale.admission !== 'draw' || now < sale.entriesCloseAt!.getTime() || now < sale.startsAt.getTime()) return 0;
  return withTransaction(pool, async (client) => {
    const lock = await lockDraw(client, sale.id);
    if (!lock || lock.drawn || !lock.closed) return 0;
    return rankAll(client, sale);
  });
}

/** Ranks every entry by the seed and marks the sale drawn (under the sale's row lock). */
async function rankAll(client: PoolClient, sale: Sale): Promise<number> {
  const rows = await unranked(client, sale.id);
  const ordered = drawOrder(
    sale.seed!,
    rows.map((r) => r.ticket),
  );
  const rankOf = new Map(ordered.map((ticket, i) => [ticket, i + 1]));
  return recordRanks(
    client,
    sale.id,
    rows.map((r) => r.buyer),
    rows.map((r) => rankOf.get(r.ticket)!),
    entriesDigest(ordered),
  );
}

const many = (sale: Sale) => sale.variants.length > 1;

/**
 * Reserves rank `rank`'s unit of variant `sku` (a sale of one: its own) for `buyer` in Redis
 * (purchase.lua's code: 1 reserved, now or before).
 */
export async function reserveUnit(
  deps: DrawDeps,
  sale: Sale,
  rank: number,
  buyer: string,
  sku?: string,
): Promise<number> {
  const [code] = await purchaseScript(deps.redis, {
    saleId: sale.id,
    userId: buyer,
    qty: 1,
    orderId: drawOrderId(sale.id, rank),
    buyCountTtlSeconds: deps.buyCountTtlSeconds,
    gate: { kind: 'draw' },
    variant: many(sale) ? sku : undefined,
  });
  return code;
}

/** Which of these orders Redis holds as reserved (in `purchased` or `deadlines`, read atomically). */
async function reserved(redis: RedisClient, saleId: string, orderIds: string[]): Promise<boolean[]> {
  const k = saleKeys(saleId);
  const res = await redis
    .multi()
    .smismember(k.purchased, ...orderIds)
    .zmscore(k.deadlines, ...orderIds)
    .exec();
  if (!res || res.some(([err]) => err))
    throw res?.find(([err]) => err)?.[0] ?? new Error('the reservation check was discarded');
  const [inPurchased, inDeadlines] = [res[0]![1] as number[], res[1]![1] as (string | null)[]];
  return orderIds.map((_, i) => inPurchased[i] === 1 || inDeadlines[i] !== null);
}

/** The variant of each reserved order: its winner entry while queued, its row once written. */
async function skusOf(client: PoolClient, redis: RedisClient, sale: Sale, orderIds: string[]): Promise<string[]> {
  if (!many(sale)) return orderIds.map(() => sale.variants[0]!.sku);
  const queued = await redis.hmget(saleKeys(sale.id).queued, ...orderIds);
  const written = new Map(
    (
      await client.query<{ id: string; sku: string }>('select id, sku from orders where id = any($1::text[])', [
        orderIds,
      ])
    ).rows.map((r) => [r.id, r.sku]),
  );
  return orderIds.map((id, i) => {
    const sku = queued[i] ? parseWinner(queued[i]).sku : written.get(id);
    if (sku === undefined) throw new Error(`sale ${sale.id}: order ${id} is reserved, but neither queued nor written`);
    return sku;
  });
}

/**
 * Records as won the waiting ranks whose order Redis holds. On a sale of one variant awards go in
 * rank order, so the first rank without one ends the look; on a sale of several a rank passed over
 * may wait before one awarded, so every waiting rank is looked at.
 */
async function recover(client: PoolClient, redis: RedisClient, sale: Sale): Promise<number> {
  let recorded = 0;
  for (let after = 0; ; ) {
    const page = await waitingAfter(client, sale.id, after, PAGE);
    if (page.length === 0) return recorded;
    after = page.at(-1)!.draw_rank;
    const ids = page.map((e) => drawOrderId(sale.id, e.draw_rank));
    const held = await reserved(redis, sale.id, ids);
    const heldIds = ids.filter((_, i) => held[i]);
    const found = heldIds.length > 0 ? await skusOf(client, redis, sale, heldIds) : [];
    const skus = new Map(heldIds.map((id, i) => [id, found[i]!]));
    for (const [i, e] of page.entries()) {
      if (!held[i]) {
        if (!many(sale)) return recorded;
        continue;
      }
      if (await recordWon(client, sale.id, e.draw_rank, ids[i]!, skus.get(ids[i]!)!)) recorded++;
    }
  }
}

/** Records the awards Redis made and Postgres missed; returns how many. */
export async function recoverAwards(pool: Pool, redis: RedisClient, sale: Sale): Promise<number> {
  return withTransaction(pool, async (client) => {
    const lock = await lockDraw(client, sale.id);
    return lock?.drawn && !lock.over ? recover(client, redis, sale) : 0;
  });
}

/**
 * The units this pass may give, per variant. While anyone waiting wants a unit of the stock not
 * yet given, the stock alone (never more than Redis has left), so the award is the one awardWalk
 * recomputes whatever came back meanwhile; after that, every unit Redis has left.
 */
async function unitsToGive(client: PoolClient, redis: RedisClient, sale: Sale): Promise<Map<string, number>> {
  const k = saleKeys(sale.id);
  const inRedis = many(sale)
    ? new Map(Object.entries(await redis.hgetall(k.variantsLeft)).map(([sku, n]) => [sku, Number(n)]))
    : new Map([[sale.variants[0]!.sku, Number((await redis.get(k.available)) ?? 0)]]);
  const stock = await stockLeft(client, sale.id, new Map(sale.variants.map((v) => [v.sku, v.stock])));
  if (!stock.wanted) return inRedis;
  return new Map([...stock.left].map(([sku, n]) => [sku, Math.min(n, inRedis.get(sku) ?? 0)]));
}

/**
 * Gives units to the waiting ranks in order, one order each of the variant they want (or their
 * second choice), until none is left, nobody waits, or backfillUntil by Postgres's clock (`now`
 * only spares a transaction after it). The units are counted at the start: one that comes back
 * during the pass waits for the next, which starts from the lowest rank again, so it never goes
 * past an entrant passed over who wants it. `recheck`: first record the awards a failed step left
 * (recoverAwards). Returns how many orders this call made.
 */
export async function awardUnits(deps: DrawDeps, sale: Sale, now: number, recheck = true): Promise<number> {
  if (now >= sale.backfillUntil!.getTime()) return 0;
  return withTransaction(deps.pool, async (client) => {
    const lock = await lockDraw(client, sale.id);
    if (!lock?.drawn || lock.over || lock.backfillOver) return 0;
    if (recheck) await recover(client, deps.redis, sale);
    const units = await unitsToGive(client, deps.redis, sale);
    let awarded = 0;
    for (let after = 0; ; ) {
      if (![...units.values()].some((n) => n > 0)) return awarded;
      const page = await waitingAfter(client, sale.id, after, PAGE);
      if (page.length === 0) return awarded;
      for (const e of page) {
        after = e.draw_rank;
        const sku = pick({ variant: e.variant, secondChoice: e.second_choice }, units);
        if (sku === null) continue;
        const code = await reserveUnit(deps, sale, e.draw_rank, e.buyer, sku);
        // Sold out (a unit taken meanwhile), or the sale ended: the rest wait for the next pass.
        if (code === Refusal.SoldOut || code === Refusal.NotEnoughStock || code === Refusal.Ended) return awarded;
        if (code !== 1)
          throw new Error(`sale ${sale.id}: purchase.lua refused the draw's unit of rank ${e.draw_rank} with ${code}`);
        if (await recordWon(client, sale.id, e.draw_rank, drawOrderId(sale.id, e.draw_rank), sku)) awarded++;
      }
    }
  });
}

/**
 * At or after backfillUntil: records the awards Redis made, then everyone still waiting has lost.
 * Returns how many lost. Postgres's clock decides, as for the close of entries; `now` only spares
 * a transaction before it.
 */
export async function endBackfill(deps: DrawDeps, sale: Sale, now: number): Promise<number> {
  if (now < sale.backfillUntil!.getTime()) return 0;
  return withTransaction(deps.pool, async (client) => {
    const lock = await lockDraw(client, sale.id);
    if (!lock?.drawn || lock.over || !lock.backfillOver) return 0;
    await recover(client, deps.redis, sale);
    return recordOver(client, sale.id);
  });
}

/**
 * Ends a draw with its sale, inside endSale's transaction (shared/sales/admin.ts), which holds the
 * sale's row: the draw is made now if it was not (entries stop: the insert refuses a drawn sale),
 * the awards Redis made are recorded, and every entrant still without an order has lost at once.
 * Returns how many lost; 0 for a draw over already, or a sale that is no draw.
 */
export async function endDraw(client: PoolClient, redis: RedisClient, sale: Sale): Promise<number> {
  const lock = await lockDraw(client, sale.id);
  if (!lock || lock.over) return 0;
  if (!lock.drawn) await rankAll(client, sale);
  await recover(client, redis, sale);
  return recordOver(client, sale.id);
}
