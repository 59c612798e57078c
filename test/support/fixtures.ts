// What tests build their cases from: sales, seeded randomness, many requests at once, and waiting
// for the state a test expects (polled, with a deadline) instead of sleeping.
import '../../shared/admission/modes.js';
import { readFileSync } from 'node:fs';
import { OrderWriter } from '../../shared/pipeline/writer.js';
import { saleKeys } from '../../shared/redis/keys.js';
import { OPEN, RESTORING, sqlStates } from '../../shared/orders/states.js';
import type { RedisClient } from '../../shared/redis/connect.js';
import type { LoadOptions } from '../../shared/sales/scripts.js';
import { createSale, getSale, parseSaleInput, type Sale } from '../../shared/sales/sale.js';
import type { TestEnv } from './env.js';

let saleCounter = 0;

/** What a unit of a test sale costs, unless a test says otherwise: spread into any sale definition. */
export const SALE_PRICE = { price: 1999, currency: 'EUR' } as const;

/** `load.legacyBuyCounts`: the sale keeps a key per buyer's count, as LEGACY_BUY_COUNTS or the previous release loads it. */
export async function newSale(
  env: TestEnv,
  fields: Record<string, unknown> = {},
  load: LoadOptions = {},
): Promise<Sale> {
  const sale = parseSaleInput({
    id: `sale-${process.pid}-${++saleCounter}`,
    name: 'Test sale',
    // With variants, their sum.
    ...(fields.variants ? {} : { stock: 10 }),
    ...SALE_PRICE,
    ...fields,
  });
  await createSale(env.pool, env.redis, sale, load);
  return sale;
}

export const HOUR = 3_600_000;

/** A buyer's count as purchase.lua reads it: their own key (the older format) plus their field in the sale's hash. */
export async function buyCount(redis: RedisClient, saleId: string, user: string): Promise<number> {
  const k = saleKeys(saleId);
  const [own, field] = await Promise.all([redis.get(k.buys(user)), redis.hget(k.buyCounts, user)]);
  return Number(own ?? 0) + Number(field ?? 0);
}

/** A draw's fields with its entries open since a minute ago for an hour (closeEntries brings the close to now): spread into a sale definition. */
export const openDraw = () => ({
  admission: 'draw',
  startsAt: new Date(Date.now() - 60_000).toISOString(),
  entriesCloseAt: new Date(Date.now() + HOUR).toISOString(),
});

/** A draw's entries close now and its backfill runs for an hour: the sale as Postgres then has it (the API's cache follows within a second). */
export async function closeEntries(env: TestEnv, s: Sale): Promise<Sale> {
  await env.pool.query(
    "update sales set entries_close_at = now(), backfill_until = now() + interval '1 hour' where id = $1",
    [s.id],
  );
  return (await getSale(env.pool, s.id))!;
}

/** A draw's backfill ends `interval` from Postgres's now() (the clock that judges it; entries close no later): the sale as Postgres then has it. */
export async function endBackfillIn(env: TestEnv, s: Sale, interval = '0 seconds'): Promise<Sale> {
  await env.pool.query(
    'update sales set backfill_until = now() + $2::interval, entries_close_at = least(entries_close_at, now() + $2::interval) where id = $1',
    [s.id, interval],
  );
  return (await getSale(env.pool, s.id))!;
}

/**
 * A sale not yet started starts now, in Postgres (what the views read) and in Redis's meta (what
 * purchase.lua judges by): a test opens a sale when it is ready, not when a wall-clock start comes.
 * The sale as Postgres then has it (the API's cache follows within a second).
 */
export async function startNow(env: TestEnv, s: Sale): Promise<Sale> {
  const res = await env.pool.query<{ starts_at: Date }>(
    'update sales set starts_at = now() where id = $1 and starts_at > now() returning starts_at',
    [s.id],
  );
  if (res.rowCount !== 1) throw new Error(`sale ${s.id} has already started`);
  await env.redis.hset(saleKeys(s.id).meta, 'startsAt', res.rows[0]!.starts_at.getTime());
  return (await getSale(env.pool, s.id))!;
}

