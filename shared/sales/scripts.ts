// The wrappers of a sale's own scripts: loading it, ending it early, and a purchase. Each builds
// its keys and arguments in the order its script's header documents; callers never do.
import { saleKeys, STOCK_CHANNEL } from '../redis/keys.js';
import type { RedisClient } from '../redis/connect.js';
import { SALE_DEFINITION, type SaleField } from './definition.js';
import { run } from '../redis/scripts.js';
import { FIRST_COME, modeOf } from '../admission/mode.js';

/** A sale's rules as load_sale.lua keeps them: times in ms; a rule left out takes its default. */
import type { PurchaseGate, SaleRules, Variant } from './model.js';
import { DEFAULT_SKU } from './variants.js';
export type { PurchaseGate, SaleRules };

const META = (Object.keys(SALE_DEFINITION) as SaleField[]).flatMap((key) => {
  const { redis, schema, kind } = SALE_DEFINITION[key];
  return redis
    ? [
        {
          key,
          ...redis,
          fallback: schema.default as string | number | undefined,
          text: kind === 'text' || kind === 'choice',
        },
      ]
    : [];
});

/** How a sale is loaded beyond its rules. */
export interface LoadOptions {
  /** LEGACY_BUY_COUNTS: the sale keeps each buyer's count in a key of its own, which APIs of the previous release read (see purchase.lua). */
  legacyBuyCounts?: boolean;
  /** The sale is paused (sales.paused_at): a reload keeps it so. */
  paused?: boolean;
}

export async function loadSale(
  redis: RedisClient,
  saleId: string,
  r: SaleRules,
  variants: Variant[] = [],
  opts: LoadOptions = {},
): Promise<boolean> {
  const k = saleKeys(saleId);
  const meta = META.flatMap(({ key, name, none, when, fallback }) => {
    const v = when && !when(r) ? null : (r[key] ?? none ?? fallback);
    return v === null || v === undefined ? [] : [name, v];
  });
  // A new sale's buyer counts go to one hash, unless APIs of the previous release still run (purchase.lua).
  const buyCounts = opts.legacyBuyCounts ? [] : ['buyCounts', 'hash'];
  // One variant: `available` is its stock, and no hash is kept (a purchase costs what it did before variants).
  const many = variants.length > 1;
  const left = many ? variants.flatMap((v) => [v.sku, v.stock]) : [];
  const which = many ? ['variants', variants.length] : ['sku', variants[0]?.sku ?? DEFAULT_SKU];
  const loaded = await run(
    redis,
    'load_sale',
    [k.meta, k.available, k.variantsLeft],
    [
      r.stock,
      left.length / 2,
      ...left,
      ...meta,
      ...buyCounts,
      'gate',
      requiredGate(r),
      ...which,
      ...(opts.paused ? ['paused', 1] : []),
    ],
  );
  return loaded === 1;
}

/**
 * The one gate purchase.lua requires of the sale's purchases: its admission mode's, else a 'pow'
 * sale's purchase token, else none. A mode this process has not registered is refused rather than loaded
 * without its gate (it would sell to anyone).
 */
function requiredGate(r: SaleRules): string {
  const admission = r.admission ?? FIRST_COME;
  const mode = modeOf(admission);
  if (!mode && admission !== FIRST_COME)
    throw new Error(`admission mode ${admission} is not registered in this process: import shared/admission/modes.ts`);
  return mode ? (mode.gate ?? 'none') : r.challenge === 'pow' ? 'token' : 'none';
}

/**
 * A loaded sale's rules as its meta holds them (undefined: not loaded); a rule left out of the
 * meta (a default, or one a sale made by an older release lacks) is absent here. `none` reads as null.
 */
export async function readSaleRules(redis: RedisClient, saleId: string): Promise<SaleRules | undefined> {
  const meta = await redis.hgetall(saleKeys(saleId).meta);
  if (meta.stock === undefined) return undefined;
  const rules: Record<string, unknown> = {};
  for (const { key, name, none, text } of META) {
    const v = meta[name];
    if (v !== undefined) rules[key] = v === none ? null : text ? v : Number(v);
  }
  return rules as SaleRules;
}

/** Brings a loaded sale's end forward to `endsAt` (ms): 1 moved, 0 ended at or before it already, -1 not loaded. */
export async function endSaleScript(redis: RedisClient, saleId: string, endsAt: number): Promise<1 | 0 | -1> {
  return (await run(redis, 'end_sale', [saleKeys(saleId).meta], [endsAt])) as 1 | 0 | -1;
}

/** pause_sale.lua: sets (or with `paused` false, clears) the sale's pause flag: 1 changed, 0 so already, -1 not loaded. */
export async function pauseScript(redis: RedisClient, saleId: string, paused: boolean): Promise<1 | 0 | -1> {
  return (await run(redis, 'pause_sale', [saleKeys(saleId).meta], [paused ? 1 : 0])) as 1 | 0 | -1;
}

