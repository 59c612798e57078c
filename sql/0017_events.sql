-- Outbound events (docs/events.md): a transactional outbox, the shop's endpoints, and what is due
-- to each. An event row is inserted by the same transaction as the change it reports, so it exists
-- exactly when the change committed; the delivery daemon reads it from here, never from the path
-- that made the change.
--
-- The id is the event's sequence. One Postgres sequence serves every sale, so within a sale the
-- numbers only ever increase, with gaps (another sale's events, a rolled-back insert). Concurrent
-- writers need no lock on a counter: they may commit out of number order, but two events about one
-- order cannot, since the second change locks the order's row, which the first committed (created
-- before paid, paid before refund_due). A receiver orders by sequence and never waits for a gap.
--
-- The writer's batch records one row for all its orders (`orders.created`, their ids in order of
-- purchase): a row per order cost its drain a quarter or more. The delivery side fans that row out
-- into one `order.created` per order, numbered from the batch row's id up (id + 1, id + 2, ...): the
-- sequence steps by 10,000, so those numbers are free, and they sort after every event committed
-- before the batch and before every later change of its orders. A batch row holds at most 9,999.
create table events (
  id bigint generated always as identity (increment by 10000) primary key,
  type text not null check (type ~ '^[a-z_]+\.[a-z_]+$'),
  version integer not null default 1 check (version > 0),
  -- No foreign key: a per-row check would cost the writer's batch insert, and its statement already
  -- holds the sale's row for key share.
  sale_id text not null,
  order_id text,
  -- what the event says beyond its order's row (body.ts reads that at delivery): {} for most
  payload jsonb not null,
  -- an orders.created row's orders, in order of purchase (at most 9,999)
  order_ids text[],
  created_at timestamptz not null default now(),
  -- set once a delivery row exists for every endpoint subscribed when the daemon fanned it out
  dispatched_at timestamptz
);
-- One index beside the key: each more (by sale, by order, by time) cost the writer's drain a
-- measurable share (docs/events.md). Listing by time goes by id, which follows commit time closely.
create index events_undispatched on events (id) where dispatched_at is null;

-- A shop's receiver. During a rotation both secrets sign (previous_secret until previous_until).
create table endpoints (
  id text primary key,
  url text not null,
  -- the event types it takes; empty: every type
  event_types text[] not null default '{}',
  secret text not null check (secret ~ '^whsec_'),
  previous_secret text check (previous_secret ~ '^whsec_'),
  previous_until timestamptz,
  enabled boolean not null default true,
  -- why it was disabled (failing for the whole retry horizon, or by an operator)
  disabled_reason text,
  -- first failure of the current run of failures; cleared by a success
  failing_since timestamptz,
  created_at timestamptz not null default now(),
  check ((previous_secret is null) = (previous_until is null)),
  check (enabled or disabled_reason is not null)
);

-- What is due: one row per event and subscribed endpoint.
create table deliveries (
  event_id bigint not null references events (id) on delete cascade,
  endpoint_id text not null references endpoints (id) on delete cascade,
  -- the event's order: its next event waits for this one (per-order order at the receiver)
  order_id text,
  status text not null default 'pending' check (status in ('pending', 'delivered', 'failed')),
  attempts integer not null default 0,
  -- when it may next be tried; a claim moves it a lease ahead, so a daemon killed mid-batch leaves
  -- its claims to be retried when the lease runs out
  next_at timestamptz not null default now(),
  last_status integer,
  last_latency_ms integer,
  last_error text,
  done_at timestamptz,
  primary key (event_id, endpoint_id),
  check ((status = 'pending') = (done_at is null))
);
create index deliveries_due on deliveries (endpoint_id, next_at) where status = 'pending';
create index deliveries_order on deliveries (endpoint_id, order_id, event_id) where status = 'pending';

-- Every attempt, with its HTTP status (null when none came back) and latency (not pruned yet:
-- docs/events.md).
create table delivery_attempts (
  id bigint generated always as identity primary key,
  event_id bigint not null,
  endpoint_id text not null,
  attempt integer not null,
  at timestamptz not null default now(),
  status integer,
  latency_ms integer not null,
  error text
);
create index delivery_attempts_event on delivery_attempts (event_id, endpoint_id);
create index delivery_attempts_at on delivery_attempts (at);
