// Every Redis key name is built here and nowhere else. Per-sale keys share the hash tag
// {sale:<id>} so each script touches one cluster slot.
//
// Where an order id is kept. From purchase to payment an id is in exactly one of two places, so a
// purchase resent after a reconnect always finds it (purchase.lua looks in both) while a pending
// order costs one entry, not two:
//   purchased  from the purchase (purchase.lua) until the writer gives it a deadline, and again once
//              its expiry key is gone (paid, closed or expired: touch_due.lua, dropExpiry);
//   deadlines  while its expiry key is set (ack.lua).
// Older processes wrote `deadlines` members as whole expiry key names (they start with `{`) and kept
// every id in `purchased`; touch_due.lua and dropExpiry still handle those members.
//
// Upgrading from those versions, in this order: the API first (its purchase.lua looks in both
// places, and it accepts the shorter order ids), then the expiry listeners (their touch_due.lua reads
// order-id members and moves ids back), then the order writers (their ack.lua moves ids out of
// `purchased`). An older listener beside a newer writer would drop ids it cannot read from
// `deadlines`; an older API beside one would not find a pending order's id.

/** Ids of every sale loaded into Redis; the writer and the listener walk it. */
export const SALES_REGISTRY = 'flashsale:sales';
/** The random key that signs challenges and purchase tokens, shared by every API process (each re-reads it every 2 s). */
export const CHALLENGE_KEY = 'flashsale:challenge-key';
/** Restores are announced here so API processes can drop a cached sold-out flag at once. */
export const STOCK_CHANNEL = 'flashsale:stock';
/** Order transitions (shared/orders/events.ts): batches of `{orderId, status, expiresAt?}` for the API's event streams. */
export const ORDERS_CHANNEL = 'flashsale:orders';
/** Each admission tick that changed a waiting room publishes `{saleId, ...}` here for the API's queue streams (shared/http/routes/admission/room-events.ts). */
export const ADMISSION_CHANNEL = 'flashsale:admission';
/** Each draw tick of the admission loop publishes a DrawTick here for the API's entry streams (shared/http/routes/admission/draw-events.ts). */
export const DRAW_CHANNEL = 'flashsale:draw';
/** The admission loop's lease: one loop admits for the whole deployment (shared/admission/loop.ts). */
export const ADMISSION_LEASE = 'flashsale:admission:leader';
export const EXPIRED_PATTERN = '__keyevent@*__:expired';
/** A throwaway key the listener makes expire to see that events arrive where CONFIG is refused. */
export const probeKey = (id: string) => `flashsale:probe:${id}`;
/** One rate limit's counters (the limiter appends the buyer or the address): a key per counter, any slot. */
export const rateLimitPrefix = (limit: 'ip' | 'challenge' | 'exchange') => `flashsale:rl:${limit}:`;

/**
 * A sale's key names, built once per sale: every purchase needs seven of them. Bounded, since a
 * purchase for a sale that does not exist asks too.
 */
const built = new Map<string, ReturnType<typeof buildSaleKeys>>();

export function saleKeys(saleId: string) {
  let keys = built.get(saleId);
  if (keys === undefined) {
    if (built.size >= 4096) built.clear();
    keys = buildSaleKeys(saleId);
    built.set(saleId, keys);
  }
  return keys;
}

