// A sale's definition, each field once: its type (Sale, in model.ts), the JSON schema of its input (limits,
// default, doc line), its Postgres column, its name in Redis's meta hash, and how `flashsale sale
// create` and the admin's new-sale form ask for it (SALE_DEFINITION). Read by parseSaleInput
// (sales/input.ts), the OpenAPI schema (http/schemas.ts), the row mapping (sales.ts), load_sale's
// rules (redis/sale-scripts.ts), the CLI's flags (daemons/cli/sale.ts) and the form (http/sale-form.ts): a new
// field is a line in Sale, a row here and its place in CHECK_ORDER, plus a migration for its column.
// An admission mode's own settings are its folder's (admission/room/fields.ts, admission/draw/fields.ts),
// each marked `only` its mode; this table takes them where they are shown.
import { createHash, randomBytes } from 'node:crypto';
import { SALE_ID_PATTERN, SALE_ID_RULE } from '../runtime/ids.js';
import { ADMISSION_LABELS, ADMISSIONS, modeOf } from '../admission/mode.js';
import { DRAW_FIELDS } from '../admission/draw/fields.js';
import { ROOM_FIELDS } from '../admission/room/fields.js';
import { choice, int, text, time, type SaleDefinition } from './field.js';
import { BUYERS, CHALLENGES, type SaleField } from './model.js';

export { ADMISSIONS };
export { BUYERS, CHALLENGES } from './model.js';
export type { Admission, Buyers, Challenge, Sale, SaleField } from './model.js';

/**
 * The most one order may take: the bound of every sale's maxPerOrder and of qty at the API, so
 * purchase.lua, which refuses qty above the sale's maxPerOrder, never needs a bound of its own.
 */
export const MAX_PER_ORDER = 1000;
/** Solved in about 80 ms by Node on this 2-core machine (BENCHMARKS.md section 8); a slow phone takes several times that. */
export const DEFAULT_COMPLEXITY = 50_000;
/** ISO 4217 alphabetic codes as payments carry them: compared exactly, so upper case only. */
export const CURRENCY_PATTERN = /^[A-Z]{3}$/;

// Control characters (C0, DEL, C1) and the bidirectional overrides and isolates: a name shown on
// the buyer's page, the admin's list and a terminal must not reorder or hide the text around it.
// NUL is among them (Postgres text cannot hold it), and an unpaired surrogate would be stored as U+FFFD.
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
export const UNSHOWABLE = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069\p{Cs}]/u;

