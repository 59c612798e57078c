-- Money: a sale has a price, and a payment pays an order only when it brings exactly that.
-- Sales made before this have no price (null): they take any amount, as they always did, until
-- they settle. New sales always have both (shared/sales.ts); the check keeps the two together.
alter table sales add column price bigint check (price > 0);
alter table sales add column currency text check (currency ~ '^[A-Z]{3}$');
alter table sales add constraint sales_price_currency check ((price is null) = (currency is null));

-- Why a payment could not pay its order. Every refund_due row has one, and only those; rows
-- recorded before this get theirs from the order's state now (what decided them then).
alter table payments add column currency text;
alter table payments add column reason text
  check (reason in ('amount_mismatch', 'currency_mismatch', 'order_expired', 'order_cancelled', 'already_paid'));
update payments p set reason = case o.status when 'paid' then 'already_paid' when 'cancelled' then 'order_cancelled' else 'order_expired' end
  from orders o where o.id = p.order_id and p.outcome = 'refund_due';
alter table payments add constraint payments_refund_reason check ((outcome = 'refund_due') = (reason is not null));

-- The signed bytes exactly as they came: text would turn invalid UTF-8 into U+FFFD and could not
-- hold every byte, so a redelivery could not be told from a different body signed under one id.
alter table payments add column raw bytea;
update payments set raw = convert_to(payload, 'UTF8');
alter table payments alter column raw set not null;
alter table payments drop column payload;

-- A refund owed is closed once the money went back: when, and the operator's reference for it.
alter table payments add column refunded_at timestamptz;
alter table payments add column refund_reference text;
alter table payments add constraint payments_refunded_check check (
  (refunded_at is null) = (refund_reference is null) and (refunded_at is null or outcome = 'refund_due'));

-- The open refunds: what `flashsale refunds` lists and the replay counts for the gauge.
drop index payments_refund_due;
create index payments_refund_open on payments (received_at) where outcome = 'refund_due' and refunded_at is null;
