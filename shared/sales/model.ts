// A sale as the code holds it (Sale), and the choices its choice fields take. Apart from its
// definition (definition.ts), whose field descriptions (field.ts) are typed by it.

export const CHALLENGES = ['none', 'pow'] as const;
export const BUYERS = ['anyone', 'verified-email'] as const;

export interface Sale {
  id: string;
  name: string;
  stock: number;
  /** What one unit costs, in the currency's minor unit; null only for sales made before prices (they take any amount). */
  price: number | null;
  /** ISO 4217, three upper-case letters; null with price. */
  currency: string | null;
  perUserLimit: number;
  /** The most one buyer may hold of any one variant; null: only perUserLimit, across the sale. */
  perVariantLimit: number | null;
  maxPerOrder: number;
  startsAt: Date;
  endsAt: Date | null;
  paymentWindowSeconds: number;
  /** 'pow': a purchase needs a token earned by solving a proof-of-work challenge (shared/purchase/challenge.ts). */
  challenge: Challenge;
  /** About how many hashes a challenge of this sale takes to solve. */
  challengeComplexity: number;
  /** 'verified-email': only buyers whose token says `email_verified: true` (shared/purchase/rules/verified-email.ts). */
  buyers: Buyers;
  /** Who may buy: the fastest purchase ('first-come'), holders of a waiting room's pass ('queue'), or a draw's winners ('draw'). */
  admission: Admission;
  /** 'queue' only (null otherwise): passes handed out per second, the no-show allowance over the units left, and how long a pass lasts. */
  admitRatePerSecond: number | null;
  admitOverbook: number | null;
  passSeconds: number | null;
  /** 'draw' only (null otherwise): when entries open and close, and until when units that come back go to the next entrants. */
  entriesOpenAt: Date | null;
  entriesCloseAt: Date | null;
  backfillUntil: Date | null;
  /** 'queue' and 'draw': 64 hex digits that order the pre-queue or the draw, and their sha256 (published from the start). */
  seed: string | null;
  seedSha256: string | null;
  /** 'draw' only: when Postgres made the draw (null before, and for other sales): the seed is public from then on. */
  drawnAt: Date | null;
  /** What the sale sells, 1 to MAX_VARIANTS, in the order shown; their stock adds up to `stock` (shared/sales/variants.ts). */
  variants: Variant[];
}

/** One variant of a sale (a size, a colour): the unit of stock. */
export interface Variant {
  /** [A-Za-z0-9_-]{1,64}, unique in its sale; a sale made without variants has one, `default`. */
  sku: string;
  label: string;
  stock: number;
  /** Overrides the sale's price (minor units); null: the sale's. */
  priceCents: number | null;
}

/** The fields of the definition table (definition.ts); a sale's variants are their own table. */
export type SaleField = Exclude<keyof Sale, 'variants'>;
/** 'first-come' or the name of a registered admission mode (shared/admission/mode.ts). */
export type Admission = string;
export type Challenge = (typeof CHALLENGES)[number];
export type Buyers = (typeof BUYERS)[number];

/** A sale's rules as Redis holds them (its meta): times in ms. */
export type SaleRules = { stock: number } & {
  [K in SaleField]?: Sale[K] extends Date | null ? number | null : Sale[K];
};

/** What a purchase brings to pass its sale's gate (purchase.lua). */
export type PurchaseGate =
  | { kind: 'token'; id: string; expiresAt: number }
  | { kind: 'pass'; expiresAt: number }
  | { kind: 'draw' }
  | { kind: 'member'; mode: string };
