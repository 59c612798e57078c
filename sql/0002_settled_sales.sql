-- A sale settles once it has ended and every order is final (paid, or expired with its stock back).
-- The replay sets settled_at and then drops the sale from the Redis registry, so no per-tick loop
-- walks it again; reconciliation covers unsettled sales only. A sale without an end may still sell,
-- so it never settles: the constraint says so.
alter table sales add column settled_at timestamptz;
alter table sales add constraint sales_settled_after_end
  check (settled_at is null or (ends_at is not null and settled_at >= ends_at));
create index sales_unsettled on sales (starts_at) where settled_at is null;
