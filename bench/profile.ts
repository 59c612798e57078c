// Where a process spent its CPU, from a V8 .cpuprofile (`BENCH_CPU_PROF=1 npm run bench` runs each
// process under test with --cpu-prof into bench/results/profiles/<name>-<time>/): the share of busy
// time (idle left out) by package or Node subsystem, then the top functions by self time.
//   node --import tsx bench/profile.ts <file.cpuprofile> [top=30]
import { readFileSync } from 'node:fs';

interface Frame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface Profile {
  nodes: { id: number; callFrame: Frame }[];
  samples: number[];
  timeDeltas: number[];
}

function packageOf(f: Frame): string {
  const url = f.url;
  if (url.includes('node_modules/')) return url.split('node_modules/')[1]!.split('/')[0]!;
  if (url.startsWith('node:')) return `node:${url.slice(5).split('/').at(-1)}`;
  if (url) return url.replace(/^.*\/(dist|bench)\//, '$1/');
  return f.functionName || '(native)';
}

export function summarize(file: string, top = 30): string {
  const p = JSON.parse(readFileSync(file, 'utf8')) as Profile;
  const byId = new Map(p.nodes.map((node) => [node.id, node.callFrame]));
  const byPackage = new Map<string, number>();
  const byFunction = new Map<string, number>();
  let busy = 0;
  p.samples.forEach((id, i) => {
    const f = byId.get(id)!;
    if (f.functionName === '(idle)') return;
    const dt = p.timeDeltas[i] ?? 0;
    busy += dt;
    const pkg = packageOf(f);
    byPackage.set(pkg, (byPackage.get(pkg) ?? 0) + dt);
    const fn = `${f.functionName || '(anonymous)'} ${f.url ? `${pkg}:${f.lineNumber + 1}` : ''}`.trim();
    byFunction.set(fn, (byFunction.get(fn) ?? 0) + dt);
  });
  const list = (m: Map<string, number>, k: number) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, k)
      .map(([name, us]) => `${((us / busy) * 100).toFixed(1).padStart(5)}%  ${name}`);
  return [
    `busy ${(busy / 1e6).toFixed(1)} s`,
    '',
    'by package:',
    ...list(byPackage, 15),
    '',
    'by function (self):',
    ...list(byFunction, top),
  ].join('\n');
}

if (process.argv[1]?.endsWith('profile.ts')) console.log(summarize(process.argv[2]!, Number(process.argv[3] ?? 30)));
