-- Payment events come through providers (shared/payments/provider.ts), each with event ids of its
-- own, so a payment is recorded under `<provider>:<event id>`: two providers' ids never collide,
-- and a row says where its money came from. Every event so far came from the signed webhook (and
-- DIRECT_PAY, which signs its own): its rows take that name, so a redelivery of an old event finds
-- its row and is answered as a duplicate, as before. Nothing refers to payments.id but refunds,
-- which are looked up by it: `flashsale refunds` lists the new ids.
update payments set id = 'signed:' || id;
