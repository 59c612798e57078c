// Every Redis key name is built here and nowhere else. Per-sale keys share the hash tag
// {sale:<id>} so each script touches one cluster slot.

export const SALE_ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
/** Order ids are `<saleId>.<uuid>`: the sale is readable from the id, so lookups need no index. */
export const ORDER_ID_PATTERN = /^([A-Za-z0-9_-]{1,64})\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Ids of every sale loaded into Redis; the writer and the listener walk it. */
export const SALES_REGISTRY = 'flashsale:sales';
/** Restores are announced here so API processes can drop a cached sold-out flag at once. */
export const STOCK_CHANNEL = 'flashsale:stock';
export const EXPIRED_PATTERN = '__keyevent@*__:expired';
/** A throwaway key the listener makes expire to see that events arrive where CONFIG is refused. */
export const probeKey = (id: string) => `flashsale:probe:${id}`;

export function saleKeys(saleId: string) {
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

export function saleIdOfOrder(orderId: string): string | null {
  const m = ORDER_ID_PATTERN.exec(orderId);
  return m ? m[1]! : null;
}

/** A winner as the purchase script writes it: `orderId|seq|qty|purchasedAtMs|userId` (user last: it may hold '|'). */
export interface Winner {
  orderId: string;
  seq: number;
  qty: number;
  purchasedAt: number;
  userId: string;
}

export function parseWinner(entry: string): Winner {
  const parts = entry.split('|');
  if (parts.length < 5) throw new Error(`malformed winner entry: ${entry}`);
  return {
    orderId: parts[0]!,
    seq: Number(parts[1]),
    qty: Number(parts[2]),
    purchasedAt: Number(parts[3]),
    userId: parts.slice(4).join('|'),
  };
}
