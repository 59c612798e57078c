// Every Redis key name is built here and nowhere else. Per-sale keys share the hash tag
// {sale:<id>} so each script touches one cluster slot.

/** Ids of every sale loaded into Redis; the writer and the listener walk it. */
export const SALES_REGISTRY = 'flashsale:sales';
/** Restores are announced here so API processes can drop a cached sold-out flag at once. */
/** The random key that signs challenges and purchase tokens, shared by every API process. */
export const CHALLENGE_KEY = 'flashsale:challenge-key';

export const STOCK_CHANNEL = 'flashsale:stock';
/** Order transitions (shared/order-events.ts): batches of `{orderId, status, expiresAt?}` for the API's event streams. */
export const ORDERS_CHANNEL = 'flashsale:orders';
export const EXPIRED_PATTERN = '__keyevent@*__:expired';
/** A throwaway key the listener makes expire to see that events arrive where CONFIG is refused. */
export const probeKey = (id: string) => `flashsale:probe:${id}`;
/** One purchase rate limit's counters (the limiter appends the buyer or the address): a key per counter, any slot. */
export const rateLimitPrefix = (limit: 'buyer' | 'ip') => `flashsale:rl:${limit}:`;

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
  return {
    meta: `${p}:meta`,
    available: `${p}:available`,
    seq: `${p}:seq`,
    winners: `${p}:winners`,
    queued: `${p}:queued`,
    /** Order ids ever reserved: a purchase resent after a reconnect finds its id here and changes nothing. */
    purchased: `${p}:purchased`,
    writers: `${p}:writers`,
    deadlines: `${p}:deadlines`,
    restored: `${p}:restored`,
    restoredQty: `${p}:restored-qty`,
    /** Orders whose buyer asked to cancel them while queued (cancel.lua). */
    cancels: `${p}:cancels`,
    processing: (writerId: string) => `${p}:processing:${writerId}`,
    buys: (userId: string) => `${p}:buys:${userId}`,
    expiry: (orderId: string) => `${p}:expiry:${orderId}`,
  };
}

export type SaleKeys = ReturnType<typeof saleKeys>;

const EXPIRY_KEY = /^\{sale:([A-Za-z0-9_-]{1,64})\}:expiry:(.+)$/;

export function parseExpiryKey(key: string): { saleId: string; orderId: string } | null {
  const m = EXPIRY_KEY.exec(key);
  return m ? { saleId: m[1]!, orderId: m[2]! } : null;
}
