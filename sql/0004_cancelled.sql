-- Cancellation: the buyer gives a pending or still-queued order back. `cancelled` is final, like
-- `expired`: both are closed (closed_at set) and both give their stock back once, through the same
-- restored set in Redis, recorded in restored_at. A cancelled order is never paid (the paid check
-- still says paid_at only with 'paid').
alter table orders drop constraint orders_status_check;
alter table orders add constraint orders_status_check check (status in ('pending', 'paid', 'expired', 'cancelled'));
alter table orders drop constraint orders_check1;
alter table orders add constraint orders_closed_check check ((status in ('expired', 'cancelled')) = (closed_at is not null));

-- The sweep finishes restores a crash interrupted, of either kind.
drop index orders_unrestored;
create index orders_unrestored on orders (closed_at) where status in ('expired', 'cancelled') and restored_at is null;

-- A buyer's own orders, newest first (GET /api/me/orders), without a scan of every order.
create index orders_user_newest on orders (user_id, purchased_at desc, id desc);
