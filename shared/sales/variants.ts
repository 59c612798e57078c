// A sale's variants (sizes, colours): each its own stock and, optionally, its own price. The unit
// of stock is the variant; the sale's stock is their sum. Checked here for POST /api/sales and
// `flashsale sale create`, kept in sale_variants (sql/0015), and in Redis for a sale of more than
// one: a hash sku -> units left beside the sale's `available` (load_sale.lua, purchase.lua).
import { HttpError } from '../runtime/errors.js';
import type { PoolClient } from '../runtime/db.js';
import { UNSHOWABLE } from './definition.js';
import type { Variant } from './model.js';

export type { Variant };

/**
 * The most variants a sale may have: a purchase refused as sold out lists the ones still available,
 * and a per-variant metric label is bounded by it.
 */
export const MAX_VARIANTS = 100;
/** What a sale made without `variants` sells: one variant of its whole stock. */
export const DEFAULT_SKU = 'default';
export const SKU_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;

const FIELDS = ['sku', 'label', 'stock', 'priceCents'];

function invalid(message: string): never {
  throw new HttpError('invalid_sale', message);
}

/** The variants an input names, checked; undefined when it names none (the sale is then one variant). */
export function parseVariants(given: unknown): Variant[] | undefined {
  if (given === undefined || given === null) return undefined;
  if (!Array.isArray(given) || given.length === 0 || given.length > MAX_VARIANTS)
    invalid(`variants must be a list of 1 to ${MAX_VARIANTS} variants, each {sku, label, stock, priceCents?}`);
  const seen = new Set<string>();
  return given.map((v: unknown, i) => {
    const at = `variants[${i}]`;
    if (v === null || typeof v !== 'object' || Array.isArray(v))
      invalid(`${at} must be an object {sku, label, stock, priceCents?}`);
    const { sku, label, stock, priceCents } = v as Record<string, unknown>;
    const unknown = Object.keys(v).filter((k) => !FIELDS.includes(k));
    if (unknown.length > 0) invalid(`${at}: unknown field(s): ${unknown.join(', ')}`);
    if (typeof sku !== 'string' || !SKU_PATTERN.test(sku))
      invalid(`${at}.sku must be 1-64 characters of A-Z a-z 0-9 _ -`);
    if (seen.has(sku)) invalid(`${at}.sku ${sku} is given twice: each variant's sku must be unique in its sale`);
    seen.add(sku);
    if (typeof label !== 'string' || label.trim() === '' || label.length > 200 || UNSHOWABLE.test(label))
      invalid(`${at}.label must be a non-empty string of at most 200 characters, no control characters`);
    if (typeof stock !== 'number' || !Number.isSafeInteger(stock) || stock < 0 || stock > 10_000_000)
      invalid(`${at}.stock must be an integer from 0 to 10000000`);
    const price = priceCents ?? null;
    if (price !== null && (typeof price !== 'number' || !Number.isSafeInteger(price) || price < 1 || price > 1e12))
      invalid(`${at}.priceCents must be an integer from 1 to 1000000000000, or left out for the sale's price`);
    return { sku, label, stock, priceCents: price };
  });
}

/** A sale made without variants: one, `default`, of its whole stock at its price. */
export function defaultVariants(name: string, stock: number): Variant[] {
  return [{ sku: DEFAULT_SKU, label: name, stock, priceCents: null }];
}

/** The sale's variants, as `fromRow` reads them: a column of a select of `sales` (named `table` there). */
export const variantsColumn = (
  table = 'sales',
) => `(select coalesce(json_agg(json_build_object('sku', v.sku, 'label', v.label, 'stock', v.stock,
    'priceCents', v.price) order by v.position), '[]') from sale_variants v where v.sale_id = ${table}.id) as variants`;

/** Stores a new sale's variants, in their order. */
export async function insertVariants(client: PoolClient, saleId: string, variants: Variant[]): Promise<void> {
  await client.query(
    `insert into sale_variants (sale_id, sku, label, stock, price, position)
     select $1, v.sku, v.label, v.stock, v.price, v.position - 1
     from unnest($2::text[], $3::text[], $4::int[], $5::int8[]) with ordinality as v(sku, label, stock, price, position)`,
    [
      saleId,
      variants.map((v) => v.sku),
      variants.map((v) => v.label),
      variants.map((v) => v.stock),
      variants.map((v) => v.priceCents),
    ],
  );
}
