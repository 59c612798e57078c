// The draw's settings of a sale (admission 'draw'), each refused with another admission and null
// there. The sale's definition (sales/definition.ts) takes them from here, in this order.
// Imports the field helpers alone: the definition reads this file, so it must not reach the draw's routes or steps.
import { time, type SaleDefinition } from '../../sales/field.js';

/** A draw's backfill runs this long after entries close unless backfillUntil says otherwise. */
export const DEFAULT_BACKFILL_MS = 3_600_000;

export const DRAW_FIELDS: Pick<SaleDefinition, 'entriesOpenAt' | 'entriesCloseAt' | 'backfillUntil'> = {
  entriesOpenAt: time('draw only; default: startsAt', {
    column: 'entries_open_at',
    only: 'draw',
    fallback: (s) => s.startsAt!,
    cli: { flag: 'entries-open-at', describe: 'draw: ISO 8601 (default: starts-at)' },
    form: { label: 'Entries open (draw)', testId: 'create-entries-open' },
  }),
  entriesCloseAt: time('draw only, required: after entriesOpenAt, not before startsAt, before endsAt', {
    column: 'entries_close_at',
    only: 'draw',
    required: 'entriesCloseAt is required for admission draw: when entries close and the draw is made',
    rules: [
      (s) => (s.entriesCloseAt! <= s.entriesOpenAt! ? 'entriesCloseAt must be after entriesOpenAt' : undefined),
      (s) =>
        s.entriesCloseAt! < s.startsAt!
          ? 'entriesCloseAt must not be before startsAt: the draw makes its orders when entries close'
          : undefined,
    ],
    cli: { flag: 'entries-close-at', describe: 'draw: ISO 8601, when the draw is made' },
    form: { label: 'Entries close (draw)', testId: 'create-entries-close' },
  }),
  backfillUntil: time('draw only; default: an hour after entriesCloseAt (at most endsAt)', {
    column: 'backfill_until',
    only: 'draw',
    fallback: (s) =>
      new Date(Math.min(s.entriesCloseAt!.getTime() + DEFAULT_BACKFILL_MS, s.endsAt?.getTime() ?? Infinity)),
    rules: [
      (s) => (s.backfillUntil! < s.entriesCloseAt! ? 'backfillUntil must not be before entriesCloseAt' : undefined),
      (s) =>
        s.endsAt && (s.entriesCloseAt! >= s.endsAt || s.backfillUntil! > s.endsAt)
          ? 'entriesCloseAt must be before endsAt, and backfillUntil not after it'
          : undefined,
    ],
    cli: { flag: 'backfill-until', describe: 'draw: ISO 8601 (default: an hour after entries close)' },
    form: { label: 'Backfill until (draw)', testId: 'create-backfill-until' },
  }),
};
