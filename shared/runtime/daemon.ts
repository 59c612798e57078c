// What every long-running process shares: an abortable delay, retries by what a failure means,
// and a lifecycle that signals readiness to PM2, stops gracefully on the first SIGINT/SIGTERM,
// forces exit on the second, and stops with exit 1 when a service gives up on its own.
import { classify } from './errors.js';
import type { Logger } from './logger.js';
import { countBackendError } from './metrics.js';

export function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** `p`, or a rejection with `message` once `ms` have passed without an answer. */
export function withTimeout<T>(p: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p,
    new Promise<never>((_, rej) => {
      timer = setTimeout(() => rej(new Error(message)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

export interface Stoppable {
  stop(): Promise<void>;
  /** Rejects when the service gives up on its own (a bug that kept failing): the process then stops and exits 1. */
  failed?: Promise<never>;
}

/** A promise that never resolves and rejects on the first `fail(err)`: a service's `failed`. */
export function failureSignal(): { failed: Promise<never>; fail: (err: unknown) => void } {
  let fail: (err: unknown) => void = () => {};
  const failed = new Promise<never>((_, reject) => (fail = reject));
  // Watched by runUntilSignal; a service nobody watches (a test, a benchmark) must not crash the process.
  failed.catch(() => {});
  return { failed, fail };
}

export interface RetryOptions {
  /** Bug-class failures in a row after which the service gives up. */
  maxBugs: number;
  baseMs: number;
  capMs: number;
}

export const RETRY_DEFAULTS: RetryOptions = { maxBugs: 5, baseMs: 100, capMs: 5000 };

/** Exponential backoff from `baseMs`, capped, jittered by +-50% so instances do not retry in step. */
export function backoffMs(attempt: number, baseMs = RETRY_DEFAULTS.baseMs, capMs = RETRY_DEFAULTS.capMs): number {
  return Math.round(Math.min(baseMs * 2 ** attempt, capMs) * (0.5 + Math.random()));
}

/**
 * Retries by what a failure means (errors.ts `classify`). A dependency away (`unavailable`) is
 * waited out without limit. Anything else is a bug: logged with its stack and retried, but only
 * `maxBugs` times in a row; then the service gives up (`giveUp`) so that its process exits 1 and a
 * supervisor restarts it where an operator sees it, rather than failing quietly forever.
 */
export class Retries {
  private failures = 0;
  private bugs = 0;

  constructor(
    private readonly logger: Logger,
    private readonly giveUp: (err: unknown) => void,
    private readonly opts: RetryOptions = RETRY_DEFAULTS,
  ) {}

  succeeded(): void {
    this.failures = 0;
    this.bugs = 0;
  }

  /** Logs and counts a failure; returns how long to wait before trying again, or null once given up. */
  failed(err: unknown, msg: string): number | null {
    countBackendError(err);
    this.failures++;
    const kind = classify(err);
    if (kind !== 'unavailable' && ++this.bugs >= this.opts.maxBugs) {
      this.logger.fatal({ err, failure: kind, bugsInARow: this.bugs }, `${msg}: giving up after ${this.bugs} in a row`);
      this.giveUp(err);
      return null;
    }
    const retryInMs = backoffMs(this.failures, this.opts.baseMs, this.opts.capMs);
    this.logger.error({ err, failure: kind, failures: this.failures, retryInMs }, msg);
    return retryInMs;
  }
}

/**
 * Starts a service and keeps it until a signal; exits 0 after a clean stop, 2 on a bad setting,
 * 1 if the start or the stop failed, the stop outran its grace or the service gave up on its own
 * (`failed`). Signals are handled from the first instant: one that arrives during start-up stops
 * the service as soon as it is up.
 */
export function runUntilSignal(start: () => Promise<Stoppable>, logger: Logger, graceMs = 4000): void {
  let stopping = false;
  // Whatever path ends this process without an explicit exit (a promise that never settles and an
  // empty event loop) must not look like success to a supervisor that restarts on failure.
  process.exitCode = 1;
  const started = start();
  const stopThenExit = (code: 0 | 1) => {
    stopping = true;
    setTimeout(() => {
      logger.error({ graceMs }, 'graceful stop timed out: exiting');
      process.exit(1);
    }, graceMs).unref();
    started
      .then((service) => service.stop())
      .then(
        () => {
          logger.info('stopped');
          process.exit(code);
        },
        (err: unknown) => {
          logger.error({ err }, 'stop failed');
          process.exit(1);
        },
      );
  };
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    logger.info({ signal }, 'stopping');
    stopThenExit(0);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  started.then(
    (service) => {
      service.failed?.catch((err: unknown) => {
        if (stopping) return;
        logger.fatal({ err }, 'the service gave up: stopping with exit 1 for the supervisor to restart it');
        stopThenExit(1);
      });
      // PM2 `wait_ready`: we are up only once our connections are.
      process.send?.('ready');
    },
    (err: unknown) => {
      const code = startRefused(err, logger);
      setTimeout(() => process.exit(code), 50);
    },
  );
}

/**
 * Reports a start that failed and returns the process's exit code: 2, fix the settings (PM2 leaves
 * the app stopped: stop_exit_codes); 1, a dependency is unusable.
 */
export function startRefused(err: unknown, logger: Logger): 1 | 2 {
  const message = `cannot start: ${(err as Error | undefined)?.message ?? String(err)}`;
  // A setting or a server to fix, not a bug to debug: the JSON line (for log shippers) carries the
  // stack only at LOG_LEVEL=debug, and one plain line goes to stderr for the operator (`pm2 logs --err`).
  logger.fatal({ err: logger.isLevelEnabled('debug') ? err : withoutTrace(err) }, message);
  process.stderr.write(`flashsale: ${message}\n`);
  return classify(err) === 'client' ? 2 : 1;
}

/** The error with its type, message and code, its stack only the first line. */
function withoutTrace(err: unknown): unknown {
  if (!(err instanceof Error)) return err;
  const copy = Object.assign(Object.create(Object.getPrototypeOf(err) as object) as Error, err);
  copy.message = err.message;
  copy.stack = `${err.name}: ${err.message}`;
  return copy;
}

/** Closes resources in order, each in its own try, so one failure does not leak the rest. */
export async function closeAll(logger: Logger, steps: [string, () => Promise<unknown> | unknown][]): Promise<void> {
  for (const [name, step] of steps) {
    try {
      await step();
    } catch (err) {
      logger.warn({ err, resource: name }, 'close failed');
    }
  }
}
