// Sales: validated input, creation in Postgres plus loading into Redis, and the public view.
import { createHash, randomBytes } from 'node:crypto';
import type { RedisClient } from './redis/connect.js';
import type { Pool } from './db.js';
import { withTransaction } from './db.js';
import { HttpError } from './errors.js';
import { SALES_REGISTRY, saleKeys } from './keys.js';
import { SALE_ID_PATTERN, SALE_ID_RULE } from './ids.js';
import { loadSale, type SaleRules } from './redis/sale-scripts.js';

export interface Sale extends Omit<SaleRules, 'startsAt' | 'endsAt' | 'challenge' | 'admission' | 'seed'> {
  id: string;
  name: string;
  startsAt: Date;
  endsAt: Date | null;
  /** 'pow': a purchase needs a token earned by solving a proof-of-work challenge (shared/challenge.ts). */
  challenge: Challenge;
  /** About how many hashes a challenge of this sale takes to solve. */
  challengeComplexity: number;
  /** What one unit costs, in the currency's minor unit; null only for sales made before prices (they take any amount). */
  price: number | null;
  /** ISO 4217, three upper-case letters; null with price. */
  currency: string | null;
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
}

export const ADMISSIONS = ['first-come', 'queue', 'draw'] as const;
export type Admission = (typeof ADMISSIONS)[number];
/** A queue's defaults: about a pass a second per unit of a 50-unit-a-second sale, 20% no-shows, two minutes to buy. */
export const QUEUE_DEFAULTS = { admitRatePerSecond: 50, admitOverbook: 1.2, passSeconds: 120 };
/** A draw's backfill runs this long after entries close unless backfillUntil says otherwise. */
export const DEFAULT_BACKFILL_MS = 3_600_000;

export const CHALLENGES = ['none', 'pow'] as const;
export type Challenge = NonNullable<SaleRules['challenge']>;

export type SaleState = 'upcoming' | 'open' | 'sold_out' | 'ended';

/**
 * The most one order may take: the bound of every sale's maxPerOrder and of qty at the API, so
 * purchase.lua, which refuses qty above the sale's maxPerOrder, never needs a bound of its own.
 */
export const MAX_PER_ORDER = 1000;

/** The bounds of a sale definition's numbers (the OpenAPI document shows the same). */
export const LIMITS = {
  stock: 10_000_000, perUserLimit: 1000, maxPerOrder: MAX_PER_ORDER, paymentWindowSeconds: 86_400, challengeComplexity: 10_000_000, price: 1_000_000_000_000,
  admitRatePerSecond: 100_000, passSeconds: 3600,
};
/** admitOverbook's bounds: 1 admits no more buyers than units left; 10 is far past any real no-show rate. */
export const OVERBOOK_LIMITS = { min: 1, max: 10 };

/** Solved in about 80 ms by Node on this 2-core machine (BENCHMARKS.md section 8); a slow phone takes several times that. */
export const DEFAULT_COMPLEXITY = 50_000;

function invalid(message: string): never {
  throw new HttpError('invalid_sale', message);
}

function intField(body: Record<string, unknown>, key: keyof typeof LIMITS, fallback: number | undefined, min: number): number {
  const v = body[key] ?? fallback;
  if (v === undefined) invalid(`${key} is required`);
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > LIMITS[key]) {
    invalid(`${key} must be an integer from ${min} to ${LIMITS[key]}`);
  }
  return v;
}

// Years a sale may start or end in. Redis keeps "no end" as endsAt 0, so a real end must lie well
// after 1970, and a typo such as 0026 must be refused rather than read as the year 26.
const YEARS = { min: 2000, max: 9999 };

type TimeKey = 'startsAt' | 'endsAt' | 'entriesOpenAt' | 'entriesCloseAt' | 'backfillUntil';

function timeField(body: Record<string, unknown>, key: TimeKey): Date | null {
  const v = body[key];
  if (v === undefined || v === null) return null;
  const message = `${key} must be an ISO 8601 date-time, e.g. 2026-12-01T10:00:00Z`;
  const m = typeof v === 'string' ? /^(\d{4})-(\d\d)-(\d\d)T/.exec(v) : null;
  if (!m) invalid(message);
  // Without a zone, Date reads the time in the server's own zone: the same input would mean
  // different instants on different hosts.
  if (!/(?:Z|[+-]\d\d:\d\d)$/i.test(m.input)) {
    invalid(`${key} must end with Z or an offset such as +02:00, e.g. 2026-12-01T10:00:00Z`);
  }
  const d = new Date(m.input);
  if (Number.isNaN(d.getTime())) invalid(message);
  // Date rolls a day the month lacks (2026-02-30) over into the next month; refuse it instead.
  const [year, month, date] = [Number(m[1]), Number(m[2]) - 1, Number(m[3])];
  const day = new Date(0);
  day.setUTCFullYear(year, month, date);
  if (day.getUTCMonth() !== month || day.getUTCDate() !== date) invalid(message);
  const utcYear = d.getUTCFullYear();
  if (utcYear < YEARS.min || utcYear > YEARS.max) {
    invalid(`${key} must fall in the years ${YEARS.min} to ${YEARS.max} (UTC), e.g. 2026-12-01T10:00:00Z`);
  }
  return d;
}

