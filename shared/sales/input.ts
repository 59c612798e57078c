// A sale definition as POST /api/sales and `flashsale sale create` take it, checked field by field
// as SALE_DEFINITION describes them: each refusal is `invalid_sale` naming the field.
import { HttpError } from '../runtime/errors.js';
import { CHECK_ORDER, SALE_DEFINITION, SALE_FIELDS, type Sale, type SaleField } from './definition.js';
import type { Field } from './field.js';
import { defaultVariants, parseVariants } from './variants.js';

function invalid(message: string): never {
  throw new HttpError('invalid_sale', message);
}

const unchecked = SALE_FIELDS.filter((k) => !(CHECK_ORDER as readonly string[]).includes(k));
if (unchecked.length > 0) throw new Error(`sales/definition.ts: add ${unchecked.join(', ')} to CHECK_ORDER`);

// Years a sale may start or end in. Redis keeps "no end" as endsAt 0, so a real end must lie well
// after 1970, and a typo such as 0026 must be refused rather than read as the year 26.
const YEARS = { min: 2000, max: 9999 };

export function readTime(key: string, v: unknown): Date {
  const message = `${key} must be an ISO 8601 date-time, e.g. 2026-12-01T10:00:00Z`;
  const m = typeof v === 'string' ? /^(\d{4})-(\d\d)-(\d\d)T/.exec(v) : null;
  if (!m) invalid(message);
  // Without a zone, Date reads the time in the server's own zone: the same input would mean
  // different instants on different hosts.
  if (!/(?:Z|[+-]\d\d:\d\d)$/i.test(m.input)) {
    invalid(`${key} must end with Z or an offset such as +02:00, e.g. 2026-12-01T10:00:00Z`);
  }
  const d = new Date(m.input);
  if (Number.isNaN(d.getTime())) invalid(message);
  // Date rolls a day the month lacks (2026-02-30) over into the next month; refuse it instead.
  const [year, month, date] = [Number(m[1]), Number(m[2]) - 1, Number(m[3])];
  const day = new Date(0);
  day.setUTCFullYear(year, month, date);
  if (day.getUTCMonth() !== month || day.getUTCDate() !== date) invalid(message);
  const utcYear = d.getUTCFullYear();
  if (utcYear < YEARS.min || utcYear > YEARS.max) {
    invalid(`${key} must fall in the years ${YEARS.min} to ${YEARS.max} (UTC), e.g. 2026-12-01T10:00:00Z`);
  }
  return d;
}

/** One field's value: the input's, checked, or its default; a refusal names the field. */
function read(key: SaleField, f: Field<unknown>, given: unknown, sale: Partial<Sale>, now: Date): unknown {
  const {
    minimum,
    maximum,
    pattern,
    maxLength,
    default: fallback,
  } = f.schema as { minimum: number; maximum: number; pattern?: string; maxLength?: number; default?: unknown };
  // A time left out takes its fallback, or stays null (no end) unless required.
  if (f.kind === 'time') {
    const v = given === undefined || given === null ? (f.fallback?.(sale, now) ?? null) : readTime(key, given);
    if (v === null && f.required) invalid(f.required);
    return v;
  }
  const v = given ?? fallback ?? f.fallback?.(sale, now);
  // A nullable number left out is null (no such limit); any other left out is refused below.
  if (v === null && f.schema.nullable && (given === undefined || given === null)) return null;
  if (f.kind === 'text') {
    const ok =
      typeof v === 'string' &&
      v.trim() !== '' &&
      v.length <= (maxLength ?? Infinity) &&
      (pattern === undefined || new RegExp(pattern).test(v));
    if (!ok) invalid(f.message!);
    return v;
  }
  if (f.kind === 'choice') {
    const values = f.schema.enum as string[];
    if (!values.includes(v as string)) invalid(`${key} must be one of ${values.join(', ')}`);
    return v;
  }
  if (v === undefined || v === null) invalid(f.required ?? `${key} is required`);
  if (f.kind === 'int' && (typeof v !== 'number' || !Number.isSafeInteger(v) || v < minimum || v > maximum)) {
    invalid(`${key} must be an integer from ${minimum} to ${maximum}`);
  }
  if (typeof v !== 'number' || !Number.isFinite(v) || v < minimum || v > maximum) {
    invalid(`${key} must be a number from ${minimum} to ${maximum}${f.hint ? ` (${f.hint})` : ''}`);
  }
  return v;
}

const ONLY = SALE_FIELDS.filter((k) => SALE_DEFINITION[k].only);

const FIELD_WORD = new RegExp(`(?<![\\w-])(?:${SALE_FIELDS.join('|')})(?![\\w-])`, 'g');

/**
 * A refusal's message with each field it names said as `name` says it: the CLI's flags. The API
 * answers in its JSON field names; a field `name` has no word for keeps its own.
 */
export function fieldsRenamed(message: string, name: (field: SaleField) => string | undefined): string {
  return message.replace(FIELD_WORD, (key) => name(key as SaleField) ?? key);
}

/** Checks a sale definition as POST /api/sales and `sale create` take it. */
export function parseSaleInput(body: unknown, now = new Date()): Sale {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) invalid('the body must be a JSON object');
  const b = body as Record<string, unknown>;
  const unknown = Object.keys(b).filter((k) => k !== 'variants' && !(SALE_FIELDS as string[]).includes(k));
  if (unknown.length > 0) invalid(`unknown field(s): ${unknown.join(', ')}`);
  // Read first: the sale's stock defaults to their sum.
  const variants = parseVariants(b.variants);
  const sale: Record<string, unknown> = { variants };
  for (const key of CHECK_ORDER) {
    const f: Field<unknown> = SALE_DEFINITION[key];
    if (f.only && f.only !== sale.admission) {
      sale[key] = null;
      continue;
    }
    sale[key] = read(key, f, b[key], sale, now);
    for (const rule of f.rules ?? []) {
      const refusal = rule(sale);
      if (refusal) invalid(refusal);
    }
    // A setting of another admission is refused rather than ignored.
    if (key === 'admission') refuseStray(b, sale.admission as string);
  }
  for (const key of Object.keys(SALE_DEFINITION) as SaleField[]) {
    const made = SALE_DEFINITION[key].made;
    if (made) sale[key] = made(sale);
  }
  if (variants) {
    const sum = variants.reduce((n, v) => n + v.stock, 0);
    if (sale.stock !== sum)
      invalid(`stock (${sale.stock}) must be the sum of the variants' stock (${sum}), or left out`);
  }
  sale.variants = variants ?? defaultVariants(sale.name as string, sale.stock as number);
  return sale as unknown as Sale;
}

function refuseStray(b: Record<string, unknown>, admission: string): void {
  const stray = ONLY.filter((k) => SALE_DEFINITION[k].only !== admission && b[k] !== undefined);
  if (stray.length > 0) invalid(`${stray.join(', ')} apply only to admission ${SALE_DEFINITION[stray[0]!].only}`);
}
