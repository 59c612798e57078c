// What the numbers were measured on: CPU, memory, kernel, versions of everything under test, and
// how busy the machine already was (other work shares these cores; only same-run ratios hold).
import { readFileSync } from 'node:fs';
import { cpus, loadavg, release, totalmem } from 'node:os';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

export interface Machine {
  cpu: string;
  cores: number;
  memoryGb: number;
  kernel: string;
  os: string;
  node: string;
  versions: Record<string, string>;
  loadAvgAtStart: number[];
}

function pkg(name: string): string {
  try {
    return (require(`${name}/package.json`) as { version: string }).version;
  } catch {
    return 'not installed';
  }
}

function osName(): string {
  try {
    return /^PRETTY_NAME="?([^"\n]*)"?/m.exec(readFileSync('/etc/os-release', 'utf8'))?.[1] ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

export function machine(extra: Record<string, string>): Machine {
  return {
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: cpus().length,
    memoryGb: Math.round(totalmem() / 2 ** 30),
    kernel: release(),
    os: osName(),
    node: process.version,
    versions: { fastify: pkg('fastify'), ioredis: pkg('ioredis'), pg: pkg('pg'), bullmq: pkg('bullmq'), ...extra },
    loadAvgAtStart: loadavg().map((l) => Math.round(l * 100) / 100),
  };
}
