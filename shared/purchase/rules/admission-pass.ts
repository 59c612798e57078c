// An `admission: queue` sale sells to the buyers its waiting room let in: each holds a pass
// (shared/admission/loop.ts hands them out, shared/purchase/challenge.ts signs them). The pass goes to
// purchase.lua, which refuses the purchase without one (admission_pass_required), takes it only while
// it is the buyer's latest and unused, and spends it with the reservation.
import type { PurchaseRule } from './rule.js';

export const admissionPass: PurchaseRule = {
  doors: ['purchase'],
  applies: (sale) => sale.admission === 'queue',
  judge: ({ carried }) => (carried?.kind === 'pass' ? carried : undefined),
  refusals: ['admission_pass_required'],
};
