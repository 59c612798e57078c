-- A claim walks an endpoint's due deliveries in the order they came due (next_at, then event_id)
-- and stops at its limit: with event_id in the index the walk needs no sort, so Postgres reads a
-- handful of rows per claim whatever its statistics say (shared/events/deliveries.ts). The index it
-- replaces sorted every due row by event_id first, and on a table not analyzed yet, it also
-- answered the per-order check with a scan of every pending row per row.
drop index deliveries_due;
create index deliveries_due on deliveries (endpoint_id, next_at, event_id) where status = 'pending';
