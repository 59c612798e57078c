// An `admission: draw` sale sells through its draw alone: the draw loop reserves each winner's unit
// itself (shared/admission/draw/steps.ts, the gate `draw`), which no request can carry, so purchase.lua
// refuses every purchase through the API (draw_sale).
import type { PurchaseRule } from './rule.js';

export const drawOnly: PurchaseRule = {
  doors: ['purchase'],
  applies: (sale) => sale.admission === 'draw',
  judge: () => undefined,
  refusals: ['draw_sale'],
};
