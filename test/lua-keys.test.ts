// Every key a script touches is declared in KEYS: a Redis Cluster routes and checks a script by
// its declared keys only, so a key a script builds itself reads as missing, or fails the script
// half-way, while its slot migrates. The checker (test/support/lua-keys.ts) is shown to catch each
// way of building a key before it is trusted with our scripts. Each script's first line gives its
// key count to the loader (shared/redis/scripts.ts), held here to what its header lists and it reads.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { declaredKeyCount } from '../shared/redis/scripts.js';
import { keyCountProblems, undeclaredKeys } from './support/lua-keys.js';

const LUA_DIR = new URL('../shared/lua/', import.meta.url);
const scripts = readdirSync(LUA_DIR)
  .filter((f) => f.endsWith('.lua'))
  .sort();

test('lua keys: every redis.call in shared/lua/ takes its key from KEYS', () => {
  assert.ok(scripts.length >= 15, `found the scripts (${scripts.join(', ')})`);
  for (const file of scripts) {
    assert.deepEqual(
      undeclaredKeys(readFileSync(new URL(file, LUA_DIR), 'utf8')),
      [],
      `${file}: keys not taken from KEYS`,
    );
  }
});

test('lua keys: each script says how many keys it takes, as its header lists them and it reads them', () => {
  const counts = Object.fromEntries(
    scripts.map((file) => {
      const src = readFileSync(new URL(file, LUA_DIR), 'utf8');
      const count = declaredKeyCount(src, file);
      assert.deepEqual(keyCountProblems(src, count), [], file);
      return [file, count];
    }),
  );
  // The counts the loader reads, as ioredis is told them: the scripts taking a key per order or writer say so.
  assert.equal(counts['purchase.lua'], 14);
  assert.equal(counts['settle_sale.lua'], 15);
  for (const perCall of ['ack.lua', 'restore.lua', 'snapshot.lua', 'touch_due.lua'])
    assert.equal(counts[perCall], null, perCall);
});

test('lua keys: the key count is refused when the header or the script says otherwise', () => {
  const header = (...keys: string[]) =>
    `--[[\n${keys.map((k) => `  KEYS[${k}] a key`).join('\n')}\n]]\nlocal rcall = redis.call\n`;
  const fixed = `${header('1', '2')}rcall('GET', KEYS[1])\nrcall('GET', KEYS[2])`;
  const perCall = `${header('1', '1+i')}for i = 2, #KEYS do rcall('GET', KEYS[i]) end`;
  assert.deepEqual(keyCountProblems(fixed, 2), []);
  assert.deepEqual(keyCountProblems(perCall, null), []);
  const refused = (src: string, count: number | null, why: RegExp) =>
    assert.match(keyCountProblems(src, count).join('; '), why);
  refused(fixed, 3, /3 keys, but the header lists up to KEYS\[2\]; 3 keys, but the script reads up to KEYS\[2\]/);
  refused(
    fixed,
    null,
    /per-call count, but the header lists no computed KEYS index.*per-call count, but the script reads no computed/,
  );
  refused(perCall, 1, /1 keys, but the header names a computed KEYS index/);
  refused(
    `${header('1', '3')}rcall('GET', KEYS[1])\nrcall('GET', KEYS[3])`,
    3,
    /the header lists KEYS 1, 3: not 1 to 3/,
  );
  refused(
    `${header('1')}rcall('GET', KEYS[1])\nrcall('GET', KEYS[2])`,
    1,
    /1 keys, but the script reads up to KEYS\[2\]/,
  );
  assert.throws(() => declaredKeyCount(fixed, 'x.lua'), /x\.lua: the first line must say how many keys it takes/);
  assert.throws(() => declaredKeyCount(`-- keys: 0\n${fixed}`, 'x.lua'), /x\.lua/);
  assert.equal(declaredKeyCount(`-- keys: 2\n${fixed}`, 'x.lua'), 2);
  assert.equal(declaredKeyCount(`-- keys: n\n${perCall}`, 'x.lua'), null);
});

const HEAD = 'local rcall = redis.call\n';
const BAD: Record<string, string> = {
  'a key from ARGV': `${HEAD}return rcall('GET', ARGV[1])`,
  'a key concatenated in the call': `${HEAD}rcall('SET', KEYS[1] .. ':x', 1)`,
  'a local built by concatenation': `${HEAD}local p = ARGV[2]\nlocal seqKey = p .. ':seq'\nreturn rcall('INCR', seqKey)`,
  'a declared key with a suffix': `${HEAD}local k = KEYS[1] .. ':' .. ARGV[1]\nrcall('DEL', k)`,
  'a key built in a loop': `${HEAD}for i = 4, #ARGV do\n  local key = 'prefix:' .. ARGV[i]\n  rcall('SET', key, '1')\nend`,
  'a key local later reassigned': `${HEAD}local k = KEYS[1]\nk = ARGV[1]\nrcall('GET', k)`,
  'a key local declared twice': `${HEAD}local k = KEYS[1]\nlocal k = 'x'\nrcall('GET', k)`,
  'a function parameter': `${HEAD}local function f(key)\n  return rcall('GET', key)\nend\nf(KEYS[1])`,
  'a literal key name': `return redis.call('HGET', 'flashsale:sales', 'x')`,
  'a table entry': `${HEAD}local t = {KEYS[1]}\nreturn rcall('LRANGE', t[1], 0, -1)`,
  'pcall with a built key': `return redis.pcall('GET', KEYS[1] .. ARGV[1])`,
  'a key missing': `${HEAD}rcall('GET')`,
  'a computed command': `${HEAD}rcall(ARGV[1], KEYS[1])`,
  'the second of a multiple local built': `${HEAD}local a, b = KEYS[1], a .. ':b'\nrcall('GET', b)`,
  'a key spanning a line': `${HEAD}local k = KEYS[1]\n  .. ':x'\nrcall('GET', k)`,
};

for (const [what, src] of Object.entries(BAD)) {
  test(`lua keys: the checker flags ${what}`, () => {
    assert.equal(undeclaredKeys(src).length, 1, src);
  });
}

test('lua keys: the checker passes KEYS indexes, locals bound to them, and commands without a key', () => {
  const src = [
    HEAD,
    "--[[ rcall('GET', ARGV[1]) in a comment is not a call ]]",
    "local t = rcall('TIME') -- rcall('GET', 'x')",
    'local a, b, c = KEYS[1], KEYS[2], KEYS[tonumber(ARGV[1])]',
    "rcall('GET', a)",
    "rcall('SET', b, ARGV[1] .. ':v', 'PXAT', 5)",
    'for i = 1, #KEYS - 4 do',
    "  rcall('SET', KEYS[4 + i], '1')",
    'end',
    "rcall('PUBLISH', ARGV[2], 'x')",
    "return redis.call('DEL', c)",
  ].join('\n');
  assert.deepEqual(undeclaredKeys(src), []);
});
