// A `challenge: pow` sale sells to buyers with a purchase token: a proof-of-work challenge solved
// and exchanged (shared/challenge.ts). purchase.lua spends the token with the reservation: one
// token, one reservation.
import { HttpError } from '../errors.js';
import type { PurchaseRule } from './rule.js';

export const powToken: PurchaseRule = {
  doors: ['purchase'],
  // In a waiting room the challenge is solved to join, and the pass stands in for the token; a draw
  // takes its entrants' the same way.
  applies: (sale) => sale.challenge === 'pow' && (sale.admission ?? 'first-come') === 'first-come',
  judge({ carried }) {
    if (carried?.kind !== 'token') throw new HttpError('purchase_token_required');
    return carried;
  },
  refusals: ['purchase_token_required'],
};