// Each field of Sale, in the order the OpenAPI document, `sale create --help` and the form show them.
export const SALE_DEFINITION: SaleDefinition = {
  id: text({
    schema: { pattern: SALE_ID_PATTERN.source, description: 'default: generated' },
    column: 'id',
    message: `id must be ${SALE_ID_RULE}`,
    fallback: () => `s-${randomBytes(5).toString('hex')}`,
    cli: { flag: 'id', after: 'backfillUntil' },
    form: {
      label: 'Id',
      testId: 'create-id',
      after: 'name',
      attrs: { placeholder: 'generated', pattern: '[A-Za-z0-9_\\-]{1,64}', spellcheck: 'false' },
    },
  }),
  name: text({
    schema: { minLength: 1, maxLength: 200, description: 'no control characters, bidirectional overrides or isolates' },
    column: 'name',
    message: 'name must be a non-empty string of at most 200 characters',
    rules: [
      (s) =>
        UNSHOWABLE.test(s.name!)
          ? 'name must not contain control characters (U+0000-U+001F, U+007F-U+009F), bidirectional overrides or isolates (U+202A-U+202E, U+2066-U+2069) or unpaired surrogates'
          : undefined,
    ],
    cli: { flag: 'name', demand: true },
    form: { label: 'Name', testId: 'create-name', attrs: { maxlength: '200', required: true } },
  }),
  // With variants, their sum: it may be left out, and must match if given.
  stock: int(1, 10_000_000, {
    schema: { description: 'with variants: their sum (may be left out)' },
    column: 'stock',
    redis: { name: 'stock' },
    required: 'stock is required: the units for sale, or variants with theirs',
    fallback: (s) => (s.variants ? s.variants.reduce((n, v) => n + v.stock, 0) : null),
    cli: { flag: 'stock', demand: true, describe: 'with --variants: their sum' },
    form: { label: 'Stock', testId: 'create-stock', attrs: { min: '1', step: '1', required: true } },
  }),
  price: int(1, 1_000_000_000_000, {
    schema: { description: "one unit, in the currency's minor unit (cents for EUR)" },
    column: 'price',
    cli: { flag: 'price', demand: true, describe: "one unit, in the currency's minor unit (cents for EUR)" },
    form: {
      label: 'Price (minor units, e.g. cents)',
      testId: 'create-price',
      attrs: { min: '1', step: '1', required: true },
    },
  }),
  currency: text({
    schema: { pattern: CURRENCY_PATTERN.source, description: 'ISO 4217, three upper-case letters' },
    column: 'currency',
    message: 'currency is required: an ISO 4217 code of three upper-case letters, e.g. EUR',
    cli: { flag: 'currency', demand: true, describe: 'ISO 4217 code, e.g. EUR' },
    form: {
      label: 'Currency',
      testId: 'create-currency',
      attrs: { placeholder: 'EUR', pattern: '[A-Z]{3}', maxlength: '3', spellcheck: 'false', required: true },
    },
  }),
  perUserLimit: int(1, 1000, {
    schema: { default: 1 },
    column: 'per_user_limit',
    redis: { name: 'perUser' },
    cli: { flag: 'per-user' },
    form: { label: 'Per-user limit', testId: 'create-per-user', attrs: { min: '1', step: '1', value: '1' } },
  }),
  perVariantLimit: int(1, 1000, {
    schema: { nullable: true, description: 'the most one buyer may hold of any one variant; null: no such limit' },
    column: 'per_variant_limit',
    redis: { name: 'perVariant' },
    fallback: () => null,
    rules: [
      (s) =>
        s.perVariantLimit != null && s.perVariantLimit > s.perUserLimit!
          ? `perVariantLimit (${s.perVariantLimit}) must not be above perUserLimit (${s.perUserLimit})`
          : undefined,
    ],
    cli: { flag: 'per-variant', describe: 'the most one buyer may hold of any one variant' },
  }),
  maxPerOrder: int(1, MAX_PER_ORDER, {
    schema: { default: 1, description: 'at most perUserLimit' },
    column: 'max_per_order',
    redis: { name: 'maxPerOrder' },
    // An order above the per-user limit could never be bought: every buyer would be refused it.
    rules: [
      (s) =>
        s.maxPerOrder! > s.perUserLimit!
          ? `maxPerOrder (${s.maxPerOrder}) must not be above perUserLimit (${s.perUserLimit}): raise perUserLimit or lower maxPerOrder`
          : undefined,
    ],
    cli: { flag: 'max-per-order' },
    form: { label: 'Max per order', testId: 'create-max-per-order', attrs: { min: '1', step: '1', value: '1' } },
  }),
  startsAt: time('ISO 8601 with Z or an offset, years 2000-9999; default: now', {
    column: 'starts_at',
    redis: { name: 'startsAt' },
    fallback: (_s, now) => now,
    cli: { flag: 'starts-at', describe: 'ISO 8601' },
    form: { label: 'Starts', testId: 'create-starts' },
  }),
  endsAt: time('ISO 8601 with Z or an offset, after startsAt; null or absent: no end', {
    schema: { nullable: true },
    // purchase.lua reads exactly 0 as "no end".
    column: 'ends_at',
    redis: { name: 'endsAt', none: '0' },
    rules: [(s) => (s.endsAt && s.endsAt <= s.startsAt! ? 'endsAt must be after startsAt' : undefined)],
    cli: { flag: 'ends-at', describe: 'ISO 8601' },
    form: { label: 'Ends', testId: 'create-ends' },
  }),
  paymentWindowSeconds: int(1, 86_400, {
    schema: { default: 300 },
    column: 'payment_window_seconds',
    redis: { name: 'paymentWindow' },
    cli: { flag: 'payment-window', describe: 'seconds (default 300)' },
    form: {
      label: 'Payment window (s)',
      testId: 'create-payment-window',
      after: 'maxPerOrder',
      attrs: { min: '1', step: '1', value: '300' },
    },
  }),
  challenge: choice(CHALLENGES, {
    schema: { default: 'none', description: '`pow`: buyers first solve a proof-of-work challenge' },
    column: 'challenge',
    redis: { name: 'challenge' },
    cli: { flag: 'challenge', describe: 'pow: buyers solve a proof-of-work challenge first (default none)' },
  }),
  challengeComplexity: int(1000, 10_000_000, {
    schema: { default: DEFAULT_COMPLEXITY, description: 'about how many hashes a challenge takes' },
    column: 'challenge_complexity',
    cli: { flag: 'challenge-complexity', describe: 'about how many hashes a challenge takes (default 50000)' },
  }),
  buyers: choice(BUYERS, {
    schema: {
      default: 'anyone',
      description: '`verified-email`: only buyers whose token carries `email_verified: true`',
    },
    column: 'buyers',
    redis: { name: 'buyers' },
    cli: {
      flag: 'buyers',
      describe: 'verified-email: only buyers whose token carries email_verified: true (default anyone)',
    },
    form: {
      label: 'Buyers',
      testId: 'create-buyers',
      after: 'paymentWindowSeconds',
      options: { anyone: 'Anyone', 'verified-email': 'Verified email only' },
    },
  }),
  // The enum and the options are the registry's own, kept current as modes register.
  admission: choice(ADMISSIONS, {
    schema: { default: 'first-come', description: 'queue: a waiting room in front; draw: entries and a draw' },
    column: 'admission',
    redis: { name: 'admission' },
    cli: {
      flag: 'admission',
      describe: 'queue: a waiting room in front; draw: entries, then a draw (default first-come)',
    },
    form: { label: 'Admission', testId: 'create-admission', options: ADMISSION_LABELS },
  }),
  ...ROOM_FIELDS,
  ...DRAW_FIELDS,
  // In Redis only for a mode whose scripts order by it (the room's pre-queue); a draw's stays in Postgres, the record of the draw.
  seed: text({
    column: 'seed',
    redis: { name: 'seed', when: (s) => Boolean(modeOf(s.admission)?.seedInMeta) },
    made: (s) => (modeOf(s.admission)?.seeded ? randomBytes(32).toString('hex') : null),
  }),
  seedSha256: text({
    column: 'seed_sha256',
    made: (s) => (s.seed ? createHash('sha256').update(s.seed).digest('hex') : null),
  }),
  // Set by the draw itself (shared/admission/draw/steps.ts), read back with the sale: what reveals a draw's seed.
  drawnAt: time('set when the draw is made', { column: 'drawn_at', made: () => null }),
};

