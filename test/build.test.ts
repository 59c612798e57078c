// `npm run build` compiles only when a TypeScript source changed since the last compile, and copies
// only the assets that changed: a restart (`npm start`) pays for what changed, not for a full build.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { compileNeeded, syncDir } from '../tools/build.js';

/** A project with one source, one Lua script and a tsconfig.json. */
function project(): string {
  const root = mkdtempSync(join(tmpdir(), 'flashsale-build-'));
  mkdirSync(join(root, 'shared', 'lua'), { recursive: true });
  mkdirSync(join(root, 'dist'));
  writeFileSync(join(root, 'shared', 'ids.ts'), 'export const a = 1;\n');
  writeFileSync(join(root, 'shared', 'lua', 'restore.lua'), 'return 1\n');
  writeFileSync(join(root, 'tsconfig.json'), '{}');
  return root;
}
const dated = (path: string, seconds: number) => utimesSync(path, seconds, seconds);

test('build: TypeScript is compiled when there is no build yet or a .ts source (or tsconfig.json) is newer than the last one, never for an asset', () => {
  const root = project();
  for (const f of ['shared/ids.ts', 'shared/lua/restore.lua', 'tsconfig.json']) dated(join(root, f), 1_000);
  assert.equal(compileNeeded(root), true, 'no build yet');
  writeFileSync(join(root, 'dist', '.build-stamp'), '');
  dated(join(root, 'dist', '.build-stamp'), 2_000);
  assert.equal(compileNeeded(root), false, 'nothing changed');
  dated(join(root, 'shared/lua/restore.lua'), 3_000);
  assert.equal(compileNeeded(root), false, 'a Lua script is an asset: copied, not compiled');
  dated(join(root, 'shared/ids.ts'), 3_000);
  assert.equal(compileNeeded(root), true, 'a source changed');
  dated(join(root, 'shared/ids.ts'), 1_000);
  dated(join(root, 'tsconfig.json'), 3_000);
  assert.equal(compileNeeded(root), true, 'the compiler settings changed');
});

test('build: an asset is copied when it is missing or changed, and left alone otherwise', () => {
  const root = project();
  const [from, to] = [join(root, 'shared', 'lua'), join(root, 'dist', 'shared', 'lua')];
  assert.deepEqual(syncDir(from, to), [join(to, 'restore.lua')], 'missing');
  assert.equal(readFileSync(join(to, 'restore.lua'), 'utf8'), 'return 1\n');
  assert.deepEqual(syncDir(from, to), [], 'unchanged');
  writeFileSync(join(from, 'restore.lua'), 'return 2\n');
  dated(join(from, 'restore.lua'), Date.now() / 1000 + 60);
  assert.deepEqual(syncDir(from, to), [join(to, 'restore.lua')], 'edited');
  assert.equal(readFileSync(join(to, 'restore.lua'), 'utf8'), 'return 2\n');
  writeFileSync(join(from, 'restore.lua'), 'return 10\n');
  dated(join(from, 'restore.lua'), 1_000);
  assert.deepEqual(
    syncDir(from, to),
    [join(to, 'restore.lua')],
    'another size, even dated earlier (a checkout of an older version)',
  );
  assert.equal(readFileSync(join(to, 'restore.lua'), 'utf8'), 'return 10\n');
});
