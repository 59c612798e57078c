-- Who may buy, beyond holding a token, a pass or a draw's win: 'verified-email' sells only to
-- buyers whose identity provider says their email is verified (the token's email_verified claim;
-- shared/purchase-rules/verified-email.ts). Every sale before this one sold to anyone.
alter table sales add column buyers text not null default 'anyone' check (buyers in ('anyone', 'verified-email'));