/** The fields a sale definition may have (the HTTP route's schema lists the same). */
export const SALE_FIELDS = [
  'id', 'name', 'stock', 'price', 'currency', 'perUserLimit', 'maxPerOrder', 'startsAt', 'endsAt', 'paymentWindowSeconds', 'challenge', 'challengeComplexity',
  'admission', 'admitRatePerSecond', 'admitOverbook', 'passSeconds', 'entriesOpenAt', 'entriesCloseAt', 'backfillUntil',
] as const;
const QUEUE_FIELDS = ['admitRatePerSecond', 'admitOverbook', 'passSeconds'] as const;
const DRAW_FIELDS = ['entriesOpenAt', 'entriesCloseAt', 'backfillUntil'] as const;

/** ISO 4217 alphabetic codes as payments carry them: compared exactly, so upper case only. */
export const CURRENCY_PATTERN = /^[A-Z]{3}$/;

// Control characters (C0, DEL, C1) and the bidirectional overrides and isolates: a name shown on
// the buyer's page, the admin's list and a terminal must not reorder or hide the text around it.
// NUL is among them (Postgres text cannot hold it), and an unpaired surrogate would be stored as U+FFFD.
export const UNSHOWABLE = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069\p{Cs}]/u;
const FIELDS = new Set<string>(SALE_FIELDS);

/** Checks a sale definition as POST /api/sales and `sale create` take it. */
export function parseSaleInput(body: unknown, now = new Date()): Sale {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) invalid('the body must be a JSON object');
  const b = body as Record<string, unknown>;
  const unknown = Object.keys(b).filter((k) => !FIELDS.has(k));
  if (unknown.length > 0) invalid(`unknown field(s): ${unknown.join(', ')}`);
  const id = b.id ?? `s-${randomBytes(5).toString('hex')}`;
  if (typeof id !== 'string' || !SALE_ID_PATTERN.test(id)) invalid(`id must be ${SALE_ID_RULE}`);
  if (typeof b.name !== 'string' || b.name.trim() === '' || b.name.length > 200) invalid('name must be a non-empty string of at most 200 characters');
  if (UNSHOWABLE.test(b.name)) {
    invalid('name must not contain control characters (U+0000-U+001F, U+007F-U+009F), bidirectional overrides or isolates (U+202A-U+202E, U+2066-U+2069) or unpaired surrogates');
  }
  const startsAt = timeField(b, 'startsAt') ?? now;
  const endsAt = timeField(b, 'endsAt');
  if (endsAt && endsAt <= startsAt) invalid('endsAt must be after startsAt');
  const stock = intField(b, 'stock', undefined, 1);
  const perUserLimit = intField(b, 'perUserLimit', 1, 1);
  const maxPerOrder = intField(b, 'maxPerOrder', 1, 1);
  // An order above the per-user limit could never be bought: every buyer would be refused it.
  if (maxPerOrder > perUserLimit) {
    invalid(`maxPerOrder (${maxPerOrder}) must not be above perUserLimit (${perUserLimit}): raise perUserLimit or lower maxPerOrder`);
  }
  const price = intField(b, 'price', undefined, 1);
  if (typeof b.currency !== 'string' || !CURRENCY_PATTERN.test(b.currency)) invalid('currency is required: an ISO 4217 code of three upper-case letters, e.g. EUR');
  const challenge = b.challenge ?? 'none';
  if (!CHALLENGES.includes(challenge as Challenge)) invalid(`challenge must be one of ${CHALLENGES.join(', ')}`);
  const admission = parseAdmission(b, startsAt, endsAt);
  return {
    ...admission,
    id,
    name: b.name,
    stock,
    price,
    currency: b.currency,
    perUserLimit,
    maxPerOrder,
    paymentWindowSeconds: intField(b, 'paymentWindowSeconds', 300, 1),
    startsAt,
    endsAt,
    challenge: challenge as Challenge,
    challengeComplexity: intField(b, 'challengeComplexity', DEFAULT_COMPLEXITY, 1000),
  };
}

type AdmissionFields = Pick<Sale, 'admission' | 'admitRatePerSecond' | 'admitOverbook' | 'passSeconds' | 'entriesOpenAt' | 'entriesCloseAt' | 'backfillUntil' | 'seed' | 'seedSha256'>;

