-- Fair admission. 'first-come' sells to whoever's purchase lands first, as before. 'queue' puts a
-- waiting room in front: buyers join, the admission loop hands out short-lived passes at
-- admit_rate_per_second, never more outstanding than the units left times admit_overbook, and a
-- purchase needs a live pass. 'draw' takes entries between entries_open_at and entries_close_at
-- and gives the first `stock` entrants of a shuffle by `seed` an order each; units that come back
-- go to the next entrants until backfill_until.
alter table sales add column admission text not null default 'first-come' check (admission in ('first-come', 'queue', 'draw'));
alter table sales add column admit_rate_per_second integer check (admit_rate_per_second between 1 and 100000);
alter table sales add column admit_overbook real check (admit_overbook between 1 and 10);
alter table sales add column pass_seconds integer check (pass_seconds between 10 and 3600);
alter table sales add constraint sales_queue_settings check (
  (admission = 'queue') = (admit_rate_per_second is not null and admit_overbook is not null and pass_seconds is not null));
alter table sales add column entries_open_at timestamptz;
alter table sales add column entries_close_at timestamptz;
alter table sales add column backfill_until timestamptz;
alter table sales add constraint sales_draw_window check (
  (admission = 'draw') = (entries_open_at is not null and entries_close_at is not null and backfill_until is not null)
  and (entries_close_at is null or entries_close_at > entries_open_at)
  and (backfill_until is null or backfill_until >= entries_close_at));
-- The random seed of a queue's pre-queue shuffle or a draw's order (64 hex digits), and its
-- sha256, published from the start; a draw's seed is shown only once entries have closed.
alter table sales add column seed text check (seed ~ '^[0-9a-f]{64}$');
alter table sales add column seed_sha256 text check (seed_sha256 ~ '^[0-9a-f]{64}$');
-- A draw's progress: when its ranks were given (entries are refused from then on) and when its
-- backfill ended (the remaining entrants lost; the admission loop stops looking at it).
alter table sales add column drawn_at timestamptz;
alter table sales add column draw_over_at timestamptz;
alter table sales add constraint sales_draw_progress check (
  (drawn_at is null or admission = 'draw') and (draw_over_at is null or drawn_at is not null));
alter table sales add constraint sales_seed check ((admission = 'first-come') = (seed is null) and (seed is null) = (seed_sha256 is null));

-- A draw's entries: one per buyer and sale. `ticket` is sha256(sale id || ':' || buyer) in hex,
-- what the published list shows instead of the buyer; the draw orders entries by
-- sha256(seed || ':' || ticket) (docs in shared/draw.ts). status: entered until the draw, then
-- won (with the order it made) or waiting (next in line for a unit that comes back) and, once
-- backfill is over, lost.
create table draw_entries (
  sale_id text not null references sales (id),
  buyer text not null,
  ticket text not null,
  entered_at timestamptz not null default now(),
  status text not null default 'entered' check (status in ('entered', 'won', 'waiting', 'lost')),
  draw_rank integer,
  order_id text,
  primary key (sale_id, buyer),
  check ((status = 'won') = (order_id is not null)),
  check ((status = 'entered') = (draw_rank is null))
);
create unique index draw_entries_rank on draw_entries (sale_id, draw_rank);
