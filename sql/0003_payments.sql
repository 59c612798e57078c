-- Payments as the provider reports them: one row per verified event, keyed by the provider's event
-- id, so a redelivered event collides here and changes nothing. A row exists only once the event
-- is decided, in the same transaction as the order's change:
--   applied:    the order was pending inside its window and this event paid it;
--   refund_due: the order was already closed (expired, past its deadline) or paid by another
--               event; the order and its unit stay as they are and the money is owed back.
create table payments (
  id text primary key,
  order_id text not null references orders (id),
  outcome text not null check (outcome in ('applied', 'refund_due')),
  -- in the currency's minor unit, as the provider sent it (optional in the event)
  amount bigint check (amount >= 0),
  -- the exact bytes that were signed, so the signature can be checked again later
  payload text not null,
  received_at timestamptz not null default now()
);

-- An order is paid by one event at most: a second one is a refund, never a second 'applied'.
create unique index payments_one_applied on payments (order_id) where outcome = 'applied';
create index payments_order on payments (order_id);
create index payments_refund_due on payments (received_at) where outcome = 'refund_due';