/**
 * The order parseSaleInput reads the fields in, as it always has: the first refusal is the one
 * answered, and a field's default or rule may use the fields read before it.
 */
export const CHECK_ORDER = [
  'id',
  'name',
  'startsAt',
  'endsAt',
  'stock',
  'perUserLimit',
  'perVariantLimit',
  'maxPerOrder',
  'price',
  'currency',
  'challenge',
  'buyers',
  'admission',
  'admitOverbook',
  'admitRatePerSecond',
  'passSeconds',
  'entriesOpenAt',
  'entriesCloseAt',
  'backfillUntil',
  'paymentWindowSeconds',
  'challengeComplexity',
] as const satisfies readonly SaleField[];

const ALL = Object.keys(SALE_DEFINITION) as SaleField[];

/** The fields a sale definition may have: POST /api/sales and `sale create` take these. */
export const SALE_FIELDS = ALL.filter((k) => !SALE_DEFINITION[k].made);

/** The fields `sale create` has a flag for (or the form an input for), in the order shown: the table's, each `after` moved behind the field it names. */
export function shownOrder(part: 'cli' | 'form'): SaleField[] {
  const order = ALL.filter((k) => SALE_DEFINITION[k][part] && !SALE_DEFINITION[k][part].after);
  for (const k of ALL) {
    const after = SALE_DEFINITION[k][part]?.after;
    if (after) order.splice(order.indexOf(after) + 1, 0, k);
  }
  return order;
}
