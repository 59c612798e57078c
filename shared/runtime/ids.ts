// Ids and the winner entry: their formats, made and parsed here and nowhere else.
import { createHash, randomBytes } from 'node:crypto';

/** Sale ids: what the admin may choose, and what a key's hash tag may hold. */
export const SALE_ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
export const SALE_ID_RULE = '1-64 characters of A-Z a-z 0-9 _ -';

/**
 * Order ids are `<saleId>.<16 random bytes in base64url>` (22 characters: the last one holds 4 bits,
 * so it is one of A Q g w): the sale is readable from the id, so lookups need no index. The id is
 * stored several times per order in Redis, so it is kept short. Ids minted before were
 * `<saleId>.<uuid>`; those orders live on in Postgres and in flight, so both forms are accepted.
 */
export const ORDER_ID_PATTERN =
  /^([A-Za-z0-9_-]{1,64})\.(?:[A-Za-z0-9_-]{21}[AQgw]|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/;

/** Random bytes drawn 4 KiB at a time, as randomUUID() does: a randomBytes(16) call each cost 2 µs. */
let pool = Buffer.alloc(0);
let used = 0;

export function newOrderId(saleId: string): string {
  if (used + 16 > pool.length) {
    pool = randomBytes(4096);
    used = 0;
  }
  used += 16;
  return `${saleId}.${pool.toString('base64url', used - 16, used)}`;
}

export function saleIdOfOrder(orderId: string): string | null {
  const m = ORDER_ID_PATTERN.exec(orderId);
  return m ? m[1]! : null;
}

/**
 * A winner as purchase.lua writes it: `orderId|seq|qty|purchasedAtMs|userId` (user last: it may
 * hold '|'), the qty followed by `:sku` on a sale of several variants (a sku holds neither ':' nor
 * '|'). Entries without a sku (a one-variant sale's, or made before variants) stay as they were: a
 * sale may be live across the upgrade. Read here only: cancel.lua compares it whole. Order writers
 * must be upgraded before the APIs: an older writer cannot read a sku.
 */
export interface Winner {
  orderId: string;
  seq: number;
  qty: number;
  purchasedAt: number;
  userId: string;
  /** The variant's sku; undefined: the sale's one variant. */
  sku?: string;
}

export function parseWinner(entry: string): Winner {
  const parts = entry.split('|');
  if (parts.length < 5) throw new Error(`malformed winner entry: ${entry}`);
  const units = parts[2]!;
  const colon = units.indexOf(':');
  const winner: Winner = {
    orderId: parts[0]!,
    seq: Number(parts[1]),
    qty: Number(colon < 0 ? units : units.slice(0, colon)),
    purchasedAt: Number(parts[3]),
    userId: parts.slice(4).join('|'),
  };
  if (colon >= 0) winner.sku = units.slice(colon + 1);
  return winner;
}

/**
 * The order a draw gives its entrant of rank `rank`: an order id of the usual form whose random
 * part is the first 16 bytes of sha256('draw-order:' + saleId + ':' + rank). Derived, not drawn, so
 * an award retried after a crash between Redis and Postgres reserves under the same id, which
 * purchase.lua's resend guard turns into a no-op: a rank can never hold two units.
 */
export function drawOrderId(saleId: string, rank: number): string {
  return `${saleId}.${createHash('sha256').update(`draw-order:${saleId}:${rank}`).digest().toString('base64url', 0, 16)}`;
}
