-- A draw per variant: an entry names the variant wanted and optionally a second choice, and a won
-- entry records the variant its unit is of (shared/admission/draw/draw.ts awardWalk). The ranking
-- stays one over all entries; only the award reads the choices.
alter table draw_entries add column variant text;
alter table draw_entries add column second_choice text;
alter table draw_entries add column sku text;

-- Every entry made before was of a one-variant sale (a draw of several was refused): its variant.
update draw_entries d set variant = v.sku, sku = case when d.status = 'won' then v.sku end
from sale_variants v where v.sale_id = d.sale_id and v.position = 0;

-- A release before this one enters and awards without choices, and may run beside this one while it
-- rolls out: its entry is for the sale's one variant, and its award of that variant.
create function draw_entries_choices() returns trigger language plpgsql as $$
begin
  if new.variant is null then
    new.variant := (select sku from sale_variants where sale_id = new.sale_id order by position limit 1);
  end if;
  if new.status = 'won' and new.sku is null then
    new.sku := new.variant;
  end if;
  return new;
end $$;
create trigger draw_entries_choices before insert or update on draw_entries
  for each row execute function draw_entries_choices();

alter table draw_entries alter column variant set not null;
alter table draw_entries add constraint draw_entries_second_choice check (second_choice <> variant);
alter table draw_entries add constraint draw_entries_won_sku check ((status = 'won') = (sku is not null));
