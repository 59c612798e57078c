// What every long-running process shares: an abortable delay, and a lifecycle that signals
// readiness to PM2, stops gracefully on the first SIGINT/SIGTERM and forces exit on the second.
import { classify } from './errors.js';
import type { Logger } from './logger.js';

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

export interface Stoppable {
  stop(): Promise<void>;
}

/**
 * Starts a service and keeps it until a signal; exits 0 after a clean stop, 2 on a bad setting,
 * 1 if the start or the stop failed or the stop outran its grace. Signals are handled from the
 * first instant: one that arrives during start-up stops the service as soon as it is up.
 */
export function runUntilSignal(start: () => Promise<Stoppable>, logger: Logger, graceMs = 4000): void {
  let stopping = false;
  // Whatever path ends this process without an explicit exit (a promise that never settles and an
  // empty event loop) must not look like success to a supervisor that restarts on failure.
  process.exitCode = 1;
  const started = start();
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    logger.info({ signal }, 'stopping');
    setTimeout(() => {
      logger.error({ graceMs }, 'graceful stop timed out: exiting');
      process.exit(1);
    }, graceMs).unref();
    started.then((service) => service.stop()).then(
      () => {
        logger.info('stopped');
        process.exit(0);
      },
      (err: unknown) => {
        logger.error({ err }, 'stop failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  started.then(
    // PM2 `wait_ready`: we are up only once our connections are.
    () => process.send?.('ready'),
    (err: unknown) => {
      logger.fatal({ err }, `cannot start: ${(err as Error | undefined)?.message ?? String(err)}`);
      // 2: fix the settings; 1: a dependency is unusable (PM2 restarts those after restart_delay).
      setTimeout(() => process.exit(classify(err) === 'client' ? 2 : 1), 50);
    },
  );
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
