// The invariants a sale keeps whatever crashed, restarted or raced, read from Postgres and Redis as
// they are now. Each read goes Redis first, Postgres second: an order only ever moves from Redis to
// Postgres (queued -> written) and from open to closed (pending -> expired or cancelled -> restored), so reading
// in that order can miss a change made in between but never invent a violation, even mid-sale.
// Shared by the reliability suite and `flashsale check`.
import type { RedisClient } from '../redis/connect.js';
import type { Pool } from '../runtime/db.js';
import { SALES_REGISTRY, saleKeys } from '../redis/keys.js';
import { parseWinner, saleIdOfOrder } from '../runtime/ids.js';
import { HOLDING, OPEN, RESTORING, sqlStates } from '../orders/states.js';
import { paymentMismatches } from '../payments/queries.js';
import { conservationSum, missingInPostgres, reconcile } from './reconcile.js';
import { salesReplication } from '../redis/replica-watch.js';
import { getSale, listSales, type Sale } from '../sales/sale.js';

export type InvariantName =
  | 'sale_exists'
  | 'conservation'
  | 'stock_never_negative'
  | 'no_overdue_pending'
  | 'no_overdue_restore'
  | 'per_user_limit'
  | 'paid_never_expired'
  | 'restored_once'
  | 'payments_match_orders'
  | 'accepted_has_one_order'
  | 'replicated';

export interface Violation {
  sale?: string;
  invariant: InvariantName;
  detail: string;
}

export interface InvariantReport {
  checks: number;
  violations: Violation[];
}

export interface CheckOptions {
  /** Sales to check; every sale in Postgres and in Redis's registry when left out. */
  saleIds?: string[];
  /** Order ids a buyer was answered 202 for: each must be one order (written, or still queued). */
  accepted?: string[];
  /** The replay's interval: how long an overdue order may wait for the sweep. */
  replayIntervalMs: number;
  /** Slack on top of the interval for a pass to run (default 1000 ms). */
  graceMs?: number;
  /** REDIS_MIN_REPLICAS_ACK: each sale's master must have this many replicas online (0 or left out: not checked). */
  minReplicasAck?: number;
}

const SAMPLE = 5;
const sample = (ids: string[]) =>
  `${ids.slice(0, SAMPLE).join(', ')}${ids.length > SAMPLE ? `, ... (${ids.length})` : ''}`;

export async function checkInvariants(pool: Pool, redis: RedisClient, opts: CheckOptions): Promise<InvariantReport> {
  const report: InvariantReport = { checks: 0, violations: [] };
  const check = (ok: boolean, invariant: InvariantName, detail: () => string, sale?: string) => {
    report.checks++;
    if (!ok) report.violations.push({ ...(sale === undefined ? {} : { sale }), invariant, detail: detail() });
  };
  const lateSeconds = (opts.replayIntervalMs + (opts.graceMs ?? 1000)) / 1000;

  let sales: Sale[];
  if (opts.saleIds) {
    sales = [];
    for (const id of opts.saleIds) {
      const sale = await getSale(pool, id);
      check(sale !== null, 'sale_exists', () => 'no such sale in Postgres', id);
      if (sale) sales.push(sale);
    }
  } else {
    // Redis first, as everywhere here: a sale created meanwhile is then in Postgres too.
    const registry = await redis.smembers(SALES_REGISTRY);
    sales = await listSales(pool);
    const missing = new Set(await missingInPostgres(pool, registry));
    for (const id of registry)
      check(!missing.has(id), 'sale_exists', () => 'in the Redis registry, no such sale in Postgres', id);
  }

  const replicationOf = salesReplication(redis);
  for (const sale of sales) {
    const min = opts.minReplicasAck ?? 0;
    if (min > 0) {
      // Not a lost unit but a sale in the degraded mode (replica-watch.ts), which an operator ends.
      const m = await replicationOf(sale.id);
      check(
        m.online >= min,
        'replicated',
        () =>
          `its master ${m.at} has ${m.online} of the ${min} replicas REDIS_MIN_REPLICAS_ACK asks for: its purchases are answered 503 and its orders written unconfirmed until a replica is attached`,
        sale.id,
      );
    }
    const r = await reconcile(pool, redis, sale.id, sale.stock, sale.variants);
    const broken = (r.variants ?? []).filter((v) => !v.holds);
    check(
      r.holds,
      'conservation',
      () =>
        [
          `${conservationSum(r)} ${r.holds || broken.length === 0 ? '!=' : 'vs'} total ${r.total} (${RESTORING.map((s) => `${s} ${r[s]}`).join(', ')})`,
          ...broken.map((v) => `variant ${v.sku}: ${conservationSum(v)} != stock ${v.total}`),
        ].join('; '),
      sale.id,
    );
    check(r.available >= 0, 'stock_never_negative', () => `available is ${r.available}`, sale.id);

    const late = await pool.query<{ open: string[]; unrestored: string[] }>(
      `select coalesce(array_agg(id) filter (where status in ${sqlStates(OPEN)}), '{}') as open,
              coalesce(array_agg(id) filter (where status in ${sqlStates(RESTORING)}), '{}') as unrestored
       from orders
       where sale_id = $1 and ((status in ${sqlStates(OPEN)} and expires_at < now() - make_interval(secs => $2))
          or (status in ${sqlStates(RESTORING)} and restored_at is null and closed_at < now() - make_interval(secs => $2)))`,
      [sale.id, lateSeconds],
    );
    const { open, unrestored } = late.rows[0]!;
    check(
      open.length === 0,
      'no_overdue_pending',
      () => `${OPEN.join(' or ')} more than ${lateSeconds} s past the deadline: ${sample(open)}`,
      sale.id,
    );
    check(
      unrestored.length === 0,
      'no_overdue_restore',
      () => `${RESTORING.join(' or ')} more than ${lateSeconds} s ago, stock not back: ${sample(unrestored)}`,
      sale.id,
    );

    const over = await usersOverLimit(pool, redis, sale);
    check(over.length === 0, 'per_user_limit', () => `above ${sale.perUserLimit}: ${sample(over)}`, sale.id);

    // The restored set is the guard of restore.lua: a member that is not closed (a RESTORING state)
    // in Postgres got its stock back while still sold (a HOLDING state). Closed and paid at once (an
    // order both cancelled and paid) is the same fault seen from Postgres.
    const [restored, restoredQty] = await restoredOf(redis, sale.id);
    const closedRows = await pool.query<{ id: string; qty: number }>(
      `select id, qty from orders where id = any($1::text[]) and status in ${sqlStates(RESTORING)}`,
      [restored],
    );
    const closed = new Set(closedRows.rows.map((row) => row.id));
    const notClosed = restored.filter((id) => !closed.has(id));
    const both = await pool.query<{ id: string }>(
      'select id from orders where sale_id = $1 and paid_at is not null and closed_at is not null',
      [sale.id],
    );
    const bad = [...notClosed, ...both.rows.map((row) => row.id)];
    check(
      bad.length === 0,
      'paid_never_expired',
      () => `restored, or paid and closed, while not ${RESTORING.join(' or ')}: ${sample(bad)}`,
      sale.id,
    );
    // Each restored order gave back its own qty once: the units restored are exactly its members' qty.
    const members = closedRows.rows.reduce((n, row) => n + row.qty, 0);
    check(
      notClosed.length > 0 || members === restoredQty,
      'restored_once',
      () => `${restoredQty} units restored for orders of ${members}`,
      sale.id,
    );

    // An applied payment's order is paid, by that payment alone; a refund_due one's is not paid by it.
    const mismatched = await paymentMismatches(pool, sale.id);
    check(
      mismatched.length === 0,
      'payments_match_orders',
      () => `payments and orders disagree: ${sample(mismatched)}`,
      sale.id,
    );
  }

  if (opts.accepted) {
    const missing = await acceptedWithoutOrder(pool, redis, opts.accepted);
    const answers = new Map<string, number>();
    for (const id of opts.accepted) answers.set(id, (answers.get(id) ?? 0) + 1);
    const repeated = [...answers].filter(([, n]) => n > 1).map(([id]) => id);
    check(missing.length === 0 && repeated.length === 0, 'accepted_has_one_order', () =>
      [
        missing.length ? `answered 202 but no order: ${sample(missing)}` : '',
        repeated.length ? `answered 202 twice: ${sample(repeated)}` : '',
      ]
        .filter(Boolean)
        .join('; '),
    );
  }
  return report;
}

