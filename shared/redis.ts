// Redis connections and the typed wrappers of our Lua scripts. Callers never build keys or
// argument lists themselves: each wrapper does, in the order its script's header documents.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import type { RedisTarget } from './config.js';
import { saleKeys, STOCK_CHANNEL } from './keys.js';
import { masterGuard, reviveOnEnd, sentinelOptions } from './sentinel.js';
import type { Logger } from './logger.js';
import { SALE_DEFINITION, type Sale, type SaleField } from './sale-definition.js';

const SCRIPTS = [
  'purchase', 'load_sale', 'end_sale', 'claim', 'ack', 'recover_writer', 'restore', 'touch_due', 'snapshot', 'cancel', 'settle_sale', 'join_queue', 'admit', 'queue_status', 'lease',
] as const;
type ScriptName = (typeof SCRIPTS)[number];
/**
 * How many KEYS each script takes, declared up front: ioredis's auto-pipelining routes a command
 * on a cluster by its first argument, which must then be a key, not the key count. ack takes a
 * prefix instead and builds its new expiry keys. Those that read or change a key per order or per
 * writer (null: the count goes first) declare every key, so that while a reshard moves the slot
 * Redis refuses them whole (ASK, TRYAGAIN) rather than run them where some keys have not arrived
 * (see their headers); auto-pipelining is off for them.
 */
const KEY_COUNTS: Record<ScriptName, number | null> = {
  purchase: 11, load_sale: 2, end_sale: 1, claim: 3, ack: 4, recover_writer: 3, restore: null, touch_due: null, snapshot: null, cancel: 2, settle_sale: 12,
  join_queue: 4, admit: 5, queue_status: 4, lease: 1,
};
const PER_CALL_KEYS = SCRIPTS.filter((name) => KEY_COUNTS[name] === null);
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
    autoPipeliningIgnoredCommands: PER_CALL_KEYS,
    ...options,
  };
  let redis: RedisClient;
  if (target.kind === 'single') {
    redis = new Redis(target.url, common);
  } else if (target.kind === 'sentinel') {
    redis = new Redis({ ...common, ...sentinelOptions(target), ...masterGuard(target.allowedMasters) });
    reviveOnEnd(redis);
  } else {
    const { username, password, tls } = target.auth;
    redis = new Cluster(target.nodes, {
      redisOptions: { ...common, username, password, ...(tls ? { tls: {} } : {}) },
      enableOfflineQueue: options.enableOfflineQueue ?? true,
      enableAutoPipelining: options.enableAutoPipelining ?? false,
      autoPipeliningIgnoredCommands: PER_CALL_KEYS,
      // Every command goes to its slot's master; replicas are for failover only.
      scaleReads: 'master',
      slotsRefreshInterval: SLOTS_REFRESH_MS,
      clusterRetryStrategy: (times) => Math.min(100 * times, 2000),
    });
  }
  for (const name of SCRIPTS) redis.defineCommand(name, { lua: sources.get(name)!, ...(KEY_COUNTS[name] === null ? {} : { numberOfKeys: KEY_COUNTS[name] }) });
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
  const copy = redis.duplicate(options);
  return copy.options.sentinels ? reviveOnEnd(copy) : copy;
}

/** The masters' connections: a cluster's, as its slot map knows them now, or the one server. */
export function masterNodes(redis: RedisClient): Redis[] {
  return redis instanceof Cluster ? redis.nodes('master') : [redis];
}

/** A node as the slot map names it: host:port. */
export const nodeName = (node: Redis) => `${node.options.host}:${node.options.port}`;

/** Redis Cluster's key-to-slot function (CRC16 of the hash tag), as ioredis itself computes it. */
const calculateSlot = createRequire(import.meta.url)('cluster-key-slot') as (key: string) => number;

/**
 * The connection that serves a sale's slot now: the one server, the Sentinel master, or the
 * cluster master the slot map names (undefined when it names none). Every key of a sale is there.
 */
export function saleNode(redis: RedisClient, saleId: string): Redis | undefined {
  if (!(redis instanceof Cluster)) return redis;
  const owner = redis.slots[calculateSlot(saleKeys(saleId).meta)]?.[0];
  return owner === undefined ? undefined : redis.nodes('master').find((n) => nodeName(n) === owner);
}

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

