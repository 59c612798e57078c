// What every reliability scenario shares: the real processes (`node dist/daemons/cli.js ...`, one
// OS process each), buyers and payers over HTTP, a seeded fault log, invariant checks during and
// after the faults, and the closing figures of each scenario.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { closeSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { connect as netConnect } from 'node:net';
import { join } from 'node:path';
import { delay } from '../../shared/daemon.js';
import { checkInvariants, type Violation } from '../../shared/invariants.js';
import { saleKeys } from '../../shared/keys.js';
import { freePort } from '../../tools/local-stack.js';
import { ADMIN_TOKEN, JWT_SECRET, token, waitFor, type TestEnv } from '../helpers.js';

const CLI = new URL('../../dist/daemons/cli.js', import.meta.url).pathname;

/** Runs a one-shot `flashsale <args>` against the env's servers; resolves with its exit code and output. */
export function cli(env: TestEnv, args: string[], extra: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], {
      env: { ...process.env, DATABASE_URL: env.config.databaseUrl!, REDIS_URL: env.config.redisUrl!, LOG_LEVEL: 'error', NODE_ENV: 'production', ...extra },
      timeout: 60_000,
    }, (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }));
  });
}

export type Kind = 'api' | 'order-writer' | 'expiry-listener' | 'replay';

/** TEST_SEED reproduces a run's fault schedule; otherwise each scenario draws its own and prints it. */
export function scenarioSeed(): number {
  return process.env.TEST_SEED ? Number(process.env.TEST_SEED) : randomInt(1, 1_000_000);
}

/** Prints `seed=` first (the test runner shows it as `# [scenario] seed=...`), then every fault as it is injected, with its time since the start. */
export class FaultLog {
  readonly started = Date.now();
  private readonly byKind = new Map<string, number>();
  faults = 0;

  /** Without a seed: the log of processes shared by several scenarios, until one takes it over. */
  constructor(readonly scenario: string, readonly seed?: number) {
    if (seed !== undefined) console.log(`[${scenario}] seed=${seed} (TEST_SEED=${seed} reproduces this schedule)`);
  }

  fault(what: string): void {
    this.faults++;
    const kind = what.split(/ \(|:|,/)[0]!;
    this.byKind.set(kind, (this.byKind.get(kind) ?? 0) + 1);
    this.note(`FAULT ${what}`);
  }

  /** The faults by kind, e.g. `SIGKILL writer x4, SIGKILL replay x3`. */
  get kinds(): string[] {
    return [...this.byKind].map(([kind, n]) => `${kind} x${n}`);
  }

  note(what: string): void {
    console.log(`[${this.scenario}] t+${String(Date.now() - this.started).padStart(5)}ms ${what}`);
  }
}

interface Proc { kind: Kind; env: Record<string, string>; child: ChildProcess; expectExit: boolean; opsPort: number }

/** The daemons of one scenario, each a separate OS process logging (warn and up) to a file. */
export class Cluster {
  private readonly procs = new Map<string, Proc>();
  readonly unexpectedExits: string[] = [];
  readonly logDir: string;
  apiPort = 0;

  /** `log` may be swapped between scenarios that share the processes. */
  constructor(private readonly env: TestEnv, public log: FaultLog, private readonly base: Record<string, string> = {}) {
    this.logDir = join(env.dataDir, 'logs');
    mkdirSync(this.logDir, { recursive: true });
  }

