// Redis connections and the typed wrappers of our Lua scripts. Callers never build keys or
// argument lists themselves: each wrapper does, in the order its script's header documents.
import { readFileSync } from 'node:fs';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import type { RedisTarget } from './config.js';
import { saleKeys, STOCK_CHANNEL } from './keys.js';
import type { Logger } from './logger.js';

const SCRIPTS = ['purchase', 'load_sale', 'end_sale', 'claim', 'ack', 'recover_writer', 'restore', 'touch_due', 'snapshot', 'cancel'] as const;
type ScriptName = (typeof SCRIPTS)[number];
/**
 * How many KEYS each script takes, declared up front: ioredis's auto-pipelining routes a command
 * on a cluster by its first argument, which must then be a key, not the key count. Scripts that
 * take a key per order (ack, touch_due, restore) take a prefix instead and build those keys, which
 * share the sale's hash tag and so its slot.
 */
const KEY_COUNTS: Record<ScriptName, number> = { purchase: 9, load_sale: 2, end_sale: 1, claim: 3, ack: 4, recover_writer: 3, restore: 3, touch_due: 2, snapshot: 5, cancel: 2 };
type ScriptFn = (...args: (string | number)[]) => Promise<unknown>;

const luaDir = new URL('./lua/', import.meta.url);
const sources = new Map<ScriptName, string>(SCRIPTS.map((name) => [name, readFileSync(new URL(`${name}.lua`, luaDir), 'utf8')]));

/** One server, a Sentinel-watched master, or a cluster: the commands and scripts are the same. */
export type RedisClient = Redis | Cluster;

/** How often a cluster client re-reads the slot map (ioredis never does unless told). */
const SLOTS_REFRESH_MS = 1000;

export function createRedis(url: string, options?: RedisOptions): Redis;
export function createRedis(target: RedisTarget, options?: RedisOptions): RedisClient;
export function createRedis(where: RedisTarget | string, options: RedisOptions = {}): RedisClient {
  const target: RedisTarget = typeof where === 'string' ? { kind: 'single', url: where } : where;
  const common: RedisOptions = {
    // Commands wait out a reconnect instead of failing the caller after 20 tries.
    maxRetriesPerRequest: null,
    retryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 6), 2000) + Math.floor(Math.random() * 100),
    // A master demoted under us (a failover) answers writes with READONLY, having run nothing:
    // reconnect (which asks the sentinels or the slot map again) and resend.
    reconnectOnError: (err) => (err.message.startsWith('READONLY') ? 2 : false),
    ...options,
  };
  const auth = target.kind === 'single' ? {} : {
    username: target.auth.username, password: target.auth.password, ...(target.auth.tls ? { tls: {} } : {}),
  };
  let redis: RedisClient;
  if (target.kind === 'single') {
    redis = new Redis(target.url, common);
  } else if (target.kind === 'sentinel') {
    redis = new Redis({
      ...common, ...auth, sentinels: target.sentinels, name: target.name, sentinelPassword: target.sentinelPassword,
      enableTLSForSentinelMode: target.auth.tls,
      // The sentinels' +switch-master moves the connection at once, instead of it learning of the
      // failover from its first refused write (a subscribed connection never would).
      failoverDetector: true,
    });
  } else {
    redis = new Cluster(target.nodes, {
      redisOptions: { ...common, ...auth },
      enableOfflineQueue: options.enableOfflineQueue ?? true,
      enableAutoPipelining: options.enableAutoPipelining ?? false,
      // Every command goes to its slot's master; replicas are for failover only.
      scaleReads: 'master',
      slotsRefreshInterval: SLOTS_REFRESH_MS,
      clusterRetryStrategy: (times) => Math.min(100 * times, 2000),
    });
  }
  for (const name of SCRIPTS) redis.defineCommand(name, { lua: sources.get(name)!, numberOfKeys: KEY_COUNTS[name] });
  return redis;
}

/**
 * Closes a connection once the replies it waits for are in. quit() alone leaves a Sentinel
 * client's failover detector connected to the sentinels (ioredis 6), reconnecting forever and
 * keeping the process alive; disconnect() after it closes those too.
 */
export async function quitRedis(redis: RedisClient): Promise<void> {
  try {
    await redis.quit();
  } finally {
    redis.disconnect();
  }
}

/**
 * A connection for subscriptions that carry hints (stock back on sale, order transitions): it may
 * wait for a connection (offline queue, no command timeout), and ioredis reconnects by itself, so
 * each distinct connection failure is logged once, not at every retry, until it is back.
 */
