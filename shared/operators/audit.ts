// The audit trail: one row per admin action that changed something, written on the action's own
// client inside its transaction, so an action and its record commit or roll back together. A
// retried action that changes nothing (a second pause, an end of an ended sale) records nothing.
import type { Pool, PoolClient } from '../runtime/db.js';

export const AUDIT_ACTIONS = [
  'sale.create',
  'sale.end',
  'sale.pause',
  'sale.resume',
  'sale.end-time',
  'sale.restock',
  'sale.remove',
  'refund.mark',
  'operator.add',
  'operator.revoke',
] as const;
export type AuditAction = (typeof AUDIT_ACTIONS)[number];

export interface AuditEntry {
  id: number;
  at: string;
  operator: string;
  action: AuditAction;
  saleId: string | null;
  detail: Record<string, unknown>;
}

export interface AuditRecord {
  operator: string;
  action: AuditAction;
  saleId?: string;
  detail?: Record<string, unknown>;
}

export const AUDIT_LIMIT = { default: 50, max: 500 };

/** Returns the row's id: taken from a sequence, so an id no row has is an action that never committed. */
export async function recordAudit(client: PoolClient, r: AuditRecord): Promise<string> {
  const res = await client.query<{ id: string }>(
    'insert into audit (operator, action, sale_id, detail) values ($1, $2, $3, $4) returning id',
    [r.operator, r.action, r.saleId ?? null, JSON.stringify(r.detail ?? {})],
  );
  return res.rows[0]!.id;
}

interface AuditRow {
  id: string;
  at: Date;
  operator: string;
  action: AuditAction;
  sale_id: string | null;
  detail: Record<string, unknown>;
}

/** Newest first: every action, or one sale's. */
export async function listAudit(pool: Pool, opts: { saleId?: string; limit?: number } = {}): Promise<AuditEntry[]> {
  const res = await pool.query<AuditRow>(
    `select * from audit where ($1::text is null or sale_id = $1) order by id desc limit $2`,
    [opts.saleId ?? null, Math.min(opts.limit ?? AUDIT_LIMIT.default, AUDIT_LIMIT.max)],
  );
  return res.rows.map((r) => ({
    id: Number(r.id),
    at: r.at.toISOString(),
    operator: r.operator,
    action: r.action,
    saleId: r.sale_id,
    detail: r.detail,
  }));
}
