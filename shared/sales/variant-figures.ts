// Each variant's row in a sale's live view (GET /api/sales/:saleId/live, `variants`; /admin's table):
// its label, stock and price as sale_variants has them (read with the sale), and its units left,
// queued, pending and paid from the reconciliation the view reads anyway, whose one statement sums
// a sale of several's orders by sku. So the rows cost no query of their own, however many variants,
// and always agree with the sale's units shown beside them.
import type { Reconciliation } from '../checks/reconcile.js';
import { count } from '../http/schema-parts.js';
import type { Sale } from './model.js';

export interface VariantFigures {
  sku: string;
  label: string;
  stock: number;
  /** What one unit costs: the variant's own price, else the sale's (minor units); null as the sale's. */
  price: number | null;
  available: number;
  queued: number;
  pending: number;
  paid: number;
}

/** The sale's variants in its order; a sale of one has its units as the sale's. */
export function variantFigures(sale: Sale, rec: Reconciliation): VariantFigures[] {
  const bySku = new Map((rec.variants ?? []).map((v) => [v.sku, v]));
  return sale.variants.map(({ sku, label, stock, priceCents }) => {
    const units = sale.variants.length === 1 ? rec : bySku.get(sku);
    return {
      sku,
      label,
      stock,
      price: priceCents ?? sale.price,
      available: units?.available ?? 0,
      queued: units?.queued ?? 0,
      pending: units?.pending ?? 0,
      paid: units?.paid ?? 0,
    };
  });
}

export const variantFiguresSchema = {
  type: 'array',
  description: "the sale's variants in its order, each with its units by place (a sale of one: the sale's)",
  items: {
    type: 'object',
    required: ['sku', 'label', 'stock', 'price', 'available', 'queued', 'pending', 'paid'],
    properties: {
      sku: { type: 'string' },
      label: { type: 'string' },
      stock: count("the variant's stock"),
      price: { type: 'integer', nullable: true, description: "the variant's own price, else the sale's (minor units)" },
      available: count('left in Redis'),
      queued: count('won, not yet written to Postgres'),
      pending: count('awaiting payment'),
      paid: count('paid'),
    },
  },
};
