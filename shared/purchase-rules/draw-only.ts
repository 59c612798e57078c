// An `admission: draw` sale sells through its draw alone: the draw loop reserves each winner's unit
// itself (shared/draw-steps.ts), so no purchase through the API is ever let in.
import { HttpError } from '../errors.js';
import type { PurchaseRule } from './rule.js';

export const drawOnly: PurchaseRule = {
  doors: ['purchase'],
  applies: (sale) => sale.admission === 'draw',
  judge() {
    throw new HttpError('draw_sale');
  },
  refusals: ['draw_sale'],
};
