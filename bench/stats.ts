// Measurements for bench/expiry-timeliness.ts: per-order lateness from Postgres, percentiles,
// close rates, and the Redis counters that explain them.
import { loadavg } from 'node:os';
import type { Redis } from 'ioredis';
import type { Pool } from '../shared/runtime/db.js';

export interface OrderTiming {
  expiresMs: number;
  closedMs: number | null;
  restoredMs: number | null;
}

/** Every order of the sale; lateness is computed from Postgres timestamps only. */
export async function lateness(pool: Pool, saleId: string): Promise<OrderTiming[]> {
  const res = await pool.query<{ e: number; c: number | null; r: number | null }>(
    `select (extract(epoch from expires_at) * 1000)::float8 as e, (extract(epoch from closed_at) * 1000)::float8 as c,
            (extract(epoch from restored_at) * 1000)::float8 as r
     from orders where sale_id = $1`,
    [saleId],
  );
  return res.rows.map((row) => ({ expiresMs: row.e, closedMs: row.c, restoredMs: row.r }));
}

export interface RedisCounters {
  expiredKeys: number;
  existsCalls: number;
  staleperc: number;
  timeCapReached: number;
}

function field(info: string, name: string): string | undefined {
  return new RegExp(`^${name}:(.*)$`, 'm').exec(info)?.[1]?.trim();
}

export async function redisCounters(redis: Redis): Promise<RedisCounters> {
  const stats = await redis.info('stats');
  const commands = await redis.info('commandstats');
  return {
    expiredKeys: Number(field(stats, 'expired_keys') ?? 0),
    existsCalls: Number(/calls=(\d+)/.exec(field(commands, 'cmdstat_exists') ?? '')?.[1] ?? 0),
    staleperc: Number(field(stats, 'expired_stale_perc') ?? 0),
    timeCapReached: Number(field(stats, 'expired_time_cap_reached_count') ?? 0),
  };
}

export interface Percentiles {
  p50: number | null;
  p90: number | null;
  p99: number | null;
  max: number | null;
}

const round = (ms: number) => Math.round(ms * 10) / 10;

/** Nearest-rank percentiles. */
function percentiles(values: number[]): Percentiles {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) =>
    sorted.length === 0 ? null : round(sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!);
  return { p50: at(0.5), p90: at(0.9), p99: at(0.99), max: at(1) };
}

export interface Summary {
  label: string;
  orders: number;
  windowS: number;
  nudgeMs: number;
  closed: number;
  restored: number;
  closedEarly: number;
  /** Open orders count with their lateness at the cutoff: with any open, each figure is a lower bound. */
  lateMs: Percentiles;
  lowerBound: boolean;
  stockBackP99Ms: number | null;
  closesPerSecond: { mean: number; peak: number };
  closedByListener: number;
  events: number;
  /** The machine's 1-minute load average at the end of the phase (2 cores: > 2 means contention). */
  loadAvg1m: number;
  available: number;
  redis: RedisCounters;
}

export function summarize(
  { label, orders, windowS, nudgeMs }: { label: string; orders: number; windowS: number; nudgeMs: number },
  rows: OrderTiming[],
  cutoff: number,
  seen: {
    closedByListener: number;
    events: number;
    available: number;
    redis: { before: RedisCounters; after: RedisCounters };
  },
): Summary {
  const closed = rows.filter((r) => r.closedMs !== null).map((r) => r.closedMs!);
  const late = rows.map((r) => (r.closedMs ?? cutoff) - r.expiresMs);
  const stockBack = rows.map((r) => (r.restoredMs ?? cutoff) - r.expiresMs);
  const perSecond = new Map<number, number>();
  for (const c of closed) perSecond.set(Math.floor(c / 1000), (perSecond.get(Math.floor(c / 1000)) ?? 0) + 1);
  const first = closed.reduce((a, b) => Math.min(a, b), Infinity);
  const last = closed.reduce((a, b) => Math.max(a, b), -Infinity);
  const spanS = closed.length > 1 ? (last - first) / 1000 : 0;
  const { before, after } = seen.redis;
  return {
    label,
    orders,
    windowS,
    nudgeMs,
    closed: closed.length,
    restored: rows.filter((r) => r.restoredMs !== null).length,
    closedEarly: rows.filter((r) => r.closedMs !== null && r.closedMs < r.expiresMs).length,
    lateMs: percentiles(late),
    lowerBound: closed.length < orders,
    stockBackP99Ms: percentiles(stockBack).p99,
    closesPerSecond: {
      mean: spanS > 0 ? Math.round(closed.length / spanS) : closed.length,
      peak: [...perSecond.values()].reduce((a, b) => Math.max(a, b), 0),
    },
    closedByListener: seen.closedByListener,
    events: seen.events,
    loadAvg1m: round(loadavg()[0]!),
    available: seen.available,
    redis: {
      expiredKeys: after.expiredKeys - before.expiredKeys,
      existsCalls: after.existsCalls - before.existsCalls,
      staleperc: after.staleperc,
      timeCapReached: after.timeCapReached - before.timeCapReached,
    },
  };
}
