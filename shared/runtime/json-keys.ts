// A key twice in one JSON object: JSON.parse keeps the last of `{"qty":2,"qty":1}` silently, so a
// body could mean one thing to us and another to any proxy, log or WAF that keeps the first. The
// API's body parser (http/plugins/json-body.ts) and the payment providers (payments/) both refuse it.

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const COMMA = 0x2c;

/**
 * The first key that appears twice in one object of `text`, in text order, or undefined.
 * `text` must be valid JSON (call it after JSON.parse succeeded): the scanner relies on that and
 * only tracks strings, brackets and commas. Keys are compared decoded, so `"q"` and `"\u0071"`
 * are the same key.
 */
export function duplicateKey(text: string): string | undefined {
  // One entry per open bracket: the keys seen so far in an object, null for an array.
  const open: (Set<string> | null)[] = [];
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const start = i + 1;
      let escaped = false;
      for (i = start; text.charCodeAt(i) !== QUOTE; i++) {
        if (text.charCodeAt(i) === BACKSLASH) {
          escaped = true;
          i++; // the escaped character, which may be a quote
        }
      }
      if (!expectKey) continue; // a value
      expectKey = false;
      const key = escaped ? (JSON.parse(text.slice(start - 1, i + 1)) as string) : text.slice(start, i);
      const keys = open[open.length - 1]!;
      if (keys.has(key)) return key;
      keys.add(key);
    } else if (c === OPEN_OBJECT) {
      open.push(new Set());
      expectKey = true;
    } else if (c === OPEN_ARRAY) {
      open.push(null);
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      open.pop();
      expectKey = false;
    } else if (c === COMMA) {
      expectKey = open[open.length - 1] != null;
    }
  }
  return undefined;
}
