// How a field of a sale's definition is described (shared/sales/definition.ts holds the fields, an
// admission mode's own in its folder, admission/<mode>/fields.ts): what parseSaleInput checks,
// where Postgres and Redis keep it, how the CLI and the form ask for it.
import type { Sale, SaleField, SaleRules } from './model.js';

export type Kind = 'int' | 'number' | 'text' | 'choice' | 'time';
/** A check across fields, run once its field is read: the refusal's message, or undefined. */
type Rule = (sale: Partial<Sale>) => string | undefined;

/** `flashsale sale create --<flag>`; `after`: listed after that field's flag instead of in table order. */
export interface CliFlag {
  flag: string;
  describe?: string;
  demand?: true;
  after?: SaleField;
}
/** An input of the new-sale form; `after`: placed after that field's input instead of in table order. */
export interface FormInput {
  label: string;
  testId: string;
  attrs?: Record<string, string | true>;
  options?: Record<string, string>;
  after?: SaleField;
}

export interface Field<T> {
  kind: Kind;
  /** The input's JSON schema as the OpenAPI document shows it: its limits and default are the ones checked. */
  schema: Record<string, unknown>;
  column: string;
  /** Its name in Redis's meta hash (load_sale.lua); `none` stands there for null (else a null is left out); kept there only for the sales `when` takes, if given. */
  redis?: { name: string; none?: string; when?: (sale: SaleRules) => boolean };
  /** A setting of this admission mode only: refused with another one, null there. */
  only?: string;
  /** Made by the server, never taken as input. */
  made?: (sale: Partial<Sale>) => T | null;
  /** The value of a field left out (or null), from the fields read before it. */
  fallback?: (sale: Partial<Sale>, now: Date) => T | null;
  /** A text field's refusal, missing or wrong. */
  message?: string;
  /** The refusal of a missing value, when it says more than "is required". */
  required?: string;
  /** Said after a number's range in its refusal. */
  hint?: string;
  rules?: Rule[];
  cli?: CliFlag;
  form?: FormInput;
}

/** Every field of Sale, described. */
export type SaleDefinition = { [K in SaleField]: Field<Sale[K]> };

type Spec<T> = Omit<Field<T>, 'kind' | 'schema'> & { schema?: Record<string, unknown> };
export const int = (minimum: number, maximum: number, f: Spec<number>): Field<number> => ({
  ...f,
  kind: 'int',
  schema: { type: 'integer', minimum, maximum, ...f.schema },
});
export const time = (description: string, f: Spec<Date>): Field<Date> => ({
  ...f,
  kind: 'time',
  schema: { type: 'string', format: 'date-time', description, ...f.schema },
});
export const text = (f: Spec<string>): Field<string> => ({
  ...f,
  kind: 'text',
  schema: { type: 'string', ...f.schema },
});
export const choice = <const V extends readonly string[]>(values: V, f: Spec<V[number]>): Field<V[number]> => ({
  ...f,
  kind: 'choice',
  schema: { type: 'string', enum: values, ...f.schema },
});
