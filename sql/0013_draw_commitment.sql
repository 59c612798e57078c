-- What a draw committed to when it was made: how many entries it ranked and sha256 of their
-- tickets in draw order, joined by ':' (shared/draw.ts entriesDigest). `flashsale draw verify`
-- recomputes both from the entries recorded now, so an entry deleted afterwards (a loser from the
-- end of the ranking as much as any other) no longer adds up. Null for draws made before this.
alter table sales add column drawn_entries integer check (drawn_entries >= 0);
alter table sales add column drawn_entries_sha256 text check (drawn_entries_sha256 ~ '^[0-9a-f]{64}$');
alter table sales add constraint sales_drawn_record check (
  (drawn_entries is null) = (drawn_entries_sha256 is null) and (drawn_entries is null or drawn_at is not null));
