// An `admission: queue` sale sells to the buyers its waiting room let in: each holds a pass
// (shared/admission.ts hands them out, shared/challenge.ts signs them). purchase.lua takes it only
// while it is the buyer's latest and unused, and spends it with the reservation.
import { HttpError } from '../errors.js';
import type { PurchaseRule } from './rule.js';

export const admissionPass: PurchaseRule = {
  doors: ['purchase'],
  applies: (sale) => sale.admission === 'queue',
  judge({ carried }) {
    if (carried?.kind !== 'pass') throw new HttpError('admission_pass_required');
    return carried;
  },
  refusals: ['admission_pass_required'],
};
