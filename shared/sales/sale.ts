// Sales: creation in Postgres plus loading into Redis, lookup, and the public view. What a sale
// is, field by field, is in sales/definition.ts; the checks of its input in sales/input.ts.
import type { RedisClient } from '../redis/connect.js';
import type { Pool } from '../runtime/db.js';
import { withTransaction } from '../runtime/db.js';
import { HttpError } from '../runtime/errors.js';
import { SALES_REGISTRY, saleKeys } from '../redis/keys.js';
import { insertVariants, variantsColumn, type Variant } from './variants.js';
import { loadSale, type LoadOptions, type SaleRules } from './scripts.js';
import { modeOf } from '../admission/mode.js';
import { recordAudit } from '../operators/audit.js';
import {
  SALE_DEFINITION,
  type Admission,
  type Buyers,
  type Challenge,
  type Sale,
  type SaleField,
} from './definition.js';

// The callers of sales keep importing what a sale is from here.
export { parseSaleInput } from './input.js';
export { MAX_PER_ORDER, SALE_FIELDS, type Admission, type Challenge, type Sale } from './definition.js';

export type SaleState = 'upcoming' | 'open' | 'sold_out' | 'ended';

const FIELDS = Object.keys(SALE_DEFINITION) as SaleField[];
const COLUMNS = FIELDS.map((k) => SALE_DEFINITION[k].column);
const INSERT = `insert into sales (${COLUMNS.join(', ')})
  values (${COLUMNS.map((_, i) => `$${i + 1}`).join(', ')}) on conflict (id) do nothing`;

/** A row of `sales` as `select *` returns it: a column per field of the definition, and the draw's and settling's own; with `variantsColumn()`, the variants. */
export type SaleRow = { id: string; [column: string]: unknown };

/** Every column of a sale and its variants: `select ${SALE_COLUMNS} from sales`. */
export const SALE_COLUMNS = `sales.*, ${variantsColumn()}`;

export function fromRow(r: SaleRow): Sale {
  const sale = Object.fromEntries(FIELDS.map((k) => [k, r[SALE_DEFINITION[k].column]])) as unknown as Sale;
  sale.variants = (r.variants as Variant[] | undefined) ?? [];
  return sale;
}

/** What Redis keeps of a sale (load_sale.lua): times in ms. */
export function rulesOf(sale: Sale): SaleRules {
  return Object.fromEntries(
    Object.entries(sale)
      .filter(([k]) => k !== 'variants')
      .map(([k, v]) => [k, v instanceof Date ? v.getTime() : v]),
  ) as SaleRules;
}

/** Puts a sale into Redis (idempotent: a loaded sale keeps its stock) and into the registry. */
export async function loadSaleIntoRedis(redis: RedisClient, sale: Sale, opts: LoadOptions = {}): Promise<boolean> {
  const loaded = await loadSale(redis, sale.id, rulesOf(sale), sale.variants, opts);
  await redis.sadd(SALES_REGISTRY, sale.id);
  return loaded;
}

/**
 * Creates the sale in Postgres and loads it into Redis; Redis failing rolls the row back. `by`: the
 * operator who asked, recorded in the audit in the same transaction.
 */
export async function createSale(
  pool: Pool,
  redis: RedisClient,
  sale: Sale,
  opts: LoadOptions = {},
  by?: string,
): Promise<void> {
  await withTransaction(pool, async (client) => {
    const res = await client.query(
      INSERT,
      FIELDS.map((k) => sale[k]),
    );
    if (res.rowCount === 0) throw new HttpError('sale_exists', `A sale with id "${sale.id}" already exists.`);
    await insertVariants(client, sale.id, sale.variants);
    if (by !== undefined) await recordAudit(client, { operator: by, action: 'sale.create', saleId: sale.id });
    await loadSaleIntoRedis(redis, sale, opts);
  });
}

