// `flashsale <args>` as a function: the bin (daemons/cli.ts) exits with its code, and a test runs a
// one-shot command in its own process this way instead of starting one.
import yargs from 'yargs';
import { check, draw } from './checks.js';
import { exitCodeFor, StartRefused } from './common.js';
import { events } from './events.js';
import { audit, operator } from './operator.js';
import { orders } from './orders.js';
import { refunds } from './refunds.js';
import { sale } from './sale.js';
import { services } from './services.js';
import { tools } from './tools.js';

/** A refusal of the command line itself (a flag's check, a missing argument): exit 2. */
class UsageError extends Error {}

/**
 * Runs the command; resolves with the exit code of a refusal (2 for bad input or settings, 1 for an
 * unusable dependency), or undefined once it ran: a one-shot command's own code (3 on a violation)
 * is then process.exitCode, and a service has started and keeps its process until a signal. With
 * `start: false` a service whose settings pass is refused instead (exit 1), for a caller that only
 * wants to hear its refusals.
 */
export async function runCli(args: string[], { start = true } = {}): Promise<number | undefined> {
  try {
    // Each command group is a module of daemons/cli/, added in the order the help lists them.
    const cli = [services, check, refunds, tools, draw, sale, orders, operator, audit, events].reduce(
      (y, add) => add(y),
      yargs(args).scriptName('flashsale'),
    );
    await cli
      .demandCommand(1)
      .strict()
      // --help ends the command rather than the process.
      .exitProcess(false)
      .fail((msg, err, y) => {
        // A flag's own check (a number's coerce) fails as a YError: the input's fault, said plainly.
        if (err?.name === 'YError') throw new UsageError(`flashsale: ${err.message}`);
        if (err) throw err;
        throw new UsageError(`${y.help()}\n\n${msg}`);
      })
      .help()
      .parseAsync(args, { startService: start });
    return undefined;
  } catch (err) {
    if (err instanceof StartRefused) return err.code;
    if (err instanceof UsageError) {
      console.error(err.message);
      return 2;
    }
    console.error(`flashsale: ${(err as Error).message}`);
    return exitCodeFor(err);
  }
}
