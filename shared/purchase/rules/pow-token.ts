// A `challenge: pow` sale sells to buyers with a purchase token: a proof-of-work challenge solved
// and exchanged (shared/purchase/challenge.ts). The token goes to purchase.lua, which refuses the purchase
// without one (purchase_token_required, in its own order: a sale not yet open says so first) and
// spends it with the reservation: one token, one reservation.
import type { PurchaseRule } from './rule.js';

export const powToken: PurchaseRule = {
  doors: ['purchase'],
  // In a waiting room the challenge is solved to join, and the pass stands in for the token; a draw
  // takes its entrants' the same way.
  applies: (sale) => sale.challenge === 'pow' && (sale.admission ?? 'first-come') === 'first-come',
  judge: ({ carried }) => (carried?.kind === 'token' ? carried : undefined),
  refusals: ['purchase_token_required'],
};