/** The admission mode and its settings; a setting of another mode is refused rather than ignored. */
function parseAdmission(b: Record<string, unknown>, startsAt: Date, endsAt: Date | null): AdmissionFields {
  const admission = (b.admission ?? 'first-come') as Admission;
  if (!ADMISSIONS.includes(admission)) invalid(`admission must be one of ${ADMISSIONS.join(', ')}`);
  const stray = [...(admission === 'queue' ? [] : QUEUE_FIELDS), ...(admission === 'draw' ? [] : DRAW_FIELDS)].filter((k) => b[k] !== undefined);
  if (stray.length > 0) invalid(`${stray.join(', ')} apply only to admission ${stray.some((k) => (QUEUE_FIELDS as readonly string[]).includes(k)) ? 'queue' : 'draw'}`);
  const none = { admitRatePerSecond: null, admitOverbook: null, passSeconds: null, entriesOpenAt: null, entriesCloseAt: null, backfillUntil: null };
  if (admission === 'first-come') return { admission, ...none, seed: null, seedSha256: null };
  const seed = randomBytes(32).toString('hex');
  const seeded = { seed, seedSha256: createHash('sha256').update(seed).digest('hex') };
  if (admission === 'queue') {
    const overbook = b.admitOverbook ?? QUEUE_DEFAULTS.admitOverbook;
    if (typeof overbook !== 'number' || !Number.isFinite(overbook) || overbook < OVERBOOK_LIMITS.min || overbook > OVERBOOK_LIMITS.max) {
      invalid(`admitOverbook must be a number from ${OVERBOOK_LIMITS.min} to ${OVERBOOK_LIMITS.max} (1.2 admits 20% more buyers than units left, for no-shows)`);
    }
    return {
      admission, ...none, ...seeded, admitOverbook: overbook,
      admitRatePerSecond: intField(b, 'admitRatePerSecond', QUEUE_DEFAULTS.admitRatePerSecond, 1),
      passSeconds: intField(b, 'passSeconds', QUEUE_DEFAULTS.passSeconds, 10),
    };
  }
  const entriesOpenAt = timeField(b, 'entriesOpenAt') ?? startsAt;
  const entriesCloseAt = timeField(b, 'entriesCloseAt');
  if (!entriesCloseAt) invalid('entriesCloseAt is required for admission draw: when entries close and the draw is made');
  if (entriesCloseAt <= entriesOpenAt) invalid('entriesCloseAt must be after entriesOpenAt');
  if (entriesCloseAt < startsAt) invalid('entriesCloseAt must not be before startsAt: the draw makes its orders when entries close');
  const backfillUntil = timeField(b, 'backfillUntil') ?? new Date(Math.min(entriesCloseAt.getTime() + DEFAULT_BACKFILL_MS, endsAt?.getTime() ?? Infinity));
  if (backfillUntil < entriesCloseAt) invalid('backfillUntil must not be before entriesCloseAt');
  if (endsAt && (entriesCloseAt >= endsAt || backfillUntil > endsAt)) invalid('entriesCloseAt must be before endsAt, and backfillUntil not after it');
  return { admission, ...none, ...seeded, entriesOpenAt, entriesCloseAt, backfillUntil };
}

export function rulesOf(sale: Sale): SaleRules {
  // A draw's seed stays in Postgres, the record of the draw; a queue's orders its pre-queue in Redis.
  return { ...sale, startsAt: sale.startsAt.getTime(), endsAt: sale.endsAt?.getTime() ?? null, seed: sale.admission === 'queue' ? sale.seed : null };
}

/** Puts a sale into Redis (idempotent: a loaded sale keeps its stock) and into the registry. */
export async function loadSaleIntoRedis(redis: RedisClient, sale: Sale): Promise<boolean> {
  const loaded = await loadSale(redis, sale.id, rulesOf(sale));
  await redis.sadd(SALES_REGISTRY, sale.id);
  return loaded;
}

/** Creates the sale in Postgres and loads it into Redis; Redis failing rolls the row back. */
export async function createSale(pool: Pool, redis: RedisClient, sale: Sale): Promise<void> {
  await withTransaction(pool, async (client) => {
    const res = await client.query(
      `insert into sales (id, name, stock, per_user_limit, max_per_order, starts_at, ends_at, payment_window_seconds, challenge, challenge_complexity, price, currency,
         admission, admit_rate_per_second, admit_overbook, pass_seconds, entries_open_at, entries_close_at, backfill_until, seed, seed_sha256)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21) on conflict (id) do nothing`,
      [sale.id, sale.name, sale.stock, sale.perUserLimit, sale.maxPerOrder, sale.startsAt, sale.endsAt, sale.paymentWindowSeconds, sale.challenge, sale.challengeComplexity, sale.price, sale.currency,
        sale.admission, sale.admitRatePerSecond, sale.admitOverbook, sale.passSeconds, sale.entriesOpenAt, sale.entriesCloseAt, sale.backfillUntil, sale.seed, sale.seedSha256],
    );
    if (res.rowCount === 0) throw new HttpError('sale_exists', `A sale with id "${sale.id}" already exists.`);
    await loadSaleIntoRedis(redis, sale);
  });
}