export function hintSubscriber(redis: RedisClient, logger: Logger, what: string): RedisClient {
  const subscriber = duplicateRedis(redis, { enableOfflineQueue: true, commandTimeout: undefined });
  let lastError = '';
  subscriber.on('error', (err: Error) => {
    if (err.message !== lastError) logger.warn({ err: err.message }, `${what} connection error`);
    lastError = err.message;
  });
  subscriber.on('ready', () => {
    lastError = ''; // the next outage is news again
  });
  return subscriber;
}

/** Another connection to the same Redis (a subscriber), with `options` on top. */
export function duplicateRedis(redis: RedisClient, options: RedisOptions = {}): RedisClient {
  if (redis instanceof Cluster) {
    const { enableOfflineQueue = redis.options.enableOfflineQueue } = options;
    return redis.duplicate([], { enableOfflineQueue, redisOptions: { ...redis.options.redisOptions, ...options } });
  }
  return redis.duplicate(options);
}

/** The masters' connections: a cluster's, as its slot map knows them now, or the one server. */
export function masterNodes(redis: RedisClient): Redis[] {
  return redis instanceof Cluster ? redis.nodes('master') : [redis];
}

/** A node as the slot map names it: host:port. */
export const nodeName = (node: Redis) => `${node.options.host}:${node.options.port}`;

/**
 * Every master answers: one server's PING, or on a cluster each master's (a cluster is only as
 * ready as its least available master, since any sale may live there).
 */
export async function pingMasters(redis: RedisClient): Promise<void> {
  if (!(redis instanceof Cluster)) {
    await redis.ping();
    return;
  }
  if (redis.status !== 'ready') throw new Error(`the cluster connection is ${redis.status}`);
  const masters = redis.nodes('master');
  if (masters.length === 0) throw new Error('the cluster has no master in its slot map');
  await Promise.all(masters.map((node) => node.ping().catch((err: Error) => {
    throw new Error(`master ${nodeName(node)}: ${err.message}`);
  })));
}

function run(redis: RedisClient, name: ScriptName, keys: string[], args: (string | number)[]): Promise<unknown> {
  const fn = (redis as unknown as Record<ScriptName, ScriptFn>)[name];
  const fixed = KEY_COUNTS[name];
  if (keys.length !== fixed) throw new Error(`${name}.lua takes ${fixed} keys, given ${keys.length}`);
  return fn.call(redis, ...keys, ...args);
}

export interface SaleRules {
  stock: number;
  startsAt: number;
  endsAt: number | null;
  perUserLimit: number;
  maxPerOrder: number;
  paymentWindowSeconds: number;
  /** 'pow': purchase.lua sells only to a buyer whose purchase token the API has checked (default none). */
  challenge?: 'none' | 'pow';
}

export async function loadSale(redis: RedisClient, saleId: string, r: SaleRules): Promise<boolean> {
  const k = saleKeys(saleId);
  const loaded = await run(redis, 'load_sale', [k.meta, k.available], [
    r.stock, r.startsAt, r.endsAt ?? 0, r.perUserLimit, r.maxPerOrder, r.paymentWindowSeconds, r.challenge ?? 'none',
  ]);
  return loaded === 1;
}

/** Brings a loaded sale's end forward to `endsAt` (ms): 1 moved, 0 ended at or before it already, -1 not loaded. */
export async function endSaleScript(redis: RedisClient, saleId: string, endsAt: number): Promise<1 | 0 | -1> {
  return (await run(redis, 'end_sale', [saleKeys(saleId).meta], [endsAt])) as 1 | 0 | -1;
}

export interface PurchaseArgs {
  saleId: string;
  userId: string;
  qty: number;
  orderId: string;
  now: number;
  /** BUY_COUNT_TTL_SECONDS: the buyer's count outlives the sale's end + payment window by this much (no end: it never expires). */
  buyCountTtlSeconds: number;
  /** The purchase token the API checked for this buyer and sale (a `pow` sale requires one): it buys once. */
  token?: { id: string; expiresAt: number };
}

/** How long past its expiry a spent token's mark is kept: API hosts whose clocks run behind still accept the token that long. */
const TOKEN_MARK_MARGIN_MS = 10_000;