/** Redis's TIME in ms: the clock the scripts judge by, and the one tests place times against. */
export async function redisNow(redis: RedisClient): Promise<number> {
  const [s, us] = await redis.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

/**
 * A sale whose room has not opened started `agoMs` before Redis's now, in Postgres and in Redis's
 * meta: the next admission step opens the room with the bucket filled from the start (`agoMs` x
 * the rate, capped at a second's worth). The sale as Postgres then has it.
 */
export async function startedAgo(env: TestEnv, s: Sale, agoMs: number): Promise<Sale> {
  const at = (await redisNow(env.redis)) - agoMs;
  await env.pool.query('update sales set starts_at = to_timestamp($2::float8 / 1000) where id = $1', [s.id, at]);
  await env.redis.hset(saleKeys(s.id).meta, 'startsAt', at);
  return (await getSale(env.pool, s.id))!;
}

/**
 * An open room's token bucket emptied and refilling from `agoMs` before Redis's now: the next step
 * has `agoMs` x the rate's tokens and the time the step itself takes (1000 or more: exactly a
 * second's worth, the burst's cap); a negative `agoMs` holds the bucket empty until then.
 */
export async function refillRoom(env: TestEnv, s: Sale, agoMs: number): Promise<void> {
  const k = saleKeys(s.id);
  if ((await env.redis.hget(k.room, 'phase')) !== 'open') throw new Error(`sale ${s.id}'s room is not open`);
  await env.redis.hset(k.room, 'tokens', 0, 'tickAt', (await redisNow(env.redis)) - agoMs);
}

/** A small seeded PRNG (mulberry32) so fault schedules are reproducible from the seed printed. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Runs fn(i) for i in [0, n) with at most `concurrency` in flight. */
export async function runConcurrently<T>(n: number, concurrency: number, fn: (i: number) => Promise<T>): Promise<T[]> {
  const results = new Array<T>(n);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, n) }, async () => {
      while (next < n) {
        const i = next++;
        results[i] = await fn(i);
      }
    }),
  );
  return results;
}

export function countBy<T>(items: T[], key: (t: T) => string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const it of items) out[key(it)] = (out[key(it)] ?? 0) + 1;
  return out;
}

export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | undefined | null | false>,
  timeoutMs = 20_000,
  everyMs = 25,
): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Orders of a sale in Postgres, of one status or all. */
export async function orderCount(env: TestEnv, saleId: string, status?: string): Promise<number> {
  const res = await env.pool.query<{ n: number }>(
    `select count(*)::int as n from orders where sale_id = $1 and ($2::text is null or status = $2)`,
    [saleId, status ?? null],
  );
  return res.rows[0]!.n;
}

/**
 * The payment deadline of a sale's pending orders (or of `ids` among them) comes now: in Postgres
 * (what payment and the close check), in the deadlines index (what the listener's nudger reads) and
 * by each expiry key in Redis, whose `expired` event a listener closes it on. A test ends a long
 * window when it is ready instead of racing a short one.
 */
export async function deadlineNow(env: TestEnv, saleId: string, ids?: string[]): Promise<string[]> {
  const moved = await env.pool.query<{ id: string; ms: string }>(
    `update orders set expires_at = now() where sale_id = $1 and status = 'pending' and ($2::text[] is null or id = any($2))
     returning id, (extract(epoch from expires_at) * 1000)::int8 as ms`,
    [saleId, ids ?? null],
  );
  const k = saleKeys(saleId);
  await Promise.all(
    moved.rows.map(async (r) => {
      // Older writers indexed the expiry key's name instead of the id: whichever is there moves.
      await env.redis.multi().zadd(k.deadlines, 'XX', r.ms, r.id).zadd(k.deadlines, 'XX', r.ms, k.expiry(r.id)).exec();
      // Not 1 ms: Redis 7.0 reads its clock again to judge a new expiry already past, and a key it finds
      // so is deleted at once with a `del` event, not `expired` (3 of 5,000 under load), which no
      // listener hears. 100 ms is never past at that second reading on a machine this busy.
      await env.redis.pexpire(k.expiry(r.id), 100);
    }),
  );
  return moved.rows.map((r) => r.id);
}

/**
 * Writes every queued winner of every sale, as the order writer would, as writer `writerId`. Its
 * lease is 1 ms unless given, so none is left running afterwards.
 */
export async function drainWriter(env: TestEnv, writerId: string, writerLeaseMs = 1): Promise<void> {
  const writer = new OrderWriter({
    pool: env.pool,
    redis: env.redis,
    logger: env.logger,
    config: { ...env.config, writerId, writerLeaseMs },
  });
  while ((await writer.drainOnce()) > 0);
}

/** Waits until every purchase the sale accepted is written to Postgres (none left queued in Redis). */
export async function written(env: TestEnv, saleId: string, what = 'accepted purchases written'): Promise<void> {
  await waitFor(what, async () => (await env.redis.hlen(saleKeys(saleId).queued)) === 0);
}

/** Waits until a sale is at rest: nothing queued, nothing open (pending), every closed (expired, cancelled) order's stock back. */
export async function settle(env: TestEnv, saleId: string, timeoutMs = 40_000): Promise<void> {
  const k = saleKeys(saleId);
  await waitFor(
    `sale ${saleId} at rest`,
    async () => {
      if ((await env.redis.hlen(k.queued)) > 0) return false;
      const res = await env.pool.query<{ n: number }>(
        `select count(*)::int as n from orders where sale_id = $1
       and (status in ${sqlStates(OPEN)} or (status in ${sqlStates(RESTORING)} and restored_at is null))`,
        [saleId],
      );
      return res.rows[0]!.n === 0;
    },
    timeoutMs,
    100,
  );
}

/** Resident memory of a process in MiB, from /proc. */
export function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(m[1]) / 1024;
}