/** Runs one of our scripts with its keys and arguments in the order its header documents (the wrappers here and in room.ts). */
export function run(redis: RedisClient, name: ScriptName, keys: string[], args: (string | number)[]): Promise<unknown> {
  const fn = (redis as unknown as Record<ScriptName, ScriptFn>)[name];
  const fixed = KEY_COUNTS[name];
  if (fixed === null) return fn.call(redis, keys.length, ...keys, ...args);
  if (keys.length !== fixed) throw new Error(`${name}.lua takes ${fixed} keys, given ${keys.length}`);
  return fn.call(redis, ...keys, ...args);
}

/** A sale's rules as load_sale.lua keeps them: times in ms; a rule left out takes its default. */
export type SaleRules = { stock: number } & { [K in SaleField]?: Sale[K] extends Date | null ? number | null : Sale[K] };

const META = (Object.keys(SALE_DEFINITION) as SaleField[]).flatMap((key) => {
  const { redis, schema } = SALE_DEFINITION[key];
  return redis ? [{ key, ...redis, fallback: schema.default as string | number | undefined }] : [];
});

/** How a sale is loaded beyond its rules. */
export interface LoadOptions {
  /** LEGACY_BUY_COUNTS: the sale keeps each buyer's count in a key of its own, which APIs of the previous release read (see purchase.lua). */
  legacyBuyCounts?: boolean;
}

export async function loadSale(redis: RedisClient, saleId: string, r: SaleRules, opts: LoadOptions = {}): Promise<boolean> {
  const k = saleKeys(saleId);
  const meta = META.flatMap(({ key, name, none, admission, fallback }) => {
    const v = admission && r.admission !== admission ? null : (r[key] ?? none ?? fallback);
    return v === null || v === undefined ? [] : [name, v];
  });
  // A new sale's buyer counts go to one hash, unless APIs of the previous release still run (purchase.lua).
  const buyCounts = opts.legacyBuyCounts ? [] : ['buyCounts', 'hash'];
  const loaded = await run(redis, 'load_sale', [k.meta, k.available], [r.stock, ...meta, ...buyCounts]);
  return loaded === 1;
}

/** Brings a loaded sale's end forward to `endsAt` (ms): 1 moved, 0 ended at or before it already, -1 not loaded. */
export async function endSaleScript(redis: RedisClient, saleId: string, endsAt: number): Promise<1 | 0 | -1> {
  return (await run(redis, 'end_sale', [saleKeys(saleId).meta], [endsAt])) as 1 | 0 | -1;
}

/**
 * What the API checked for a purchase (shared/challenge.ts): a purchase token (a `pow` sale needs
 * one; it buys once), an admission pass (a `queue` sale needs one; it buys once, before it expires),
 * or, from the draw itself, a winner's unit (a `draw` sale sells to nobody else).
 */
export type PurchaseGate = { kind: 'token'; id: string; expiresAt: number } | { kind: 'pass'; expiresAt: number } | { kind: 'draw' };

export interface PurchaseArgs {
  saleId: string;
  userId: string;
  qty: number;
  orderId: string;
  now: number;
  /** BUY_COUNT_TTL_SECONDS: the buyer's count outlives the sale's end + payment window by this much (no end: it never expires). */
  buyCountTtlSeconds: number;
  gate?: PurchaseGate;
  /** PURCHASE_RATE_PER_BUYER per PURCHASE_RATE_WINDOW_MS, counted per buyer and sale (absent or max 0: no limit). */
  rate?: { max: number; windowMs: number };
}

/** How long past its expiry a spent token's mark is kept: API hosts whose clocks run behind still accept the token that long. */
export const TOKEN_MARK_MARGIN_MS = 10_000;

