// No import circles among our modules (tools/circles.ts): every import counts, type-only ones too.
// The check is first shown to find circles in a tree made with some, then run over shared/ and daemons/.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { DEFAULT_ROOTS, findCircles, importGraph } from '../tools/circles.js';

/** A tree of modules, each given by its path and its source, with the circles it holds. */
function withTree(files: Record<string, string>, check: (root: string) => void): void {
  const root = mkdtempSync(join(tmpdir(), 'flashsale-circles-'));
  try {
    for (const [path, src] of Object.entries(files)) {
      mkdirSync(join(root, path, '..'), { recursive: true });
      writeFileSync(join(root, path), src);
    }
    check(root);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

const TREE = {
  'shared/x.ts': "import { y } from './y.js';\nexport const x = () => y;\n",
  'shared/y.ts': "import { x } from './x.js';\nexport const y = () => x;\n",
  // a -> b -> c -> a by type-only imports and a re-export.
  'shared/a.ts': "import { b } from './b.js';\nexport const a = () => b;\n",
  'shared/b.ts': "import type { A } from './c/c.js';\nexport const b = 1;\nexport type B = A;\n",
  'shared/c/c.ts': "export type { a as A } from '../a.js';\nimport 'node:fs';\nimport { z } from 'some-package';\n",
  // Imports that close no circle: main -> e -> d -> a, main -> d.
  'daemons/main.ts': "import { d } from '../shared/d.js';\nconst later = () => import('../shared/e.js');\n",
  'shared/d.ts': "import { a } from './a.js';\nexport const d = a;\n",
  'shared/e.ts': "import { d } from './d.js';\nexport const e = d;\n",
};

test('import circles: two modules importing each other are a circle, and so are type-only imports and re-exports', () => {
  withTree(TREE, (root) => {
    const graph = importGraph(['shared', 'daemons'], root);
    assert.deepEqual(graph.get('daemons/main.ts'), ['shared/d.ts', 'shared/e.ts'], 'an import() counts');
    assert.deepEqual(graph.get('shared/c/c.ts'), ['shared/a.ts'], 'packages and node: modules are not ours');
    assert.deepEqual(findCircles(graph), [
      ['shared/a.ts', 'shared/b.ts', 'shared/c/c.ts', 'shared/a.ts'],
      ['shared/x.ts', 'shared/y.ts', 'shared/x.ts'],
    ]);
  });
});

test('import circles: a tree whose imports all lead one way has none', () => {
  const { 'shared/y.ts': _y, ...rest } = TREE;
  withTree({ ...rest, 'shared/c/c.ts': "import 'node:fs';\nexport type C = number;\n" }, (root) => {
    assert.deepEqual(findCircles(importGraph(['shared', 'daemons'], root)), []);
  });
});

test('import circles: none in shared/ and daemons/', () => {
  const circles = findCircles(importGraph(DEFAULT_ROOTS, fileURLToPath(new URL('..', import.meta.url))));
  assert.deepEqual(
    circles.map((c) => c.join(' -> ')),
    [],
  );
});
