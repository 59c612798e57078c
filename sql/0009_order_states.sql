-- An order's states are declared once, in shared/order-states.ts (ORDER_STATES, STATE_RULES,
-- TRANSITIONS). The schema restates them here, and test/order-states.test.ts compares what Postgres
-- holds with the module: a state added there without a migration like this one fails that test.
--   orders_status_check: every state;
--   orders_paid_check:   paid_at is set exactly in the state a payment moves to;
--   orders_closed_check: closed_at is set exactly in the states that give their units back.
-- The same lists as 0004 left them; the paid check gets a name a reader can find.
alter table orders drop constraint orders_status_check;
alter table orders add constraint orders_status_check check (status in ('pending', 'paid', 'expired', 'cancelled'));
alter table orders rename constraint orders_check to orders_paid_check;
alter table orders drop constraint orders_closed_check;
alter table orders add constraint orders_closed_check check ((status in ('expired', 'cancelled')) = (closed_at is not null));
