// Debian's Prometheus (package `prometheus`, which brings `promtool`): the binaries found or a failure
// that says what to install, promtool run to its exit, and a server of a test's own on a free
// loopback port, with its own config and storage in a temporary directory.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { freePort } from '../../tools/local-stack.js';
import { exited } from './cli.js';
import { waitFor } from './fixtures.js';

export const DEPLOY = new URL('../../deploy/', import.meta.url).pathname;

/** The binary's path; throws the install line when it is missing, so the test fails saying it. */
export function binary(name: 'promtool' | 'prometheus'): string {
  const found = (process.env.PATH ?? '')
    .split(delimiter)
    .map((dir) => join(dir, name))
    .find((p) => existsSync(p));
  if (!found)
    throw new Error(
      `${name} is not installed: sudo apt-get install prometheus (Debian's package brings prometheus and promtool)`,
    );
  return found;
}

/** `promtool <args>` to its exit: the code and everything it printed. */
export function promtool(args: string[]): Promise<{ code: number; out: string }> {
  const bin = binary('promtool');
  return new Promise((resolve) => {
    execFile(bin, args, { cwd: DEPLOY, timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err ? (err as { code?: unknown }).code : 0;
      resolve({ code: typeof code === 'number' ? code : -1, out: `${stdout}${stderr}` });
    });
  });
}

export interface PrometheusServer {
  port: number;
  /** The vector a PromQL query returns at this instant. */
  query(promql: string): Promise<{ metric: Record<string, string>; value: [number, string] }[]>;
  /** GET of a path under /api/v1, its `data`. */
  api<T>(path: string): Promise<T>;
  stop(): Promise<void>;
}

/** Starts `prometheus` with `files` (prometheus.yml and whatever it names) written to a fresh directory. */
export async function startPrometheus(files: Record<string, string>): Promise<PrometheusServer> {
  const bin = binary('prometheus');
  const dir = mkdtempSync(join(tmpdir(), 'flashsale-prometheus-'));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  const port = await freePort();
  const child: ChildProcess = spawn(
    bin,
    [
      `--config.file=${join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=error',
    ],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  const api = async <T>(path: string): Promise<T> => {
    const res = await fetch(`http://127.0.0.1:${port}/api/v1/${path}`);
    const body = (await res.json()) as { status: string; data: T; error?: string };
    if (body.status !== 'success') throw new Error(`prometheus ${path}: ${body.error}`);
    return body.data;
  };
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await exited(child);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitFor(
      'prometheus ready',
      async () => {
        if (child.exitCode !== null) throw new Error(`prometheus exited with ${child.exitCode}`);
        return fetch(`http://127.0.0.1:${port}/-/ready`).then(
          (r) => r.ok,
          () => false,
        );
      },
      30_000,
      100,
    );
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    port,
    api,
    stop,
    query: (promql) =>
      api<{ result: { metric: Record<string, string>; value: [number, string] }[] }>(
        `query?query=${encodeURIComponent(promql)}`,
      ).then((d) => d.result),
  };
}
