// The Postgres row-lock design's purchase: one transaction that checks the buyer's limit, inserts
// the order and takes the stock with a conditional UPDATE on the sale's one stock row. Postgres
// serialises buyers on that row's lock, which is the point of the comparison. The hot row is
// touched last so its lock is held only for the UPDATE and the COMMIT (the best ordering for this
// design); a refusal rolls everything back, so a refused buyer keeps their quota.
import { randomUUID } from 'node:crypto';
import type { Pool } from '../../shared/runtime/db.js';
import { HttpError } from '../../shared/runtime/errors.js';

export const ROWLOCK_SCHEMA = `
  create table if not exists bench_stock (sale_id text primary key references sales (id), stock integer not null check (stock >= 0));
  create table if not exists bench_buys (sale_id text not null, user_id text not null, qty integer not null, primary key (sale_id, user_id));
  create sequence if not exists bench_order_seq;`;

interface Rules {
  perUser: number;
  maxPerOrder: number;
  startsAt: number;
  endsAt: number;
  windowS: number;
  until: number;
}

/** Sale rules change only by creating a sale: cached for a second, as the product's sale view is. */
const rulesCache = new Map<string, Rules>();
async function rules(pool: Pool, saleId: string): Promise<Rules> {
  const hit = rulesCache.get(saleId);
  if (hit && hit.until > Date.now()) return hit;
  const res = await pool.query<{
    per_user_limit: number;
    max_per_order: number;
    starts_at: Date;
    ends_at: Date | null;
    payment_window_seconds: number;
  }>('select per_user_limit, max_per_order, starts_at, ends_at, payment_window_seconds from sales where id = $1', [
    saleId,
  ]);
  const row = res.rows[0];
  if (!row) throw new HttpError('sale_not_found');
  const r = {
    perUser: row.per_user_limit,
    maxPerOrder: row.max_per_order,
    startsAt: row.starts_at.getTime(),
    endsAt: row.ends_at?.getTime() ?? 0,
    windowS: row.payment_window_seconds,
    until: Date.now() + 1000,
  };
  rulesCache.set(saleId, r);
  return r;
}

/** Returns the new order's id, or throws the refusal the product would answer. */
export async function rowLockPurchase(pool: Pool, saleId: string, userId: string, qty: number): Promise<string> {
  const r = await rules(pool, saleId);
  const now = Date.now();
  if (now < r.startsAt) throw new HttpError('not_started');
  if (r.endsAt > 0 && now >= r.endsAt) throw new HttpError('ended');
  if (qty > r.maxPerOrder) throw new HttpError('qty_above_max');
  if (qty > r.perUser) throw new HttpError('limit_reached');
  const orderId = `${saleId}.${randomUUID()}`;
  const client = await pool.connect();
  let open = false;
  try {
    await client.query('begin');
    open = true;
    const bought = await client.query(
      `insert into bench_buys (sale_id, user_id, qty) values ($1, $2, $3)
       on conflict (sale_id, user_id) do update set qty = bench_buys.qty + excluded.qty where bench_buys.qty + excluded.qty <= $4
       returning qty`,
      [saleId, userId, qty, r.perUser],
    );
    if (bought.rowCount === 0) throw new HttpError('limit_reached');
    await client.query(
      `insert into orders (id, sale_id, user_id, qty, status, seq, purchased_at, created_at, expires_at)
       values ($1, $2, $3, $4, 'pending', nextval('bench_order_seq'), now(), now(), now() + make_interval(secs => $5))`,
      [orderId, saleId, userId, qty, r.windowS],
    );
    const took = await client.query('update bench_stock set stock = stock - $2 where sale_id = $1 and stock >= $2', [
      saleId,
      qty,
    ]);
    if (took.rowCount === 0) {
      await client.query('rollback');
      open = false;
      const left = await client.query<{ stock: number }>('select stock from bench_stock where sale_id = $1', [saleId]);
      throw new HttpError((left.rows[0]?.stock ?? 0) > 0 ? 'not_enough_stock' : 'sold_out');
    }
    await client.query('commit');
    open = false;
    return orderId;
  } finally {
    if (open) await client.query('rollback').catch(() => {});
    client.release();
  }
}
