-- A sale's admission is a mode of the registry (shared/admission/modes.ts), which the input checks:
-- a new mode must not need a migration for its name. What each mode requires of its own columns
-- stays (sales_queue_settings, sales_draw_settings: a sale of another mode leaves them null).
alter table sales drop constraint sales_admission_check;
alter table sales add constraint sales_admission_name check (admission ~ '^[a-z][a-z0-9-]{0,31}$');
-- A mode says whether its sales have a seed (AdmissionMode.seeded): first come never does.
alter table sales drop constraint sales_seed;
alter table sales add constraint sales_seed check ((seed is null) = (seed_sha256 is null) and (admission <> 'first-come' or seed is null));
