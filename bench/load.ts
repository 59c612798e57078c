// The load generator: wrk (C, one thread, LuaJIT script that makes every request a new buyer).
// A Node load generator would compete with the server for the same two cores far more than wrk.
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { machineBusyPct, machineTicks, Monitor, type ProcCost, type Watched } from './procstat.js';

const SCRIPT = fileURLToPath(new URL('./wrk/purchase.lua', import.meta.url));
export const WRK_INSTALL = 'sudo apt-get update && sudo apt-get install -y wrk';

/** wrk's version line, or null when it is not installed. */
export function wrkVersion(): string | null {
  const res = spawnSync('wrk', ['--version'], { encoding: 'utf8' });
  if (res.error) return null;
  return /wrk (\S+)/.exec(`${res.stdout}${res.stderr}`)?.[1] ?? 'unknown';
}

export interface LoadResult {
  buyers: number;
  connections: number;
  answered: number;
  seconds: number;
  rps: number;
  statuses: Record<string, number>;
  errors: { connect: number; read: number; write: number; timeout: number };
  latencyMs: { p50: number; p90: number; p99: number; p999: number; max: number; mean: number };
  /** CPU and peak memory of wrk and each process under test during the run. */
  procs: ProcCost[];
  /** The whole machine's CPU busy during the run, % of one core (every process, ours or not; absent in older results). */
  machineCpuPct?: number;
}

interface WrkJson {
  cpu_ticks: number;
  answered: number;
  first_us: number;
  last_us: number;
  statuses: Record<string, number>;
  errors: LoadResult['errors'];
  latency_us: Record<keyof LoadResult['latencyMs'], number>;
}

/**
 * Fires `buyers` distinct buyers (`<prefix>1..N`) at `url` over `connections` keep-alive
 * connections; resolves once every one has an answer. Processes in `watch` are measured meanwhile.
 * `holdMs` (default 1 s): every connection is opened first and the crowd starts together; 0 lets
 * buyers connect while the server is already busy (see bench/wrk/purchase.lua). `script`: another wrk
 * script with the same arguments and report (default bench/wrk/purchase.lua). `idWidth`: every buyer id
 * padded to that many characters; `passesFile`: line n is buyer n's purchase token (a pass); `skus`:
 * buyer n names the variant skus[n mod k].
 */
export async function runLoad(
  url: string,
  opts: {
    buyers: number;
    connections: number;
    prefix: string;
    watch: Watched[];
    holdMs?: number;
    script?: string;
    idWidth?: number;
    passesFile?: string;
    skus?: string[];
  },
): Promise<LoadResult> {
  const hold = opts.holdMs ?? 1000;
  const args = [
    '-t1',
    `-c${opts.connections}`,
    '-d900s',
    '--timeout',
    '30s',
    '-s',
    opts.script ?? SCRIPT,
    url,
    '--',
    String(opts.buyers),
    opts.prefix,
    String(opts.connections),
    String(hold),
    ...(opts.idWidth || opts.passesFile || opts.skus
      ? [String(opts.idWidth ?? 0), opts.passesFile ?? '', ...(opts.skus ? [opts.skus.join(',')] : [])]
      : []),
  ];
  const child = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (c: Buffer) => {
    out += c.toString();
  });
  child.stderr.on('data', (c: Buffer) => {
    out += c.toString();
  });
  const exited = new Promise<number | null>((res) => child.once('exit', (c) => res(c)));
  // wrk would outlive a bench that exits mid-run (its signal handler exits without waiting): up to -d900s.
  const killWrk = () => child.kill('SIGKILL');
  process.once('exit', killWrk);
  void exited.then(() => process.off('exit', killWrk));
  // CPU is counted from the end of the hold, when the crowd starts.
  await new Promise((res) => setTimeout(res, hold));
  const monitor = new Monitor([{ name: 'wrk', pid: child.pid! }, ...opts.watch]);
  monitor.start();
  const machineAtStart = machineTicks();
  const started = performance.now();
  const code = await exited;
  const machineCpuPct = machineBusyPct(machineAtStart, machineTicks());
  const procs = monitor.stop();
  const wallS = (performance.now() - started) / 1000;
  const line = /^BENCH_JSON (.*)$/m.exec(out)?.[1];
  if (!line) throw new Error(`wrk ${args.join(' ')} gave no result (exit ${code}):\n${out}`);
  const r = JSON.parse(line) as WrkJson;
  if (r.answered < opts.buyers) throw new Error(`wrk stopped after ${r.answered} of ${opts.buyers} answers:\n${out}`);
  const seconds = (r.last_us - r.first_us) / 1e6;
  // wrk is gone by now: its CPU comes from its own report, over the whole time it ran.
  const wrk = procs.find((p) => p.name === 'wrk')!;
  wrk.cpuPct = Math.round((r.cpu_ticks / 100 / wallS) * 100);
  const ms = (us: number) => Math.round(us / 100) / 10;
  const l = r.latency_us;
  return {
    buyers: opts.buyers,
    connections: opts.connections,
    answered: r.answered,
    seconds: Math.round(seconds * 100) / 100,
    rps: Math.round(r.answered / seconds),
    statuses: r.statuses,
    errors: r.errors,
    latencyMs: { p50: ms(l.p50), p90: ms(l.p90), p99: ms(l.p99), p999: ms(l.p999), max: ms(l.max), mean: ms(l.mean) },
    procs,
    machineCpuPct,
  };
}
