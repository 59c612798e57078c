-- The order writer inserts a thousand orders a statement, and the foreign key to sales checked and
-- share-locked the sale's row once per order (a fifth of the insert's time). The same guarantee,
-- no order without its sale, now costs once per statement: every insert into orders reads the
-- sale's row FOR KEY SHARE (shared/order-queries.ts), and a sale that has orders can be neither
-- deleted nor given another id (this trigger: what the key's ON DELETE/UPDATE RESTRICT did).
alter table orders drop constraint orders_sale_id_fkey;

create function sales_keep_ordered() returns trigger language plpgsql as $$
begin
  if tg_op = 'UPDATE' and new.id = old.id then
    return new;
  end if;
  if exists (select 1 from orders where sale_id = old.id) then
    raise exception 'sale % has orders: it cannot be deleted or given another id', old.id using errcode = '23503';
  end if;
  return case when tg_op = 'DELETE' then old else new end;
end $$;

create trigger sales_keep_ordered before delete or update of id on sales
  for each row execute function sales_keep_ordered();
