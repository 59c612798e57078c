// Sales as the routes read them: rules change only when a sale is created or ended, so a second of
// staleness is fine for views and checks (purchases are judged by Redis, never by this cache), and
// an end through this process drops the entry at once. Bounded, since ids of sales that do not
// exist are asked for too (and answered 404 without being kept).
import type { Pool } from '../runtime/db.js';
import { HttpError } from '../runtime/errors.js';
import { getSale, type Sale } from '../sales/sale.js';

const TTL_MS = 1000;
const MAX_ENTRIES = 4096;

export class SaleCache {
  private readonly held = new Map<string, { sale: Sale; until: number }>();

  constructor(private readonly pool: Pool) {}

  async get(id: string): Promise<Sale> {
    const hit = this.held.get(id);
    if (hit && hit.until > Date.now()) return hit.sale;
    const sale = await getSale(this.pool, id);
    if (!sale) throw new HttpError('sale_not_found');
    if (this.held.size >= MAX_ENTRIES) this.held.clear();
    this.held.set(id, { sale, until: Date.now() + TTL_MS });
    return sale;
  }

  drop(id: string): void {
    this.held.delete(id);
  }
}
