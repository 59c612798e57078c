-- Variants: a sale sells one product in 1 to 100 variants (sizes, colours), each with its own stock
-- and optionally its own price. The unit of stock is the variant; a sale's stock is the sum of its
-- variants' (the input checks it; shared/sales/variants.ts). At most 100 a sale: they name metric
-- labels and a purchase's sold-out answer lists them.
create table sale_variants (
  -- A sale row taken out takes its variants with it (its orders still hold it: 0006).
  sale_id text not null references sales (id) on delete cascade,
  sku text not null check (sku ~ '^[A-Za-z0-9_-]{1,64}$'),
  label text not null check (length(label) between 1 and 200),
  stock integer not null check (stock >= 0),
  -- null: the sale's price
  price bigint check (price > 0),
  position integer not null check (position between 0 and 99),
  primary key (sale_id, sku),
  unique (sale_id, position)
);

-- Every sale made before is one variant, `default`, holding its whole stock.
insert into sale_variants (sale_id, sku, label, stock, position)
select id, 'default', name, stock, 0 from sales;

-- An order is of one variant. No foreign key: the writer's insert checks the sale once per batch
-- (0006), and a per-row check would cost every order; the writer only ever writes a variant the
-- sale's purchase script knew. Every order made before is of its sale's one variant, `default`.
alter table orders add column sku text not null default 'default';

-- The most one buyer may hold of any one variant (null: only perUserLimit, across the sale).
alter table sales add column per_variant_limit integer check (per_variant_limit > 0);
