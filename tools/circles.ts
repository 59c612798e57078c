// Import circles among our modules: a circle makes the order modules run in depend on which one is
// imported first (a value read before its module has run is undefined), and it joins concepts that
// should stand apart. Every import counts, type-only ones too (`import type`, `export ... from`,
// `import('...')`): a type-only circle is the same tangle of concepts, one edit away from a real one.
// `node --import tsx tools/circles.ts [dir...]` lists them (shared/ and daemons/ by default);
// test/import-circles.test.ts fails while any is left.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import ts from 'typescript';

export const DEFAULT_ROOTS = ['shared', 'daemons'];

function* tsFiles(dir: string): Generator<string> {
  for (const entry of readdirSync(dir).sort()) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) yield* tsFiles(path);
    else if (entry.endsWith('.ts') && !entry.endsWith('.d.ts')) yield path;
  }
}

/** The file a relative specifier names (`./x.js` is `./x.ts` in source), or undefined (a package, or not ours). */
function resolveImport(from: string, spec: string): string | undefined {
  if (!spec.startsWith('.')) return undefined;
  const base = resolve(dirname(from), spec);
  const candidates = [base.replace(/\.(m?)js$/, '.$1ts'), base, `${base}.ts`, join(base, 'index.ts')];
  return candidates.find((c) => c.endsWith('.ts') && existsSync(c) && statSync(c).isFile());
}

/** Each module under `roots` (and any module of ours they import) with the modules it imports, as paths relative to `cwd`. */
export function importGraph(roots: string[], cwd = process.cwd()): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  const pending = roots.flatMap((r) => [...tsFiles(resolve(cwd, r))]);
  while (pending.length > 0) {
    const file = pending.pop()!;
    const name = relative(cwd, file);
    if (graph.has(name)) continue;
    // The compiler's own pre-pass: every import, export-from and import() specifier, type-only ones included.
    const { importedFiles } = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
    const deps = [...new Set(importedFiles.flatMap((f) => resolveImport(file, f.fileName) ?? []))];
    graph.set(
      name,
      deps.map((d) => relative(cwd, d)),
    );
    pending.push(...deps);
  }
  return graph;
}

/**
 * The circles of `graph`, each as the modules in import order, the first repeated at the end, as
 * madge finds them: one per import that leads back into the chain being followed, in a depth-first
 * search from each module in name order. Every tangle of modules that import each other shows at
 * least one of its circles (breaking it may reveal another); none found means none there.
 */
export function findCircles(graph: Map<string, string[]>): string[][] {
  const circles: string[][] = [];
  const seen = new Set<string>();
  const done = new Set<string>();
  const chain: string[] = [];
  const onChain = new Set<string>();
  const visit = (node: string) => {
    chain.push(node);
    onChain.add(node);
    for (const next of [...(graph.get(node) ?? [])].sort()) {
      if (onChain.has(next)) {
        const circle = chain.slice(chain.indexOf(next));
        // The same circle found from another of its modules is one circle.
        const at = circle.indexOf([...circle].sort()[0]!);
        const key = [...circle.slice(at), ...circle.slice(0, at)].join(' > ');
        if (!seen.has(key)) {
          seen.add(key);
          circles.push([...circle, next]);
        }
      } else if (!done.has(next)) visit(next);
    }
    chain.pop();
    onChain.delete(node);
    done.add(node);
  };
  for (const node of [...graph.keys()].sort()) if (!done.has(node)) visit(node);
  return circles;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const roots = process.argv.length > 2 ? process.argv.slice(2) : DEFAULT_ROOTS;
  const circles = findCircles(importGraph(roots));
  for (const c of circles) console.log(c.join(' -> '));
  console.log(`${circles.length} import circle${circles.length === 1 ? '' : 's'} in ${roots.join(', ')}`);
  process.exit(circles.length === 0 ? 0 : 1);
}
