-- Bot defence per sale: with 'pow' a buyer solves a proof-of-work challenge (about
-- challenge_complexity hashes) and exchanges it, once the sale is open, for a short-lived purchase
-- token the purchase requires. 'none' sells to any authenticated buyer, as before.
alter table sales add column challenge text not null default 'none' check (challenge in ('none', 'pow'));
alter table sales add column challenge_complexity integer not null default 50000 check (challenge_complexity between 1000 and 10000000);