  /** Starts `flashsale <kind>` as `name` and waits until it reports ready (as PM2's wait_ready does). */
  async start(name: string, kind: Kind, extra: Record<string, string> = {}): Promise<ChildProcess> {
    const prior = this.procs.get(name);
    const opsPort = prior?.opsPort ?? (await freePort());
    if (kind === 'api' && this.apiPort === 0) this.apiPort = await freePort();
    const env: Record<string, string> = {
      DATABASE_URL: this.env.config.databaseUrl!, REDIS_URL: this.env.config.redisUrl!, LOG_LEVEL: 'warn', NODE_ENV: 'production',
      JWT_SECRET, ADMIN_TOKEN, REPLAY_INTERVAL_SECONDS: '1', WRITER_LEASE_MS: '1000', OPS_PORT: String(opsPort),
      ...(kind === 'api' ? { PORT: String(this.apiPort), OPS_PORT: '0' } : {}),
      ...this.base, ...(prior?.env ?? {}), ...extra,
    };
    const out = openSync(join(this.logDir, `${name}.log`), 'a');
    const child = spawn(process.execPath, [CLI, kind], { stdio: ['ignore', out, out, 'ipc'], env: { ...process.env, ...env } });
    closeSync(out);
    const proc: Proc = { kind, env, child, expectExit: false, opsPort };
    this.procs.set(name, proc);
    child.once('exit', (code, signal) => {
      if (!proc.expectExit) this.unexpectedExits.push(`${name} (pid ${child.pid}) exited by itself: code ${code}, signal ${signal}`);
    });
    await new Promise<void>((resolve, reject) => {
      child.on('message', (m) => m === 'ready' && resolve());
      child.once('exit', (code) => reject(new Error(`${name} exited with ${code} before ready; see ${this.logDir}/${name}.log`)));
    });
    return child;
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

  async restart(name: string, extra: Record<string, string> = {}): Promise<void> {
    const proc = this.proc(name);
    if (this.alive(name)) await this.signal(name, 'SIGKILL');
    await this.start(name, proc.kind, extra);
    this.log.note(`restarted ${name} (pid ${this.pid(name)}${extra.WRITER_ID ? `, WRITER_ID=${extra.WRITER_ID}` : ''})`);
  }

  /** Stops every process with SIGTERM and returns their exit codes (0 is a clean stop). */
  async stopAll(): Promise<Record<string, number | null>> {
    const codes: Record<string, number | null> = {};
    await Promise.all([...this.procs.keys()].map(async (name) => {
      if (this.alive(name)) {
        this.proc(name).child.kill('SIGCONT');
        codes[name] = await this.signal(name, 'SIGTERM', true);
      }
    }));
    return codes;
  }

  /** Kills whatever is still running, for after(): a failed test must not leave processes behind. */
  killAll(): void {
    for (const proc of this.procs.values()) {
      proc.expectExit = true;
      if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
    }
  }

  /** Log lines at error level or above (pino level >= 50) a process wrote, across its restarts. */
  errors(name: string): string[] {
    return readFileSync(join(this.logDir, `${name}.log`), 'utf8').split('\n').filter((l) => {
      try {
        return (JSON.parse(l) as { level: number }).level >= 50;
      } catch {
        return false;
      }
    });
  }

  /** A counter's value from a daemon's /metrics (summed over its labels when `labels` is left out). */
  async metric(name: string, series: string, labels?: string): Promise<number> {
    const res = await call(this.opsPort(name), 'GET', '/metrics');
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

export interface Reply {
  status: number;
  body: any;
  headers: Record<string, string | string[] | undefined>;
  ms: number;
  /** A network failure or our own timeout: the client got no HTTP answer. */
  error?: string;
}

const agent = new Agent({ keepAlive: true, maxSockets: 2000 });

/** One HTTP request; it never rejects, and gives up after `timeoutMs` (a hang is an answer too). */
export function call(port: number, method: string, path: string, opts: { body?: unknown; user?: string; headers?: Record<string, string>; timeoutMs?: number; agent?: Agent | false } = {}): Promise<Reply> {
  const payload = opts.body === undefined ? undefined : typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
  const headers: Record<string, string | number> = {
    ...(payload !== undefined ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } : {}),
    ...(opts.user !== undefined ? { authorization: `Bearer ${token(opts.user)}` } : {}),
    ...opts.headers,
  };
  const started = performance.now();
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, method, path, headers, agent: opts.agent ?? agent, timeout: opts.timeoutMs ?? 30_000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let body: unknown = text;
        try { body = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode ?? 0, body, headers: res.headers, ms: performance.now() - started });
      });
      res.on('error', (err) => resolve({ status: 0, body: null, headers: {}, ms: performance.now() - started, error: err.message }));
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${opts.timeoutMs ?? 30_000} ms`)));
    req.on('error', (err: NodeJS.ErrnoException) => resolve({ status: 0, body: null, headers: {}, ms: performance.now() - started, error: err.code ?? err.message }));
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}

export interface RawReply {
  /** 0: the connection closed without a status line. */
  status: number;
  headers: Record<string, string>;
  body: any;
  /** A socket error seen before the close (ECONNRESET, EPIPE). */
  error?: string;
}

/**
 * Writes `text` as it is on a fresh connection and resolves with what came back once the
 * connection closes; it never hangs up by itself, as a slow client would not.
 * `from` is the client address (any of 127.0.0.0/8), so tests can play several clients.
 */
export function rawRequest(port: number, text: string, opts: { from?: string; onWritten?: () => void } = {}): Promise<RawReply> {
  return new Promise((resolve) => {
    const socket = netConnect({ port, host: '127.0.0.1', localAddress: opts.from ?? '127.0.0.1' }, () => {
      socket.write(text, () => opts.onWritten?.());
    });
    const chunks: Buffer[] = [];
    let error: string | undefined;
    socket.on('data', (d: Buffer) => chunks.push(d));
    socket.on('error', (err: NodeJS.ErrnoException) => {
      error = err.code ?? err.message;
    });
    socket.on('close', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      const split = raw.indexOf('\r\n\r\n');
      const head = (split === -1 ? raw : raw.slice(0, split)).split('\r\n');
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head[0] ?? '')?.[1] ?? 0);
      const headers: Record<string, string> = {};
      for (const line of head.slice(1)) {
        const colon = line.indexOf(':');
        if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
      }
      let body: unknown = split === -1 ? '' : raw.slice(split + 4);
      try { body = JSON.parse(body as string); } catch { /* not JSON */ }
      resolve({ status, headers, body, ...(error ? { error } : {}) });
    });
  });
}

/** `201`, `202`, `409 sold_out`, `error ECONNRESET`: one reply as a short outcome label. */
export function outcome(r: Reply): string {
  if (r.error) return `error ${r.error}`;
  const code = r.body && typeof r.body === 'object' ? (r.body.error ?? r.body.status) : undefined;
  return code ? `${r.status} ${code}` : String(r.status);
}

export interface Won { orderId: string; userId: string; qty: number }

export interface ShopperOptions {
  port: number;
  saleId: string;
  rand: () => number;
  /** Buyers are drawn from `${prefix}0 .. ${prefix}(users-1)`, so they come back for more. */
  users: number;
  prefix: string;
  maxQty: number;
  payRatio: number;
  /** A won order is paid this long after the 202 (uniform); past the window it meets order_expired. */
  payDelayMs: [number, number];
  concurrency: number;
  /** Each buyer pauses this long between clicks (uniform; default none). */
  thinkMs?: [number, number];
}

/** Buyers and payers over HTTP, recording every answer so the final state can be held against it. */
export class Shoppers {
  readonly accepted: Won[] = [];
  readonly purchases: Record<string, number> = {};
  /** The last answer each paid order got: `200 paid`, `409 order_expired`, `503 unavailable`, ... */
  readonly payments = new Map<string, string>();
  readonly buyers = new Set<string>();
  private readonly paying = new Set<Promise<void>>();
  private stopping = false;

  constructor(private readonly o: ShopperOptions) {}

  /** Buys until stop() is called; resolves once every buyer in flight has its answer. */
  run(): Promise<void> {
    return Promise.all(Array.from({ length: this.o.concurrency }, () => this.buyer())).then(() => {});
  }

  stop(): void {
    this.stopping = true;
  }

  /** Every payment started, answered. */
  async paid(): Promise<void> {
    while (this.paying.size > 0) await Promise.all([...this.paying]);
  }

  private async buyer(): Promise<void> {
    const { port, saleId, rand, users, prefix, maxQty } = this.o;
    while (!this.stopping) {
      const userId = `${prefix}${Math.floor(rand() * users)}`;
      const qty = 1 + Math.floor(rand() * maxQty);
      this.buyers.add(userId);
      const r = await call(port, 'POST', `/api/sales/${saleId}/purchases`, { body: { qty }, user: userId });
      const label = outcome(r);
      this.purchases[label] = (this.purchases[label] ?? 0) + 1;
      if (r.status === 202) {
        this.accepted.push({ orderId: r.body.orderId, userId, qty });
        if (rand() < this.o.payRatio) this.pay(r.body.orderId, userId, this.o.payDelayMs[0] + rand() * (this.o.payDelayMs[1] - this.o.payDelayMs[0]));
      } else if (r.status === 409 || r.status === 429) {
        await delay(20); // sold out or busy: a real buyer waits a moment before the next click
      } else if (r.status === 0 || r.status >= 500) {
        await delay(50);
      }
      const [min, max] = this.o.thinkMs ?? [0, 0];
      if (max > 0) await delay(min + rand() * (max - min));
    }
  }

  private pay(orderId: string, userId: string, afterMs: number): void {
    const p = (async () => {
      await delay(afterMs);
      for (;;) {
        const r = await call(this.o.port, 'POST', `/api/orders/${orderId}/pay`, { user: userId });
        const label = outcome(r);
        this.payments.set(orderId, label);
        // Still queued (the writer is behind or down): the buyer's page retries.
        if (label !== '409 order_not_ready' && label !== '503 unavailable' && !r.error) return;
        await delay(100);
      }
    })();
    this.paying.add(p);
    void p.finally(() => this.paying.delete(p));
  }
}

/**
 * What each buyer was told must be what happened: a 200 on payment means paid, order_expired
 * means expired, and every order of the sale was answered 202 unless its request got no
 * definite answer. Returns the disagreements (none expected).
 */
export async function answersHold(env: TestEnv, saleId: string, shoppers: Shoppers): Promise<string[]> {
  const rows = await env.pool.query<{ id: string; user_id: string; qty: number; status: string }>(
    'select id, user_id, qty, status from orders where sale_id = $1', [saleId],
  );
  const byId = new Map(rows.rows.map((r) => [r.id, r]));
  const problems: string[] = [];
  for (const [orderId, label] of shoppers.payments) {
    const status = byId.get(orderId)?.status;
    if (label === '200 paid' && status !== 'paid') problems.push(`${orderId}: told paid, is ${status}`);
    if (label === '409 order_expired' && status !== 'expired') problems.push(`${orderId}: told expired, is ${status}`);
  }
  for (const w of shoppers.accepted) {
    const row = byId.get(w.orderId);
    if (!row) problems.push(`${w.orderId}: answered 202, no order`);
    else if (row.user_id !== w.userId || row.qty !== w.qty) problems.push(`${w.orderId}: answered 202 to ${w.userId} x${w.qty}, order is ${row.user_id} x${row.qty}`);
  }
  const told = new Set(shoppers.accepted.map((w) => w.orderId));
  const unanswered = Object.entries(shoppers.purchases).filter(([l]) => l.startsWith('error') || l.startsWith('5')).reduce((n, [, c]) => n + c, 0);
  const extra = rows.rows.filter((r) => !told.has(r.id)).length;
  if (extra > unanswered) problems.push(`${extra} orders nobody was answered 202 for, but only ${unanswered} purchases got no definite answer`);
  return problems;
}

/** Invariant checks while the faults run, every `everyMs`; a check that a server outage interrupts is skipped, not passed. */
export class LiveChecks {
  checks = 0;
  skipped = 0;
  readonly violations: Violation[] = [];
  private stopping = false;
  private readonly running: Promise<void>;

  constructor(env: TestEnv, saleIds: string[], accepted: () => string[], opts: { everyMs: number; graceMs: number }) {
    this.running = (async () => {
      while (!this.stopping) {
        try {
          const r = await checkInvariants(env.pool, env.redis, { saleIds, accepted: accepted(), replayIntervalMs: 1000, graceMs: opts.graceMs });
          this.checks += r.checks;
          this.violations.push(...r.violations);
        } catch {
          this.skipped++;
        }
        await delay(opts.everyMs);
      }
    })();
  }

  stop(): Promise<void> {
    this.stopping = true;
    return this.running;
  }
}

/** Waits until a sale is at rest: nothing queued, nothing pending, every expired order's stock back. */
export async function settle(env: TestEnv, saleId: string, timeoutMs = 40_000): Promise<void> {
  const k = saleKeys(saleId);
  await waitFor(`sale ${saleId} at rest`, async () => {
    if ((await env.redis.hlen(k.queued)) > 0) return false;
    const res = await env.pool.query<{ n: number }>(
      `select count(*)::int as n from orders where sale_id = $1 and (status = 'pending' or (status = 'expired' and restored_at is null))`, [saleId],
    );
    return res.rows[0]!.n === 0;
  }, timeoutMs, 100);
}

export async function orderCount(env: TestEnv, saleId: string, status?: string): Promise<number> {
  const res = await env.pool.query<{ n: number }>(
    `select count(*)::int as n from orders where sale_id = $1 and ($2::text is null or status = $2)`, [saleId, status ?? null],
  );
  return res.rows[0]!.n;
}

/** Resident memory of a process in MiB, from /proc. */
export function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(m[1]) / 1024;
}

export interface Summary {
  scenario: string;
  seed: number;
  buyers: number;
  orders: number;
  faults: number;
  /** What the faults were, e.g. "8 SIGKILL writer, 3 SIGKILL listener". */
  faultKinds: string;
  checks: number;
  violations: number;
}

/** The scenario's closing figures: a summary line, and a record test/run.ts prints in its closing note. */
export function summarize(s: Summary): void {
  console.log(`[${s.scenario}] summary: seed=${s.seed} buyers=${s.buyers} orders=${s.orders} faults=${s.faults} (${s.faultKinds}) checks=${s.checks} violations=${s.violations}`);
  const dir = process.env.FLASHSALE_REPORT_DIR;
  if (dir) writeFileSync(join(dir, `${process.pid}-${s.scenario.replace(/\W+/g, '-')}.json`), JSON.stringify(s));
}