/** The restored set and the units restored, read at one instant (one slot: a transaction). */
async function restoredOf(redis: RedisClient, saleId: string): Promise<[string[], number]> {
  const k = saleKeys(saleId);
  const res = (await redis.multi().smembers(k.restored).get(k.restoredQty).exec()) ?? [];
  for (const [err] of res) if (err) throw err;
  return [res[0]![1] as string[], Number(res[1]![1] ?? 0)];
}

/** Buyers holding more than the limit: orders in a HOLDING state (pending, paid) plus winners not yet written. */
async function usersOverLimit(pool: Pool, redis: RedisClient, sale: Sale): Promise<string[]> {
  const queued = Object.values(await redis.hgetall(saleKeys(sale.id).queued)).map((e) => parseWinner(e));
  const held = await pool.query<{ user_id: string; qty: number }>(
    `select user_id, sum(qty)::int as qty from orders where sale_id = $1 and status in ${sqlStates(HOLDING)} group by user_id`,
    [sale.id],
  );
  const written = await pool.query<{ id: string }>('select id from orders where id = any($1::text[])', [
    queued.map((w) => w.orderId),
  ]);
  const inPostgres = new Set(written.rows.map((row) => row.id));
  const byUser = new Map(held.rows.map((row) => [row.user_id, row.qty]));
  for (const w of queued) if (!inPostgres.has(w.orderId)) byUser.set(w.userId, (byUser.get(w.userId) ?? 0) + w.qty);
  return [...byUser].filter(([, qty]) => qty > sale.perUserLimit).map(([user, qty]) => `${user} holds ${qty}`);
}

/** Accepted order ids that are neither queued in Redis nor rows in Postgres. */
async function acceptedWithoutOrder(pool: Pool, redis: RedisClient, accepted: string[]): Promise<string[]> {
  const ids = [...new Set(accepted)];
  // One lookup each, not one pipeline: on a cluster a pipeline may not cross slots.
  const queued = await Promise.all(
    ids.map(async (id) => (await redis.hexists(saleKeys(saleIdOfOrder(id) ?? '-').queued, id)) === 1),
  );
  const rows = await pool.query<{ id: string }>('select id from orders where id = any($1::text[])', [ids]);
  const written = new Set(rows.rows.map((row) => row.id));
  return ids.filter((id, i) => !queued[i] && !written.has(id));
}

export function formatInvariants(report: InvariantReport): string {
  const lines = [`${report.checks} checks, ${report.violations.length} violations`];
  for (const v of report.violations)
    lines.push(`  VIOLATED ${v.invariant}${v.sale ? ` (sale ${v.sale})` : ''}: ${v.detail}`);
  return lines.join('\n');
}
