// Finds the Redis calls of a Lua script whose key is not declared: the key argument of every
// redis.call / redis.pcall (or a local alias of one, such as `rcall`) must be a `KEYS[...]`
// expression, or a local bound to one and never bound to anything else. A key built with `..`,
// taken from ARGV, a literal, a function parameter or a table entry is reported. Deliberately
// simple: a tokenizer and the few statement forms our scripts use, strict where it is unsure.

/** Commands that take no key: the argument after the name is not checked. */
const NO_KEY = new Set(['TIME', 'PUBLISH', 'PING', 'ECHO']);

interface Token {
  text: string;
  kind: 'name' | 'string' | 'number' | 'op' | 'nl';
  line: number;
}

function tokenize(src: string): Token[] {
  const out: Token[] = [];
  let line = 1;
  let i = 0;
  const longBracket = (at: number) => /^\[(=*)\[/.exec(src.slice(at));
  while (i < src.length) {
    const c = src[i]!;
    if (c === '\n') {
      out.push({ text: '\n', kind: 'nl', line });
      line++;
      i++;
      continue;
    }
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    if (src.startsWith('--', i)) {
      const long = longBracket(i + 2);
      const end = long ? src.indexOf(`]${long[1]}]`, i) + long[0].length : src.indexOf('\n', i);
      const stop = end < 0 || (long && end < long[0].length) ? src.length : end;
      line += (src.slice(i, stop).match(/\n/g) ?? []).length;
      i = stop;
      continue;
    }
    const long = c === '[' ? longBracket(i) : null;
    if (long) {
      const end = src.indexOf(`]${long[1]}]`, i) + long[0].length;
      out.push({ text: src.slice(i, end), kind: 'string', line });
      line += (src.slice(i, end).match(/\n/g) ?? []).length;
      i = end;
      continue;
    }
    if (c === '"' || c === "'") {
      let j = i + 1;
      while (j < src.length && src[j] !== c) j += src[j] === '\\' ? 2 : 1;
      out.push({ text: src.slice(i, j + 1), kind: 'string', line });
      i = j + 1;
      continue;
    }
    const word = /^[A-Za-z_][A-Za-z0-9_]*/.exec(src.slice(i, i + 200));
    if (word) {
      out.push({ text: word[0], kind: 'name', line });
      i += word[0].length;
      continue;
    }
    const num = /^[0-9][0-9a-fA-FxX.]*/.exec(src.slice(i, i + 100));
    if (num) {
      out.push({ text: num[0], kind: 'number', line });
      i += num[0].length;
      continue;
    }
    const op = /^(\.\.\.|\.\.|==|~=|<=|>=|.)/s.exec(src.slice(i, i + 3))![0];
    out.push({ text: op, kind: 'op', line });
    i += op.length;
  }
  return out;
}

const OPEN: Record<string, string> = { '(': ')', '[': ']', '{': '}' };
/** A line ending with one of these goes on: the expression is not finished. */
const CONTINUES = new Set([
  ',',
  '..',
  '+',
  '-',
  '*',
  '/',
  '%',
  '^',
  '==',
  '~=',
  '<',
  '>',
  '<=',
  '>=',
  'and',
  'or',
  'not',
  '=',
  '(',
  '[',
  '{',
]);

/** A line starting with one of these continues the one before. */
const BINARY = new Set(['..', '+', '-', '*', '/', '%', '^', '==', '~=', '<', '>', '<=', '>=', 'and', 'or', ',']);

/** The expressions of a list starting at `from`, split at top-level commas; ends at a top-level newline not continued, or a closing bracket. */
function expressions(t: Token[], from: number, stopAtClose: boolean): { exprs: Token[][]; end: number } {
  const exprs: Token[][] = [[]];
  let depth = 0;
  let i = from;
  for (; i < t.length; i++) {
    const tok = t[i]!;
    if (tok.kind === 'nl') {
      const cur = exprs[exprs.length - 1]!;
      const last = cur[cur.length - 1];
      let next = i + 1;
      while (t[next]?.kind === 'nl') next++;
      const goesOn = (last && CONTINUES.has(last.text)) || (t[next] && BINARY.has(t[next]!.text));
      if (depth === 0 && !stopAtClose && cur.length > 0 && !goesOn) break;
      continue;
    }
    if (tok.kind === 'op' && OPEN[tok.text]) depth++;
    else if (tok.kind === 'op' && (tok.text === ')' || tok.text === ']' || tok.text === '}')) {
      if (depth === 0) break;
      depth--;
    } else if (depth === 0 && tok.text === ',') {
      exprs.push([]);
      continue;
    }
    exprs[exprs.length - 1]!.push(tok);
  }
  return { exprs: exprs.filter((e, n) => e.length > 0 || n < exprs.length - 1), end: i };
}

/** `KEYS[...]` and nothing else. */
function isKeysIndex(e: Token[]): boolean {
  if (e.length < 4 || e[0]!.text !== 'KEYS' || e[1]!.text !== '[' || e[e.length - 1]!.text !== ']') return false;
  let depth = 0;
  for (let i = 1; i < e.length; i++) {
    if (OPEN[e[i]!.text]) depth++;
    else if (e[i]!.text === ')' || e[i]!.text === ']' || e[i]!.text === '}') depth--;
    if (depth === 0 && i < e.length - 1) return false;
  }
  return true;
}

export interface UndeclaredKey {
  line: number;
  call: string;
}

/** Every call in `src` whose key argument is not declared (empty: every key comes from KEYS). */
export function undeclaredKeys(src: string): UndeclaredKey[] {
  const t = tokenize(src);
  // Every binding of each name: a key name is one bound only ever to KEYS[...].
  const bound = new Map<string, boolean>();
  const bind = (name: string, keyed: boolean) => bound.set(name, (bound.get(name) ?? true) && keyed);
  const callAliases = new Set<string>();
  for (let i = 0; i < t.length; i++) {
    const tok = t[i]!;
    if (tok.text === 'local' && t[i + 1]?.text === 'function') {
      bind(t[i + 2]!.text, false);
      continue;
    }
    if (tok.text === 'function') {
      // Parameters are bound to whatever the caller passes.
      let j = i + 1;
      while (j < t.length && t[j]!.text !== '(') j++;
      for (j++; j < t.length && t[j]!.text !== ')'; j++) if (t[j]!.kind === 'name') bind(t[j]!.text, false);
      continue;
    }
    if (tok.text === 'for') {
      for (let j = i + 1; j < t.length && t[j]!.text !== 'in' && t[j]!.text !== '='; j++)
        if (t[j]!.kind === 'name') bind(t[j]!.text, false);
      continue;
    }
    const isLocal = tok.text === 'local';
    // A (multiple) assignment: names separated by commas, then `=`, at the start of a statement.
    const startsStatement =
      isLocal ||
      (tok.kind === 'name' &&
        (i === 0 || t[i - 1]!.kind === 'nl' || ['then', 'do', 'else', 'end', ';'].includes(t[i - 1]!.text)));
    if (!startsStatement) continue;
    const names: string[] = [];
    let j = isLocal ? i + 1 : i;
    while (
      t[j]?.kind === 'name' &&
      !['function', 'return', 'if', 'for', 'while', 'local', 'end'].includes(t[j]!.text)
    ) {
      names.push(t[j]!.text);
      if (t[j + 1]?.text !== ',') break;
      j += 2;
    }
    if (names.length === 0) continue;
    if (t[j + 1]?.text !== '=') {
      if (isLocal) for (const n of names) bind(n, false);
      continue;
    }
    const { exprs } = expressions(t, j + 2, false);
    names.forEach((n, k) => {
      const e = exprs[k];
      bind(n, e !== undefined && isKeysIndex(e));
      if (
        e &&
        e.length === 3 &&
        e[0]!.text === 'redis' &&
        e[1]!.text === '.' &&
        (e[2]!.text === 'call' || e[2]!.text === 'pcall')
      )
        callAliases.add(n);
    });
  }

  const found: UndeclaredKey[] = [];
  for (let i = 0; i < t.length; i++) {
    let open = -1;
    if (
      t[i]!.text === 'redis' &&
      t[i + 1]?.text === '.' &&
      (t[i + 2]?.text === 'call' || t[i + 2]?.text === 'pcall') &&
      t[i + 3]?.text === '('
    )
      open = i + 3;
    else if (callAliases.has(t[i]!.text) && t[i + 1]?.text === '(' && t[i - 1]?.text !== 'function') open = i + 1;
    if (open < 0) continue;
    const { exprs } = expressions(t, open + 1, true);
    const call = exprs.map((e) => e.map((x) => x.text).join(' ')).join(', ');
    const command = exprs[0];
    const ok = (() => {
      if (command?.length !== 1 || command[0]!.kind !== 'string') return false; // a computed command: cannot tell
      if (NO_KEY.has(command[0]!.text.slice(1, -1).toUpperCase())) return true;
      const key = exprs[1];
      if (!key) return false;
      if (isKeysIndex(key)) return true;
      return key.length === 1 && key[0]!.kind === 'name' && bound.get(key[0]!.text) === true;
    })();
    if (!ok) found.push({ line: t[i]!.line, call });
  }
  return found;
}

/** Indexes of KEYS: the literal ones (`KEYS[3]`), and whether any is computed (`KEYS[4 + i]`, `KEYS[7..]`, `#KEYS`). */
export interface KeysNamed {
  literal: number[];
  variable: boolean;
}

/** The KEYS a script's header (its first `--[[ ]]` comment) lists, and those its code reads. */
export function keysNamed(src: string): { header: KeysNamed; code: KeysNamed } {
  const header: KeysNamed = { literal: [], variable: false };
  const open = src.indexOf('--[[');
  for (const m of (open < 0 ? '' : src.slice(open, src.indexOf(']]', open))).matchAll(/KEYS\[([^\]]*)\]/g)) {
    if (/^\d+$/.test(m[1]!)) header.literal.push(Number(m[1]));
    else header.variable = true;
  }
  const code: KeysNamed = { literal: [], variable: false };
  const t = tokenize(src);
  t.forEach((tok, i) => {
    if (tok.text !== 'KEYS') return;
    if (t[i - 1]?.text === '#') code.variable = true;
    else if (t[i + 1]?.text === '[' && t[i + 2]?.kind === 'number' && t[i + 3]?.text === ']')
      code.literal.push(Number(t[i + 2]!.text));
    else code.variable = true;
  });
  return { header, code };
}

/**
 * Where a script's declared key count (null: one given per call) disagrees with the KEYS its header
 * lists and its code reads (empty: none). The header lists KEYS[1] to KEYS[count] with none left out;
 * a fixed count is the highest key listed and read, and nothing computed; a per-call count lists a
 * computed index after its fixed ones, and reads one.
 */
export function keyCountProblems(src: string, count: number | null): string[] {
  const { header, code } = keysNamed(src);
  const listed = [...new Set(header.literal)].sort((a, b) => a - b);
  const most = (ns: number[]) => Math.max(0, ...ns);
  const problems: string[] = [];
  if (listed.some((n, i) => n !== i + 1))
    problems.push(`the header lists KEYS ${listed.join(', ')}: not 1 to ${most(listed)}`);
  if (count === null) {
    if (!header.variable)
      problems.push('a per-call count, but the header lists no computed KEYS index (KEYS[k+i] or KEYS[k..])');
    if (!code.variable) problems.push('a per-call count, but the script reads no computed KEYS index nor #KEYS');
    if (most(code.literal) > most(listed))
      problems.push(`the script reads KEYS[${most(code.literal)}], the header lists up to KEYS[${most(listed)}]`);
  } else {
    if (header.variable || code.variable)
      problems.push(`${count} keys, but the ${header.variable ? 'header' : 'script'} names a computed KEYS index`);
    if (most(listed) !== count) problems.push(`${count} keys, but the header lists up to KEYS[${most(listed)}]`);
    if (most(code.literal) !== count)
      problems.push(`${count} keys, but the script reads up to KEYS[${most(code.literal)}]`);
  }
  return problems;
}
