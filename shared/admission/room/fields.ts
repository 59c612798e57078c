// The waiting room's settings of a sale (admission 'queue'), each refused with another admission
// and null there. The sale's definition (sales/definition.ts) takes them from here, in this order.
// Imports the field helpers alone: the definition reads this file, so it must not reach the room's routes or steps.
import { int, type SaleDefinition } from '../../sales/field.js';

export const ROOM_FIELDS: Pick<SaleDefinition, 'admitRatePerSecond' | 'admitOverbook' | 'passSeconds'> = {
  // A queue's defaults: about a pass a second per unit of a 50-unit-a-second sale, 20% no-shows, two minutes to buy.
  admitRatePerSecond: int(1, 100_000, {
    schema: { default: 50, description: 'queue only' },
    column: 'admit_rate_per_second',
    only: 'queue',
    cli: { flag: 'admit-rate', describe: 'queue: passes per second (default 50)' },
    form: {
      label: 'Passes per second (room)',
      testId: 'create-admit-rate',
      attrs: { min: '1', step: '1', placeholder: '50' },
    },
  }),
  admitOverbook: {
    // 1 admits no more buyers than units left; 10 is far past any real no-show rate.
    kind: 'number',
    schema: { type: 'number', minimum: 1, maximum: 10, default: 1.2, description: 'queue only: the no-show allowance' },
    column: 'admit_overbook',
    only: 'queue',
    hint: '1.2 admits 20% more buyers than units left, for no-shows',
    cli: { flag: 'admit-overbook', describe: 'queue: passes outstanding per unit left, for no-shows (default 1.2)' },
    form: {
      label: 'Overbook (room)',
      testId: 'create-admit-overbook',
      attrs: { min: '1', max: '10', step: '0.05', placeholder: '1.2' },
    },
  },
  passSeconds: int(10, 3600, {
    schema: { default: 120, description: 'queue only' },
    column: 'pass_seconds',
    only: 'queue',
    cli: { flag: 'pass-seconds', describe: 'queue: how long a pass buys (default 120)' },
    form: {
      label: 'Pass lifetime, s (room)',
      testId: 'create-pass-seconds',
      attrs: { min: '10', step: '1', placeholder: '120' },
    },
  }),
};
