-- Named operators and the record of what each did. An operator's secret is kept as its sha256
-- only: a leaked table gives no credential. A revoked operator keeps its row (the audit names it),
-- and its name is never issued again, so a name in the audit is always one person.
create table operators (
  name text primary key check (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$' and name <> 'admin-token'),
  secret_sha256 bytea not null unique check (length(secret_sha256) = 32),
  created_at timestamptz not null default now(),
  revoked_at timestamptz
);

-- One row per admin action that changed something, written in the action's own transaction.
-- `operator` is text, not a reference: 'admin-token' (ADMIN_TOKEN) and 'cli:<os user>' are no rows.
create table audit (
  id bigserial primary key,
  at timestamptz not null default now(),
  operator text not null,
  action text not null,
  sale_id text,
  detail jsonb not null default '{}'
);
create index audit_by_sale on audit (sale_id, id) where sale_id is not null;

-- A paused sale sells nothing until resumed (purchase.lua reads the flag load_sale.lua copies).
alter table sales add column paused_at timestamptz;