/** set_end.lua: moves a live sale's end to `endsAt` (ms), judged by Redis's TIME; {code, Redis's now}. */
export async function setEndScript(
  redis: RedisClient,
  saleId: string,
  endsAt: number,
): Promise<[1 | -1 | -2 | -3, number]> {
  return (await run(redis, 'set_end', [saleKeys(saleId).meta], [endsAt])) as [1 | -1 | -2 | -3, number];
}

/** An operator's stock change, as adjust_stock.lua records it until its Postgres commit is known. */
export interface StockChangeRecord {
  sku: string;
  units: number;
  by: string;
}

/** adjust_stock.lua: adds (units > 0) or removes (units < 0) units of one variant, recorded under `changeId`; {code, the variant's units left}. */
export async function adjustStockScript(
  redis: RedisClient,
  saleId: string,
  sku: string,
  units: number,
  change: { id: string; by: string },
): Promise<[1 | -1 | -3 | -7 | -18, number]> {
  const k = saleKeys(saleId);
  const record: StockChangeRecord = { sku, units, by: change.by };
  return (await run(
    redis,
    'adjust_stock',
    [k.meta, k.available, k.variantsLeft, k.stockChanges],
    [sku, units, saleId, STOCK_CHANNEL, change.id, JSON.stringify(record)],
  )) as [1 | -1 | -3 | -7 | -18, number];
}

/** exchange.lua: spends a solved challenge (by its signature) if the sale's window and the challenge's expiry allow, by Redis's clock; {code, Redis's now}. */
export async function exchangeScript(
  redis: RedisClient,
  saleId: string,
  signature: string,
  expiresAt: number,
): Promise<[number, number]> {
  const k = saleKeys(saleId);
  return (await run(redis, 'exchange', [k.meta, k.challengeUsed(signature)], [expiresAt, TOKEN_MARK_MARGIN_MS])) as [
    number,
    number,
  ];
}

/** spend_token.lua: spends a purchase token that enters a draw, unless spent or expired by Redis's clock (1 spent, -9 spent already, -14 expired). */
export async function spendTokenScript(
  redis: RedisClient,
  saleId: string,
  tokenId: string,
  expiresAt: number,
): Promise<1 | -9 | -14> {
  return (await run(
    redis,
    'spend_token',
    [saleKeys(saleId).tokenUsed(tokenId)],
    [expiresAt, TOKEN_MARK_MARGIN_MS, 'entry'],
  )) as 1 | -9 | -14;
}

/**
 * What the API checked for a purchase (shared/purchase/challenge.ts): a purchase token (a `pow` sale needs
 * one; it buys once), an admission pass (a `queue` sale needs one; it buys once, before it expires),
 * from the draw itself a winner's unit (a `draw` sale sells to nobody else), or a mode's list that
 * purchase.lua finds the buyer in (saleKeys(id).modeList(mode)). The sale's meta names the one it needs (`gate`).
 */

export interface PurchaseArgs {
  saleId: string;
  userId: string;
  qty: number;
  orderId: string;
  /** BUY_COUNT_TTL_SECONDS: the buyer's count outlives the sale's end + payment window by this much (no end: it never expires). */
  buyCountTtlSeconds: number;
  gate?: PurchaseGate;
  /** PURCHASE_RATE_PER_BUYER per PURCHASE_RATE_WINDOW_MS, counted per buyer and sale (absent or max 0: no limit). */
  rate?: { max: number; windowMs: number };
  /** MAX_UNPAID_PER_SALE: orders the buyer may let expire unpaid in this sale before it is refused (absent or 0: no bound). */
  maxUnpaid?: number;
  /** The sku of the variant bought (absent: none named, which only a sale of one variant takes). */
  variant?: string;
}

/** How long past its expiry a spent token's mark is kept: a failover to a master whose clock runs behind still finds it. */
export const TOKEN_MARK_MARGIN_MS = 10_000;

/** Raw {code, n, skus...} from purchase.lua; shared/purchase/purchaser.ts gives it meaning. */
export async function purchaseScript(redis: RedisClient, a: PurchaseArgs): Promise<[number, number, ...string[]]> {
  const k = saleKeys(a.saleId);
  const g = a.gate;
  // Fourteen keys every call: the gate's key is the token's mark, the mode's list, or else the passes, read only with a pass.
  const keys = [
    k.meta,
    k.available,
    k.buys(a.userId),
    k.buyCounts,
    k.winners,
    k.queued,
    k.seq,
    k.purchased,
    k.deadlines,
    k.rate(a.userId),
    g?.kind === 'token' ? k.tokenUsed(g.id) : g?.kind === 'member' ? k.modeList(g.mode) : k.passes,
    k.unpaid,
    k.variantsLeft,
    k.variantBuys,
  ];
  // No clock is sent: the script judges every time by the master's TIME.
  return (await run(redis, 'purchase', keys, [
    a.qty,
    a.orderId,
    a.userId,
    a.buyCountTtlSeconds,
    g?.kind ?? '',
    g?.kind === 'token' || g?.kind === 'pass' ? g.expiresAt : 0,
    a.rate?.max ?? 0,
    a.rate?.windowMs ?? 0,
    TOKEN_MARK_MARGIN_MS,
    a.maxUnpaid ?? 0,
    a.variant ?? '',
  ])) as [number, number, ...string[]];
}