/** A row of `sales` as `select *` returns it. */
export interface SaleRow {
  id: string; name: string; stock: number; per_user_limit: number; max_per_order: number;
  starts_at: Date; ends_at: Date | null; payment_window_seconds: number; challenge: Challenge; challenge_complexity: number;
  price: number | null; currency: string | null;
  admission: Admission; admit_rate_per_second: number | null; admit_overbook: number | null; pass_seconds: number | null;
  entries_open_at: Date | null; entries_close_at: Date | null; backfill_until: Date | null; seed: string | null; seed_sha256: string | null;
}

export function fromRow(r: SaleRow): Sale {
  return {
    id: r.id, name: r.name, stock: r.stock, perUserLimit: r.per_user_limit, maxPerOrder: r.max_per_order,
    startsAt: r.starts_at, endsAt: r.ends_at, paymentWindowSeconds: r.payment_window_seconds,
    challenge: r.challenge, challengeComplexity: r.challenge_complexity, price: r.price, currency: r.currency,
    admission: r.admission, admitRatePerSecond: r.admit_rate_per_second, admitOverbook: r.admit_overbook, passSeconds: r.pass_seconds,
    entriesOpenAt: r.entries_open_at, entriesCloseAt: r.entries_close_at, backfillUntil: r.backfill_until, seed: r.seed, seedSha256: r.seed_sha256,
  };
}

export async function getSale(pool: Pool, id: string): Promise<Sale | null> {
  const res = await pool.query<SaleRow>('select * from sales where id = $1', [id]);
  return res.rows[0] ? fromRow(res.rows[0]) : null;
}

export async function listSales(pool: Pool): Promise<Sale[]> {
  const res = await pool.query<SaleRow>('select * from sales order by starts_at');
  return res.rows.map(fromRow);
}

export function saleState(sale: Sale, available: number, now: number): SaleState {
  if (now < sale.startsAt.getTime()) return 'upcoming';
  if (sale.endsAt && now >= sale.endsAt.getTime()) return 'ended';
  return available > 0 ? 'open' : 'sold_out';
}

export interface SaleView {
  id: string; name: string; stock: number; available: number; perUserLimit: number; maxPerOrder: number;
  paymentWindowSeconds: number; startsAt: string; endsAt: string | null; state: SaleState;
  challenge: Challenge; challengeComplexity: number; price: number | null; currency: string | null;
  admission: Admission; admitRatePerSecond: number | null; admitOverbook: number | null; passSeconds: number | null;
  entriesOpenAt: string | null; entriesCloseAt: string | null; backfillUntil: string | null;
  /** sha256 of the seed, from the start; the seed itself once a draw's entries have closed (null before, and for a queue). */
  seedSha256: string | null; seed: string | null;
}

export async function saleView(redis: RedisClient, sale: Sale, now = Date.now()): Promise<SaleView> {
  const available = Number((await redis.get(saleKeys(sale.id).available)) ?? 0);
  return {
    id: sale.id, name: sale.name, stock: sale.stock, available, perUserLimit: sale.perUserLimit,
    maxPerOrder: sale.maxPerOrder, paymentWindowSeconds: sale.paymentWindowSeconds,
    startsAt: sale.startsAt.toISOString(), endsAt: sale.endsAt?.toISOString() ?? null,
    state: saleState(sale, available, now), challenge: sale.challenge, challengeComplexity: sale.challengeComplexity,
    price: sale.price, currency: sale.currency,
    admission: sale.admission, admitRatePerSecond: sale.admitRatePerSecond, admitOverbook: sale.admitOverbook, passSeconds: sale.passSeconds,
    entriesOpenAt: iso(sale.entriesOpenAt), entriesCloseAt: iso(sale.entriesCloseAt), backfillUntil: iso(sale.backfillUntil),
    seedSha256: sale.seedSha256, seed: seedRevealed(sale, now) ? sale.seed : null,
  };
}

const iso = (d: Date | null) => d?.toISOString() ?? null;

/** A draw's seed is public once entries have closed: anyone can then recompute the draw (`flashsale draw verify`). */
export function seedRevealed(sale: Sale, now: number): boolean {
  return sale.admission === 'draw' && sale.entriesCloseAt !== null && now >= sale.entriesCloseAt.getTime();
}
