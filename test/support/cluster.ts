// The daemons of a reliability scenario, each a separate OS process (`node dist/daemons/cli.js
// <kind>`) logging to a file of its own, which the scenario kills, pauses and restarts.
import type { ChildProcess } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { freePort } from '../../tools/local-stack.js';
import { ready, spawnCli, type Vars } from './cli.js';
import { testEnv, type TestEnv } from './env.js';
import { http } from './http.js';
import { FaultLog } from './scenario.js';

export type Kind = 'api' | 'order-writer' | 'expiry-listener' | 'replay' | 'admission' | 'events';

/** Every kind once, under its usual name. */
export const EVERY_KIND: [string, Kind][] = [
  ['api', 'api'],
  ['writer', 'order-writer'],
  ['listener', 'expiry-listener'],
  ['replay', 'replay'],
];

interface Proc {
  kind: Kind;
  vars: Vars;
  child: ChildProcess;
  expectExit: boolean;
  opsPort: number;
}

export class Cluster {
  private readonly procs = new Map<string, Proc>();
  readonly unexpectedExits: string[] = [];
  readonly logDir: string;
  apiPort = 0;

  /** `log` may be swapped between scenarios that share the processes. */
  constructor(
    private readonly env: TestEnv,
    public log: FaultLog,
    private readonly base: Vars = {},
  ) {
    this.logDir = join(env.dataDir, 'logs');
    mkdirSync(this.logDir, { recursive: true });
  }

  /** Starts `flashsale <kind>` as `name` and waits until it reports ready (as PM2's wait_ready does). */
  async start(name: string, kind: Kind, extra: Vars = {}): Promise<ChildProcess> {
    const prior = this.procs.get(name);
    const opsPort = prior?.opsPort ?? (await freePort());
    if (kind === 'api' && this.apiPort === 0) this.apiPort = await freePort();
    const vars: Vars = {
      REPLAY_INTERVAL_SECONDS: '1',
      WRITER_LEASE_MS: '1000',
      OPS_PORT: String(opsPort),
      ...(kind === 'api' ? { PORT: String(this.apiPort), OPS_PORT: '0' } : {}),
      ...this.base,
      ...(prior?.vars ?? {}),
      ...extra,
    };
    const out = openSync(join(this.logDir, `${name}.log`), 'a');
    const child = spawnCli(this.env, [kind], vars, out);
    closeSync(out);
    const proc: Proc = { kind, vars, child, expectExit: false, opsPort };
    this.procs.set(name, proc);
    child.once('exit', (code, signal) => {
      if (proc.expectExit) return;
      // With the process's last fatal or error lines: the log goes with the test's data directory.
      // Lines that are not JSON are what Node printed itself (an uncaught exception's stack).
      const last = readFileSync(join(this.logDir, `${name}.log`), 'utf8')
        .split('\n')
        .filter((l) => /"level":(50|60)/.test(l) || (l.trim() !== '' && !l.startsWith('{')))
        .slice(-12);
      this.unexpectedExits.push(
        `${name} (pid ${child.pid}) exited by itself: code ${code}, signal ${signal}${last.length ? `; last errors:\n${last.join('\n')}` : ''}`,
      );
    });
    await ready(child, `${name} (log: ${this.logDir}/${name}.log)`);
    return child;
  }

  /** Starts each [name, kind] at once. */
  async startAll(procs: [string, Kind][] = EVERY_KIND): Promise<void> {
    await Promise.all(procs.map(([name, kind]) => this.start(name, kind)));
  }

  pid(name: string): number {
    return this.proc(name).child.pid!;
  }

  opsPort(name: string): number {
    return this.proc(name).opsPort;
  }

  alive(name: string): boolean {
    const { child } = this.proc(name);
    return child.exitCode === null && child.signalCode === null;
  }

  /** Sends a signal; SIGKILL and SIGTERM wait for the exit. Logged as a fault unless `quiet`. */
  async signal(name: string, signal: NodeJS.Signals, quiet = false): Promise<number | null> {
    const proc = this.proc(name);
    const { child } = proc;
    if (!quiet) this.log.fault(`${signal} ${name} (pid ${child.pid})`);
    if (signal !== 'SIGKILL' && signal !== 'SIGTERM') {
      child.kill(signal);
      return null;
    }
    proc.expectExit = true;
    if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
    const gone = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    child.kill(signal);
    return gone;
  }

