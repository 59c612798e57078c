// A number given as text (a CLI flag) is read as the HTTP API reads numbers: as a JSON number in a
// body (no hex, binary or octal prefix, no leading zero, no trailing dot, no spaces) or as a query's
// limit (plain digits). Number() alone takes "0x10" as 16, "0b11" as 3, " 12" and "12." as 12, "" as 0.
// An exponent (1e3) is refused too: nobody types one on purpose, and a typo must not pass.

/** A whole number: plain decimal digits, no sign, no leading zero. */
export const WHOLE_NUMBER = /^(?:0|[1-9][0-9]*)$/;
/** A whole number, or one with a fraction: digits on both sides of the dot. */
export const DECIMAL_NUMBER = /^(?:0|[1-9][0-9]*)(?:\.[0-9]+)?$/;

/** The number `text` spells, or undefined when it is not one of the forms above (the range is the caller's). */
export function numberFromText(text: string, fraction: boolean): number | undefined {
  if (!(fraction ? DECIMAL_NUMBER : WHOLE_NUMBER).test(text)) return undefined;
  const n = Number(text);
  return Number.isFinite(n) && (fraction || Number.isSafeInteger(n)) ? n : undefined;
}
