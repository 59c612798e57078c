-- A draw's tickets no longer tell who entered. Each entry gets a secret (64 hex digits, random),
-- told to the entrant only, and its ticket is sha256(sale id || ':' || buyer || ':' || secret):
-- the published tickets let nobody test whether a known buyer id entered, and each entrant can
-- still check their own. Entries made before this migration have no secret and keep the ticket
-- sha256(sale id || ':' || buyer); their draws verify as before.
alter table draw_entries add column secret text check (secret ~ '^[0-9a-f]{64}$');
