// `flashsale <args>` as a function: the bin (daemons/cli.ts) exits with its code, and a test runs a
// one-shot command in its own process this way instead of starting one.
import yargs, { type Argv } from 'yargs';
import { exitCodeFor, StartRefused } from './common.js';

type Group = (y: Argv) => Argv;

/**
 * Each command group, a module of daemons/cli/, in the order the help lists them, with the commands
 * it adds. A command loads its own group only: loading them all (the HTTP routes, jose, altcha
 * through the admission modes) was most of a one-shot command's start. Anything not named here
 * (--help, a mistyped command) loads them all, so a name missing here costs time, never a command.
 */
const GROUPS: [commands: string[], load: () => Promise<Group>][] = [
  [
    ['dev', 'servers', 'migrate', 'api', 'order-writer', 'expiry-listener', 'admission', 'replay'],
    async () => (await import('./services.js')).services,
  ],
  [['check'], async () => (await import('./checks.js')).check],
  [['refunds'], async () => (await import('./refunds.js')).refunds],
  [['token', 'loadtest'], async () => (await import('./tools.js')).tools],
  [['draw'], async () => (await import('./checks.js')).draw],
  [['sale'], async () => (await import('./sale.js')).sale],
  [['orders'], async () => (await import('./orders.js')).orders],
  [['operator'], async () => (await import('./operator.js')).operator],
  [['audit'], async () => (await import('./operator.js')).audit],
  [['events'], async () => (await import('./events.js')).events],
];

/** Every command the groups add, by name. */
export const COMMANDS: readonly string[] = GROUPS.flatMap(([commands]) => commands);

/** The groups `args` needs: the one that adds its command, or all of them. */
export function groupsFor(args: string[]): Promise<Group[]> {
  const own = GROUPS.find(([commands]) => commands.includes(args[0] ?? ''));
  return Promise.all((own ? [own] : GROUPS).map(([, load]) => load()));
}

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
    const cli = (await groupsFor(args)).reduce((y, add) => add(y), yargs(args).scriptName('flashsale'));
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
