// One-shot `flashsale` commands run in the test's own process: a process start costs about a second
// of CPU, and most tests of a command are about what it does, not how its process ends. Its own
// module, so that only the files that use it load the CLI.
import { AsyncLocalStorage } from 'node:async_hooks';
import { runCli } from '../../daemons/cli/run.js';
import { cliEnv, type RunResult, type Vars } from './cli.js';
import type { TestEnv } from './env.js';

/** Where the output of the in-process run this async context belongs to goes. */
const capture = new AsyncLocalStorage<{ stdout: string[]; stderr: string[] }>();
for (const [stream, key] of [
  [process.stdout, 'stdout'],
  [process.stderr, 'stderr'],
] as const) {
  const write = stream.write.bind(stream);
  // Only a command's own writes are taken; the test runner's reports pass on to the real stream.
  stream.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    const run = capture.getStore();
    if (!run) return (write as (...a: unknown[]) => boolean)(chunk, ...rest);
    run[key].push(typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString());
    (rest.find((r) => typeof r === 'function') as (() => void) | undefined)?.();
    return true;
  }) as typeof stream.write;
}
let inProcess = Promise.resolve();

/**
 * `cli` of a one-shot command, here: the same environment, output and exit code as its process
 * (daemons/cli.ts exits with runCli's refusal, or the command's process.exitCode). One at a time, since the environment is the process's
 * own. A service is only judged here: its settings' refusal comes back as its process's would, and
 * settings that pass end in exit 1 without starting it (it would keep this process).
 */
export function cliHere(env: TestEnv | undefined, args: string[], vars: Vars = {}): Promise<RunResult> {
  const result = inProcess.then(async () => {
    const saved = { env: { ...process.env }, exitCode: process.exitCode };
    const run = { stdout: [] as string[], stderr: [] as string[] };
    for (const key of Object.keys(process.env)) delete process.env[key];
    for (const [key, value] of Object.entries(cliEnv(env, { LOG_LEVEL: 'error', ...vars })))
      if (value !== undefined) process.env[key] = value;
    process.exitCode = undefined;
    try {
      const refused = await capture.run(run, () => runCli(args, { start: false }));
      const code = refused ?? (typeof process.exitCode === 'number' ? process.exitCode : 0);
      const [stdout, stderr] = [run.stdout.join(''), run.stderr.join('')];
      return { code, stdout, stderr, out: stdout + stderr };
    } finally {
      for (const key of Object.keys(process.env)) delete process.env[key];
      Object.assign(process.env, saved.env);
      process.exitCode = saved.exitCode;
    }
  });
  inProcess = result.then(
    () => {},
    () => {},
  );
  return result;
}
