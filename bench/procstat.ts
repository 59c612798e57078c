// CPU time and memory of the processes under test, from /proc: what each one cost during a run,
// measured in the same run as its throughput. A "tree" (Postgres) counts the process and its
// children (backends), with proportional set size so shared buffers are not counted per backend.
import { readdirSync, readFileSync } from 'node:fs';
import { cpus } from 'node:os';

const TICKS_PER_S = 100;

export interface Watched {
  name: string;
  pid: number;
  tree?: boolean;
}

function stat(pid: number): { ppid: number; ticks: number; childTicks: number } | null {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    // After the command: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
    return { ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]), childTicks: Number(f[13]) + Number(f[14]) };
  } catch {
    return null;
  }
}

function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    if (stat(Number(d))?.ppid === pid) out.push(Number(d));
  }
  return out;
}

function memKb(pid: number, field: 'Rss' | 'Pss'): number {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

function cpuTicks(w: Watched, members: number[]): number {
  const own = stat(w.pid);
  if (!own) return 0;
  // Reaped children (a backend that exited) land in the parent's cutime/cstime.
  const base = own.ticks + (w.tree ? own.childTicks : 0);
  return base + members.reduce((n, pid) => n + (stat(pid)?.ticks ?? 0), 0);
}

export interface ProcCost {
  name: string;
  cpuPct: number;
  rssMaxMb: number;
}

/** Samples memory every `everyMs` between start() and stop(); CPU is the difference of totals. */
export class Monitor {
  private readonly startTicks = new Map<string, number>();
  private readonly rssMax = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private startedAt = 0;

  constructor(
    private readonly watched: Watched[],
    private readonly everyMs = 500,
  ) {}

  start(): void {
    this.startedAt = performance.now();
    for (const w of this.watched) this.startTicks.set(w.name, cpuTicks(w, w.tree ? childrenOf(w.pid) : []));
    this.sample();
    this.timer = setInterval(() => this.sample(), this.everyMs);
  }

  private sample(): void {
    for (const w of this.watched) {
      const kb = w.tree
        ? [w.pid, ...childrenOf(w.pid)].reduce((n, pid) => n + memKb(pid, 'Pss'), 0)
        : memKb(w.pid, 'Rss');
      this.rssMax.set(w.name, Math.max(this.rssMax.get(w.name) ?? 0, kb));
    }
  }

  stop(): ProcCost[] {
    clearInterval(this.timer);
    this.sample();
    const seconds = (performance.now() - this.startedAt) / 1000;
    return this.watched.map((w) => {
      const ticks = cpuTicks(w, w.tree ? childrenOf(w.pid) : []) - (this.startTicks.get(w.name) ?? 0);
      return {
        name: w.name,
        cpuPct: Math.round((ticks / TICKS_PER_S / seconds) * 100),
        rssMaxMb: Math.round((this.rssMax.get(w.name) ?? 0) / 1024),
      };
    });
  }
}

/**
 * The whole machine's CPU ticks so far, from /proc/stat's `cpu` line (user nice system idle iowait
 * irq softirq steal guest guest_nice): busy is user, nice, system, irq and softirq; the total adds
 * idle, iowait and steal (guest time is already inside user and nice).
 */
export function machineTicks(): { busy: number; total: number } {
  const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const sum = (fields: number[]) => fields.reduce((n, i) => n + (cpu[i] ?? 0), 0);
  return { busy: sum([0, 1, 2, 5, 6]), total: sum([0, 1, 2, 3, 4, 5, 6, 7]) };
}

/**
 * The whole machine's CPU busy between two readings, in the unit of the per-process figures: % of
 * one core, so 2 cores give at most 200%. Every process counts, the other work sharing the machine too.
 */
export function machineBusyPct(from: { busy: number; total: number }, to: { busy: number; total: number }): number {
  const total = to.total - from.total;
  return total > 0 ? Math.round(((to.busy - from.busy) / total) * cpus().length * 100) : 0;
}