  async restart(name: string, extra: Vars = {}): Promise<void> {
    const proc = this.proc(name);
    if (this.alive(name)) await this.signal(name, 'SIGKILL');
    await this.start(name, proc.kind, extra);
    this.log.note(
      `restarted ${name} (pid ${this.pid(name)}${extra.WRITER_ID ? `, WRITER_ID=${extra.WRITER_ID}` : ''})`,
    );
  }

  /** Stops every process with SIGTERM and returns their exit codes (0 is a clean stop). */
  async stopAll(): Promise<Record<string, number | null>> {
    const codes: Record<string, number | null> = {};
    await Promise.all(
      [...this.procs.keys()].map(async (name) => {
        if (this.alive(name)) {
          this.proc(name).child.kill('SIGCONT');
          codes[name] = await this.signal(name, 'SIGTERM', true);
        }
      }),
    );
    return codes;
  }

  /** Kills whatever is still running, for after(): a failed test must not leave processes behind. */
  killAll(): void {
    for (const proc of this.procs.values()) {
      proc.expectExit = true;
      if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
    }
  }

  /** Log lines at error level or above (pino level >= 50, or `level`) a process wrote, across its restarts. */
  errors(name: string, level = 50): string[] {
    return readFileSync(join(this.logDir, `${name}.log`), 'utf8')
      .split('\n')
      .filter((l) => {
        try {
          return (JSON.parse(l) as { level: number }).level >= level;
        } catch {
          return false;
        }
      });
  }

  /** A counter's value from a daemon's /metrics, or the API's own (summed over its labels when `labels` is left out). */
  async metric(name: string, series: string, labels?: string): Promise<number> {
    const res = await http(this.proc(name).kind === 'api' ? this.apiPort : this.opsPort(name), 'GET', '/metrics');
    const text = String(res.body);
    let sum = 0;
    for (const line of text.split('\n')) {
      const m = /^(\w+)(\{[^}]*\})? (\S+)$/.exec(line);
      if (m && m[1] === series && (labels === undefined || m[2] === `{${labels}}`)) sum += Number(m[3]);
    }
    return sum;
  }

  private proc(name: string): Proc {
    const p = this.procs.get(name);
    if (!p) throw new Error(`no process named ${name}`);
    return p;
  }
}

/**
 * A file whose test starts its own cluster, on the log its scenario begins inside the test: a fresh
 * env before the tests; after them, every cluster `cluster` made killed and the servers closed, so
 * a failed test leaves no process behind.
 */
export function fileEnv(): { readonly env: TestEnv; cluster(log: FaultLog, base?: Vars): Cluster } {
  let env: TestEnv | undefined;
  const clusters: Cluster[] = [];
  before(async () => {
    env = await testEnv();
  });
  after(async () => {
    for (const c of clusters) c.killAll();
    await env?.close();
  });
  const made = () => {
    if (!env) throw new Error('fileEnv: the env is made before the tests; ask for it inside one');
    return env;
  };
  return {
    get env() {
      return made();
    },
    cluster(log, base) {
      const c = new Cluster(made(), log, base);
      clusters.push(c);
      return c;
    },
  };
}

/**
 * A file's servers and processes: before its tests, a fresh env and a cluster running `procs`
 * (logging to a FaultLog named `scenario` until a test takes it over), handed to `use`; after
 * them, every process killed and the servers closed.
 */
export function fileCluster(
  scenario: string,
  use: (started: { env: TestEnv; c: Cluster }) => void,
  opts: { base?: Vars; procs?: [string, Kind][] } = {},
): void {
  let started: { env: TestEnv; c: Cluster } | undefined;
  before(async () => {
    const env = await testEnv();
    started = { env, c: new Cluster(env, new FaultLog(scenario), opts.base) };
    use(started);
    await started.c.startAll(opts.procs);
  });
  after(async () => {
    started?.c.killAll();
    await started?.env.close();
  });
}