function buildSaleKeys(saleId: string) {
  const p = `{sale:${saleId}}`;
  const buysPrefix = `${p}:buys:`;
  const expiryPrefix = `${p}:expiry:`;
  // Scripts never name a key: each wrapper passes every key it touches (test/lua-keys.test.ts).
  return {
    /** Every key of the sale starts with it: `{sale:<id>}`, the hash tag that keeps them in one slot. */
    prefix: p,
    meta: `${p}:meta`,
    available: `${p}:available`,
    seq: `${p}:seq`,
    winners: `${p}:winners`,
    queued: `${p}:queued`,
    /** Order ids reserved and not pending with a deadline (see above): queued, paid or closed. */
    purchased: `${p}:purchased`,
    writers: `${p}:writers`,
    /** Pending orders by deadline (zset orderId -> deadline ms), for the listener's nudger. */
    deadlines: `${p}:deadlines`,
    restored: `${p}:restored`,
    restoredQty: `${p}:restored-qty`,
    /** A solved challenge, by its signature, once exchanged for a purchase token: until the challenge expires. */
    challengeUsed: (signature: string) => `${p}:challenge-used:${signature}`,
    /** A purchase token, by its id, once it bought (purchase.lua): until the token expires. */
    tokenUsed: (tokenId: string) => `${p}:token-used:${tokenId}`,
    /** A waiting room (admission 'queue'): zset buyer -> place (pre-queue in [0, 1), then 1 + arrival). */
    queue: `${p}:queue`,
    /** The room's state (hash: phase, admitted, expired, tokens, tickAt, tail); see admit.lua. */
    room: `${p}:room`,
    /** Admission passes handed out: zset buyer -> expiry ms, 0 once it bought (purchase.lua). */
    passes: `${p}:passes`,
    /** A draw's entrants (set of buyers): a copy for counting; the draw itself reads Postgres only. */
    entries: `${p}:entries`,
    /** An admission mode's list of the sale's buyers (a set), which purchase.lua's gate 'member' looks the buyer up in: an invitation list. */
    modeList: (mode: string) => `${p}:mode:${mode}:list`,
    /** Orders whose buyer asked to cancel them while queued (cancel.lua). */
    cancels: `${p}:cancels`,
    processing: (writerId: string) => `${p}:processing:${writerId}`,
    /** The sale's buyer counts (hash buyer -> count), one TTL for all; a sale loaded with `buyCounts` = hash in its meta writes here. */
    buyCounts: `${p}:buys`,
    /** A sale of more than one variant: units left of each (hash sku -> units, a field per variant, 0 kept); `available` is their sum. */
    variantsLeft: `${p}:variants-left`,
    /** Operators' stock changes applied by adjust_stock.lua whose Postgres commit is not known yet (hash change id -> {sku, units, by}): shared/sales/stock-repair.ts. */
    stockChanges: `${p}:stock-changes`,
    /** Units of each variant given back by restore.lua (hash sku -> units): the per-variant `restoredQty`. */
    restoredByVariant: `${p}:restored-by-variant`,
    /** A sale with perVariantLimit: each buyer's count of each variant (hash `<sku>:<buyer>` -> count; a sku holds no ':'), with the buy counts' TTL. */
    variantBuys: `${p}:variant-buys`,
    /** Each buyer's orders of the sale expired unpaid (hash buyer -> count; restore.lua): MAX_UNPAID_PER_SALE bounds it (purchase.lua). */
    unpaid: `${p}:unpaid`,
    /** Older format: buyer U's count in a key of its own, this prefix followed by U (settle finds them by it). Still read and given back. */
    buysPrefix,
    buys: (userId: string) => buysPrefix + userId,
    /** Buyer U's purchases of this sale in the current rate-limit window (purchase.lua): gone when the window ends. */
    rate: (userId: string) => `${p}:rl:${userId}`,
    /** The expiry key of order O is this prefix followed by O (settle finds them by it). */
    expiryPrefix,
    expiry: (orderId: string) => expiryPrefix + orderId,
    /** A SCAN pattern matching every key of the sale (a sale id holds no glob character). */
    everyKey: `${p}:*`,
  };
}

export type SaleKeys = ReturnType<typeof saleKeys>;

const EXPIRY_KEY = /^\{sale:([A-Za-z0-9_-]{1,64})\}:expiry:(.+)$/;

export function parseExpiryKey(key: string): { saleId: string; orderId: string } | null {
  const m = EXPIRY_KEY.exec(key);
  return m ? { saleId: m[1]!, orderId: m[2]! } : null;
}