/** Raw {code, n} from purchase.lua; shared/purchase.ts gives it meaning. */
export async function purchaseScript(redis: RedisClient, a: PurchaseArgs): Promise<[number, number]> {
  const k = saleKeys(a.saleId);
  const g = a.gate;
  // KEYS[9] is the token's mark, the passes, or (read by nobody) a name that keeps the key count fixed.
  const gateKey = g?.kind === 'pass' ? k.passes : k.tokenUsed(g?.kind === 'token' ? g.id : '');
  const gateUntil = g?.kind === 'token' ? g.expiresAt + TOKEN_MARK_MARGIN_MS : g?.kind === 'pass' ? g.expiresAt : 0;
  return (await run(redis, 'purchase', [k.meta, k.available, k.buys(a.userId), k.winners, k.queued, k.seq, k.purchased, k.deadlines, gateKey, k.rate(a.userId), k.buyCounts], [
    a.now, a.qty, a.orderId, a.userId, a.buyCountTtlSeconds, g?.kind ?? '', gateUntil, a.rate?.max ?? 0, a.rate?.windowMs ?? 0,
  ])) as [number, number];
}

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
  // Expiry key names are built in the script from the prefix: half the arguments to send and parse.
  // A pending order's id is sent once: its queued entry goes with it.
  const args: (string | number)[] = [now, k.expiryPrefix, pending.length];
  for (const p of pending) args.push(p.orderId);
  for (const p of pending) args.push(p.expiresAt);
  const pendingIds = new Set(pending.map((p) => p.orderId));
  for (const id of orderIds) if (!pendingIds.has(id)) args.push(id);
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
    const keys = [k.available, k.restored, k.restoredQty, k.meta, k.buyCounts];
    const countAt = new Map<string, number>(); // buyer -> index of their own count key in KEYS (1-based, as Lua)
    const args: (string | number)[] = [saleId, STOCK_CHANNEL];
    for (const o of orders.slice(from, from + RESTORE_CHUNK)) {
      let at = countAt.get(o.userId);
      if (at === undefined) countAt.set(o.userId, (at = keys.push(k.buys(o.userId))));
      args.push(o.orderId, o.qty, o.userId, at);
    }
    calls.push(run(redis, 'restore', keys, args).then((res) => (res as number[]).map((r) => r === 1)));
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

/** Takes back cancel.lua's note of a cancel that was then refused (the buyer's cancel limit): the order is still just queued. */
export async function unmarkCancelling(redis: RedisClient, saleId: string, orderId: string): Promise<void> {
  await redis.hdel(saleKeys(saleId).cancels, orderId);
}

/** settle_sale.lua: marks a settled sale so nothing restores there again, and deletes its per-order keys and its buyer counts hash. */
export async function forgetSettledOrders(redis: RedisClient, saleId: string): Promise<void> {
  const k = saleKeys(saleId);
  await run(redis, 'settle_sale', [k.meta, k.restored, k.restoredQty, k.cancels, k.purchased, k.deadlines, k.writers, k.queue, k.room, k.passes, k.entries, k.buyCounts], []);
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

/**
 * touch_due.lua over the deadlines due at `now`: up to `limit` members per call, `calls` calls at
 * once on disjoint members (read first, so the script can declare their keys). Returns the keys found gone.
 */
export async function touchDue(redis: RedisClient, saleId: string, now: number, limit: number, calls = 1): Promise<number> {
  const k = saleKeys(saleId);
  const due = await redis.zrangebyscore(k.deadlines, '-inf', now, 'LIMIT', 0, limit * calls);
  const runs: Promise<unknown>[] = [];
  for (let from = 0; from < due.length; from += limit) {
    const keys = [k.deadlines, k.purchased];
    const args: string[] = [];
    for (const member of due.slice(from, from + limit)) {
      // An older writer's member is the expiry key name itself.
      const orderId = member.startsWith('{') ? member.slice(k.expiryPrefix.length) : member;
      keys.push(k.expiry(orderId));
      args.push(member, orderId);
    }
    runs.push(run(redis, 'touch_due', keys, args));
  }
  return (await Promise.all(runs)).reduce<number>((sum, gone) => sum + (gone as number), 0);
}

export interface SaleSnapshot {
  available: number;
  seq: number;
  restoredQty: number;
  entries: string[];
}

/** Re-reads of the writers a snapshot allows: each means a writer joined between the read and the script. */
const SNAPSHOT_TRIES = 5;

export async function snapshotSale(redis: RedisClient, saleId: string): Promise<SaleSnapshot> {
  const k = saleKeys(saleId);
  for (let tries = 1; ; tries++) {
    const writers = await redis.zrange(k.writers, '0', '-1');
    const res = (await run(redis, 'snapshot', [k.available, k.seq, k.winners, k.writers, k.restoredQty, ...writers.map((w) => k.processing(w))], writers)) as
      [number, number, number, ...string[]] | null;
    if (res) {
      const [available, seq, restoredQty, ...entries] = res;
      return { available, seq, restoredQty, entries };
    }
    if (tries === SNAPSHOT_TRIES) throw new Error(`sale ${saleId}: its writers changed during each of ${SNAPSHOT_TRIES} snapshots`);
  }
}
