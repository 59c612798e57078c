// What every reliability scenario shares around its faults: a seed it prints (TEST_SEED replays
// it), a log of each fault as it is injected, invariant checks during and after, and the closing
// figures that test/run.ts prints in its table.
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { delay } from '../../shared/runtime/daemon.js';
import { checkInvariants, type InvariantReport, type Violation } from '../../shared/checks/invariants.js';
import type { Vars } from './cli.js';
import type { Cluster } from './cluster.js';
import type { TestEnv } from './env.js';
import { orderCount, seededRandom, written } from './fixtures.js';
import { answersFromNow } from './http.js';

/**
 * Idle polling at 100 ms for a scenario's daemons (the writer's default is 20 ms, the scenarios'
 * nudge 50 ms): an idle writer pass and a listener nudge each run one script per registered sale,
 * and a file's sales stay registered to its end, so each later test pays for every sale before it,
 * on every master. A queued purchase is still picked up within 100 ms and a due expiry key touched
 * within 100 ms, well inside the 1 s of lateness the scenarios allow.
 */
export const QUIET_POLLING: Vars = { WRITER_IDLE_MS: '100', EXPIRY_NUDGE_MS: '100' };

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
  constructor(
    readonly scenario: string,
    readonly seed?: number,
  ) {
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

/**
 * A scenario's seed, its fault log (which the cluster, if given, logs to from now on), its seeded
 * randomness, and what its requests are answered from now on, by status.
 */
export function beginScenario(
  scenario: string,
  cluster?: Cluster,
): { seed: number; log: FaultLog; rand: () => number; answers: () => Record<string, number> } {
  const seed = scenarioSeed();
  const log = new FaultLog(scenario, seed);
  if (cluster) cluster.log = log;
  return { seed, log, rand: seededRandom(seed), answers: answersFromNow() };
}

/**
 * Prints how many of the scenario's requests got each status and asserts that none got 500: a
 * server dying, failing over or restarting is `503 unavailable`, never the answer kept for a bug.
 */
export function assertNo500(scenario: string, answers: Record<string, number>): void {
  console.log(`[${scenario}] answers by status: ${JSON.stringify(answers)}`);
  assert.equal(
    answers['500'] ?? 0,
    0,
    `${scenario}: ${answers['500']} requests answered 500 (the api log's "request failed: a bug" lines say what they met)`,
  );
}

/**
 * The kill-master scenarios' runs: buyers at concurrency 50 and 200, one seed each; SOAK_SEEDS
 * (`npm run test:soak`: 3) repeats each with that many seeds, each drawn and printed.
 */
export function killMasterRuns(topology: string): { concurrency: number; scenario: string; title: string }[] {
  const seeds = Number(process.env.SOAK_SEEDS ?? 1);
  return [50, 200].flatMap((concurrency) =>
    Array.from({ length: seeds }, (_, i) => ({
      concurrency,
      scenario: `${topology}/kill-master-c${concurrency}${i > 0 ? `#${i + 1}` : ''}`,
      title: `at concurrency ${concurrency}${i > 0 ? ` (seed ${i + 1} of ${seeds})` : ''}`,
    })),
  );
}

/** Every invariant of one sale (all sales without one) at rest, with the purchases answered 202 if known. */
export function checkSale(env: TestEnv, saleId: string | undefined, accepted?: string[]): Promise<InvariantReport> {
  return checkInvariants(env.pool, env.redis, {
    saleIds: saleId === undefined ? undefined : [saleId],
    accepted,
    replayIntervalMs: 1000,
  });
}

/**
 * Once every accepted purchase is written: exactly one order per 202 (`message` says for what none
 * is expected), every invariant holds, and no process exited by itself.
 */
export async function assertAcceptedHeld(
  env: TestEnv,
  c: Cluster,
  saleId: string,
  accepted: string[],
  message: string,
): Promise<InvariantReport> {
  await written(env, saleId);
  assert.equal(await orderCount(env, saleId), accepted.length, message);
  const report = await checkSale(env, saleId, accepted);
  assert.deepEqual(report.violations, []);
  assert.deepEqual(c.unexpectedExits, []);
  return report;
}

/** Invariant checks while the faults run, every `everyMs`; a check that a server outage interrupts is skipped, not passed. */
export class LiveChecks {
  checks = 0;
  skipped = 0;
  readonly violations: Violation[] = [];
  private stopping = false;
  private readonly running: Promise<void>;

  constructor(
    env: TestEnv,
    saleIds: string[],
    accepted: () => string[],
    opts: { everyMs: number; graceMs: number | (() => number) },
  ) {
    this.running = (async () => {
      while (!this.stopping) {
        try {
          const r = await checkInvariants(env.pool, env.redis, {
            saleIds,
            accepted: accepted(),
            replayIntervalMs: 1000,
            graceMs: typeof opts.graceMs === 'number' ? opts.graceMs : opts.graceMs(),
          });
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

/** Checks and violations summed over reports (live checks and final ones), for a summary. */
export function tally(...reports: { checks: number; violations: unknown[] }[]): { checks: number; violations: number } {
  return {
    checks: reports.reduce((n, r) => n + r.checks, 0),
    violations: reports.reduce((n, r) => n + r.violations.length, 0),
  };
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
  /** The scenario's requests by the status they got, where it counts them. */
  answers?: Record<string, number>;
  /** Where the scenario delivers events: those received by type, and `again`, how many came more than once. */
  events?: Record<string, number>;
}

/** The scenario's closing figures: a summary line, and a record test/run.ts prints in its closing note. */
export function summarize(s: Summary): void {
  console.log(
    `[${s.scenario}] summary: seed=${s.seed} buyers=${s.buyers} orders=${s.orders} faults=${s.faults} (${s.faultKinds}) checks=${s.checks} violations=${s.violations}${s.events ? ` events=${JSON.stringify(s.events)}` : ''}`,
  );
  const dir = process.env.FLASHSALE_REPORT_DIR;
  if (dir) writeFileSync(join(dir, `${process.pid}-${s.scenario.replace(/\W+/g, '-')}.json`), JSON.stringify(s));
}