/** Raw {code, n} from purchase.lua; shared/purchase.ts gives it meaning. */
export async function purchaseScript(redis: RedisClient, a: PurchaseArgs): Promise<[number, number]> {
  const k = saleKeys(a.saleId);
  const t = a.token;
  // Without a token the script never reads or writes KEYS[9]; it is named only to keep the key count fixed.
  const res = (await run(redis, 'purchase', [k.meta, k.available, k.buys(a.userId), k.winners, k.queued, k.seq, k.purchased, k.deadlines, k.tokenUsed(t ? t.id : '')], [
    a.now, a.qty, a.orderId, a.userId, a.buyCountTtlSeconds, t ? 1 : 0, t ? t.expiresAt + TOKEN_MARK_MARGIN_MS : 0,
  ])) as [number, number];
  return res;
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
  // Expiry key names are built in the script from the prefix: half the arguments to send and parse.
  const args: (string | number)[] = [now, k.expiryPrefix, pending.length];
  for (const p of pending) args.push(p.orderId, p.expiresAt);
  for (const id of orderIds) args.push(id);
  return (await run(redis, 'ack', [k.processing(writerId), k.queued, k.deadlines, k.purchased], args)) as number;
}

export async function recoverWriter(redis: RedisClient, saleId: string, writerId: string, now: number): Promise<number> {
  const k = saleKeys(saleId);
  return (await run(redis, 'recover_writer', [k.winners, k.processing(writerId), k.writers], [writerId, now])) as number;
}

export interface Restorable { orderId: string; userId: string; qty: number }

/** Most orders one restore.lua call takes: a bigger batch is split, so no single call holds Redis long. */
export const RESTORE_CHUNK = 1000;

/** Gives one sale's orders their stock and quota back (restore.lua); for each order, true if this call restored it. */
export async function restoreStocks(redis: RedisClient, saleId: string, orders: Restorable[]): Promise<boolean[]> {
  const k = saleKeys(saleId);
  const calls: Promise<boolean[]>[] = [];
  for (let from = 0; from < orders.length; from += RESTORE_CHUNK) {
    const chunk = orders.slice(from, from + RESTORE_CHUNK);
    const args: (string | number)[] = [saleId, STOCK_CHANNEL, k.buysPrefix];
    for (const o of chunk) args.push(o.orderId, o.qty, o.userId);
    calls.push(run(redis, 'restore', [k.available, k.restored, k.restoredQty], args).then((res) => (res as number[]).map((r) => r === 1)));
  }
  return (await Promise.all(calls)).flat();
}

export async function restoreStock(redis: RedisClient, o: { saleId: string; orderId: string; userId: string; qty: number }): Promise<boolean> {
  const [restored] = await restoreStocks(redis, o.saleId, [o]);
  return restored!;
}

/** cancel.lua: a still-queued order of this buyer, noted as being cancelled; its winner entry, or null. */
export async function markCancelling(redis: RedisClient, saleId: string, orderId: string, userId: string, now: number): Promise<string | null> {
  const k = saleKeys(saleId);
  return ((await run(redis, 'cancel', [k.queued, k.cancels], [orderId, userId, now])) as string | null) ?? null;
}

/**
 * Forgets a paid or cancelled order's expiry key and its deadline entry, so the nudger no longer
 * looks at it, and puts its id back in the purchased set in the same transaction (see keys.ts).
 * The entry may be the expiry key name an older writer stored.
 */
export async function dropExpiry(redis: RedisClient, saleId: string, orderId: string): Promise<void> {
  const k = saleKeys(saleId);
  const expiryKey = k.expiry(orderId);
  await redis.multi().del(expiryKey).zrem(k.deadlines, orderId, expiryKey).sadd(k.purchased, orderId).exec();
}

export async function touchDue(redis: RedisClient, saleId: string, now: number, limit: number): Promise<number> {
  const k = saleKeys(saleId);
  return (await run(redis, 'touch_due', [k.deadlines, k.purchased], [now, limit, k.expiryPrefix])) as number;
}

export interface SaleSnapshot {
  available: number;
  seq: number;
  restoredQty: number;
  entries: string[];
}

export async function snapshotSale(redis: RedisClient, saleId: string): Promise<SaleSnapshot> {
  const k = saleKeys(saleId);
  const res = (await run(redis, 'snapshot', [k.available, k.seq, k.winners, k.writers, k.restoredQty], [k.processing('')])) as [
    number, number, number, ...string[],
  ];
  const [available, seq, restoredQty, ...entries] = res;
  return { available, seq, restoredQty, entries };
}
