create table sales (
  id text primary key,
  name text not null,
  stock integer not null check (stock >= 0),
  per_user_limit integer not null default 1 check (per_user_limit > 0),
  max_per_order integer not null default 1 check (max_per_order > 0),
  starts_at timestamptz not null default now(),
  ends_at timestamptz,
  payment_window_seconds integer not null default 300 check (payment_window_seconds > 0),
  created_at timestamptz not null default now()
);

create table orders (
  -- the id handed to the buyer at purchase time
  id text primary key,
  sale_id text not null references sales (id),
  user_id text not null,
  qty integer not null check (qty > 0),
  status text not null check (status in ('pending', 'paid', 'expired')),
  -- the purchase's place in its sale (from Redis); lets reconciliation cut at one instant
  seq bigint not null,
  purchased_at timestamptz not null,
  created_at timestamptz not null default now(),
  expires_at timestamptz not null,
  paid_at timestamptz,
  closed_at timestamptz,
  -- set once the stock of an expired order is back in Redis
  restored_at timestamptz,
  check ((status = 'paid') = (paid_at is not null)),
  check ((status = 'expired') = (closed_at is not null))
);

create index orders_pending_due on orders (expires_at) where status = 'pending';
create index orders_unrestored on orders (closed_at) where status = 'expired' and restored_at is null;
create index orders_sale_status on orders (sale_id, status);