export async function getSale(pool: Pool, id: string): Promise<Sale | null> {
  const res = await pool.query<SaleRow>(`select ${SALE_COLUMNS} from sales where id = $1`, [id]);
  return res.rows[0] ? fromRow(res.rows[0]) : null;
}

export async function listSales(pool: Pool): Promise<Sale[]> {
  const res = await pool.query<SaleRow>(`select ${SALE_COLUMNS} from sales order by starts_at`);
  return res.rows.map(fromRow);
}

export function saleState(sale: Sale, available: number, now: number): SaleState {
  if (now < sale.startsAt.getTime()) return 'upcoming';
  if (sale.endsAt && now >= sale.endsAt.getTime()) return 'ended';
  return available > 0 ? 'open' : 'sold_out';
}

export interface SaleView {
  id: string;
  name: string;
  stock: number;
  available: number;
  perUserLimit: number;
  perVariantLimit: number | null;
  maxPerOrder: number;
  paymentWindowSeconds: number;
  startsAt: string;
  endsAt: string | null;
  state: SaleState;
  challenge: Challenge;
  challengeComplexity: number;
  buyers: Buyers;
  price: number | null;
  currency: string | null;
  admission: Admission;
  admitRatePerSecond: number | null;
  admitOverbook: number | null;
  passSeconds: number | null;
  entriesOpenAt: string | null;
  entriesCloseAt: string | null;
  backfillUntil: string | null;
  /** sha256 of the seed, from the start; the seed itself once a draw has been made (Postgres) or a waiting room has opened (Redis), null before. */
  seedSha256: string | null;
  seed: string | null;
  /** In the sale's order, each with its units left (Redis). */
  variants: VariantView[];
}

export interface VariantView extends Variant {
  available: number;
}

/** Each variant with its units left: a one-variant sale's are the sale's, the others' in the sale's hash (load_sale.lua). */
async function variantViews(redis: RedisClient, sale: Sale, available: number): Promise<VariantView[]> {
  if (sale.variants.length <= 1) return sale.variants.map((v) => ({ ...v, available }));
  const left = await redis.hmget(saleKeys(sale.id).variantsLeft, ...sale.variants.map((v) => v.sku));
  return sale.variants.map((v, i) => ({ ...v, available: Number(left[i] ?? 0) }));
}

export async function saleView(redis: RedisClient, sale: Sale, now = Date.now()): Promise<SaleView> {
  const available = Number((await redis.get(saleKeys(sale.id).available)) ?? 0);
  return {
    id: sale.id,
    name: sale.name,
    stock: sale.stock,
    available,
    perUserLimit: sale.perUserLimit,
    perVariantLimit: sale.perVariantLimit,
    maxPerOrder: sale.maxPerOrder,
    paymentWindowSeconds: sale.paymentWindowSeconds,
    startsAt: sale.startsAt.toISOString(),
    endsAt: sale.endsAt?.toISOString() ?? null,
    state: saleState(sale, available, now),
    challenge: sale.challenge,
    challengeComplexity: sale.challengeComplexity,
    buyers: sale.buyers,
    price: sale.price,
    currency: sale.currency,
    admission: sale.admission,
    admitRatePerSecond: sale.admitRatePerSecond,
    admitOverbook: sale.admitOverbook,
    passSeconds: sale.passSeconds,
    entriesOpenAt: iso(sale.entriesOpenAt),
    entriesCloseAt: iso(sale.entriesCloseAt),
    backfillUntil: iso(sale.backfillUntil),
    seedSha256: sale.seedSha256,
    seed: await publicSeed(redis, sale),
    variants: await variantViews(redis, sale, available),
  };
}

/** The seed if it is public yet, as the sale's admission mode says (a draw's once made, a waiting room's once it has opened). */
async function publicSeed(redis: RedisClient, sale: Sale): Promise<string | null> {
  const mode = modeOf(sale.admission);
  return mode?.seedPublic && (await mode.seedPublic(redis, sale)) ? sale.seed : null;
}

const iso = (d: Date | null) => d?.toISOString() ?? null;
