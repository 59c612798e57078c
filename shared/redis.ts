// Redis connections and the typed wrappers of our Lua scripts. Callers never build keys or
// argument lists themselves: each wrapper does, in the order its script's header documents.
import { readFileSync } from 'node:fs';
import { Redis, type RedisOptions } from 'ioredis';
import { saleKeys, STOCK_CHANNEL } from './keys.js';

const SCRIPTS = ['purchase', 'load_sale', 'claim', 'ack', 'recover_writer', 'restore', 'touch_due', 'snapshot'] as const;
type ScriptName = (typeof SCRIPTS)[number];
type ScriptFn = (numKeys: number, ...args: (string | number)[]) => Promise<unknown>;

const luaDir = new URL('./lua/', import.meta.url);
const sources = new Map<ScriptName, string>(SCRIPTS.map((name) => [name, readFileSync(new URL(`${name}.lua`, luaDir), 'utf8')]));

export function createRedis(url: string, options: RedisOptions = {}): Redis {
  const redis = new Redis(url, {
    // Commands wait out a reconnect instead of failing the caller after 20 tries.
    maxRetriesPerRequest: null,
    retryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 6), 2000) + Math.floor(Math.random() * 100),
    ...options,
  });
  for (const name of SCRIPTS) redis.defineCommand(name, { lua: sources.get(name)! });
  return redis;
}

function run(redis: Redis, name: ScriptName, keys: string[], args: (string | number)[]): Promise<unknown> {
  const fn = (redis as unknown as Record<ScriptName, ScriptFn>)[name];
  return fn.call(redis, keys.length, ...keys, ...args);
}

export interface SaleRules {
  stock: number;
  startsAt: number;
  endsAt: number | null;
  perUserLimit: number;
  maxPerOrder: number;
  paymentWindowSeconds: number;
}

export async function loadSale(redis: Redis, saleId: string, r: SaleRules): Promise<boolean> {
  const k = saleKeys(saleId);
  const loaded = await run(redis, 'load_sale', [k.meta, k.available], [
    r.stock, r.startsAt, r.endsAt ?? 0, r.perUserLimit, r.maxPerOrder, r.paymentWindowSeconds,
  ]);
  return loaded === 1;
}

export interface PurchaseArgs {
  saleId: string;
  userId: string;
  qty: number;
  orderId: string;
  now: number;
  /** BUY_COUNT_TTL_SECONDS: the buyer's count outlives the sale's end + payment window by this much (no end: it never expires). */
  buyCountTtlSeconds: number;
}

/** Raw {code, n} from purchase.lua; shared/purchase.ts gives it meaning. */
export async function purchaseScript(redis: Redis, a: PurchaseArgs): Promise<[number, number]> {
  const k = saleKeys(a.saleId);
  const res = (await run(redis, 'purchase', [k.meta, k.available, k.buys(a.userId), k.winners, k.queued, k.seq, k.purchased], [
    a.now, a.qty, a.orderId, a.userId, a.buyCountTtlSeconds,
  ])) as [number, number];
  return res;
}

export async function claimBatch(redis: Redis, saleId: string, writerId: string, size: number, leaseUntil: number): Promise<string[]> {
  const k = saleKeys(saleId);
  return (await run(redis, 'claim', [k.winners, k.processing(writerId), k.writers], [size, writerId, leaseUntil])) as string[];
}

export async function ackBatch(
  redis: Redis, saleId: string, writerId: string, now: number,
  pending: { orderId: string; expiresAt: number }[], orderIds: string[],
): Promise<number> {
  const k = saleKeys(saleId);
  const keys = [k.processing(writerId), k.queued, k.deadlines, ...pending.map((p) => k.expiry(p.orderId))];
  const args = [now, ...pending.map((p) => p.expiresAt), ...orderIds];
  return (await run(redis, 'ack', keys, args)) as number;
}

export async function recoverWriter(redis: Redis, saleId: string, writerId: string, now: number): Promise<number> {
  const k = saleKeys(saleId);
  return (await run(redis, 'recover_writer', [k.winners, k.processing(writerId), k.writers], [writerId, now])) as number;
}

export async function restoreStock(redis: Redis, o: { saleId: string; orderId: string; userId: string; qty: number }): Promise<boolean> {
  const k = saleKeys(o.saleId);
  const res = await run(redis, 'restore', [k.available, k.restored, k.restoredQty, k.buys(o.userId)], [
    o.orderId, o.qty, o.saleId, STOCK_CHANNEL,
  ]);
  return res === 1;
}

/** Forgets a paid order's expiry key and its deadline entry, so the nudger no longer looks at it. */
export async function dropExpiry(redis: Redis, saleId: string, orderId: string): Promise<void> {
  const k = saleKeys(saleId);
  const expiryKey = k.expiry(orderId);
  await redis.multi().del(expiryKey).zrem(k.deadlines, expiryKey).exec();
}

export async function touchDue(redis: Redis, saleId: string, now: number, limit: number): Promise<number> {
  return (await run(redis, 'touch_due', [saleKeys(saleId).deadlines], [now, limit])) as number;
}

export interface SaleSnapshot {
  available: number;
  seq: number;
  restoredQty: number;
  entries: string[];
}

export async function snapshotSale(redis: Redis, saleId: string): Promise<SaleSnapshot> {
  const k = saleKeys(saleId);
  const res = (await run(redis, 'snapshot', [k.available, k.seq, k.winners, k.writers, k.restoredQty], [k.processing('')])) as [
    number, number, number, ...string[],
  ];
  const [available, seq, restoredQty, ...entries] = res;
  return { available, seq, restoredQty, entries };
}
