// The long-running processes (and `migrate`, which readies their schema): each one thin entry in
// daemons/, started here with its flags.
import type { Argv } from 'yargs';
import { createLogger } from '../../shared/runtime/logger.js';
import { migrate } from '../../shared/runtime/migrate.js';
import type { Config } from '../../shared/config/index.js';
import type { Logger } from '../../shared/runtime/logger.js';
import { apiFlags, numberFlag, oneShotConfig, serve, serverFlags, withConnections } from './common.js';

// Each process's module is loaded by its own command only: a one-shot command (migrate, sale,
// check, ...) leaves fastify, PM2 and embedded Postgres unloaded, half the CPU of its start.
const startAdmission = async (c: Config, l: Logger) => (await import('../admission.js')).startAdmission(c, l);
const startApi = async (c: Config, l: Logger) => (await import('../api.js')).startApi(c, l);
const startDev = async (c: Config, l: Logger) => (await import('../dev.js')).startDev(c, l);
const startExpiryListener = async (c: Config, l: Logger) =>
  (await import('../expiry-listener.js')).startExpiryListener(c, l);
const startOrderWriter = async (c: Config, l: Logger) => (await import('../order-writer.js')).startOrderWriter(c, l);
const startReplay = async (c: Config, l: Logger) => (await import('../replay.js')).startReplay(c, l);
const replayPassOnce = async (c: Config, l: Logger) => (await import('../replay.js')).replayPassOnce(c, l);
const startServers = async (c: Config, l: Logger) => (await import('../servers.js')).startServers(c, l);

export const services = (y: Argv) =>
  y
    .command(
      'dev',
      'run the whole service locally with a demo sale (embedded Postgres, redis-server child)',
      (c) =>
        apiFlags(serverFlags(c)).option('data-dir', {
          type: 'string',
          describe: 'where local data lives (default .data)',
        }),
      (argv) => serve({ ...argv, development: true, 'local-stack': true }, startDev, { secrets: true, dev: true }),
    )
    .command(
      'servers',
      'run local Postgres (embedded) and redis-server on fixed ports for the PM2 ecosystem',
      (c) => c.option('data-dir', { type: 'string', describe: 'where local data lives (default .data)' }),
      (argv) => serve(argv, startServers, { secrets: false, dev: false }),
    )
    .command('migrate', 'apply pending sql/ migrations', serverFlags, async (argv) => {
      const applied = await withConnections(argv, async ({ pool }) => migrate(pool));
      console.log(applied.length ? `applied ${applied.join(', ')}` : 'schema up to date');
    })
    .command(
      'api',
      'serve the HTTP API',
      (c) => apiFlags(serverFlags(c)),
      // The API's webhook secret is judged with the others, before anything starts (startApi checks it too).
      (argv) => serve(argv, startApi, { secrets: true, dev: false, webhook: true }),
    )
    .command(
      'order-writer',
      'drain winners into Postgres orders (daemon one)',
      (c) => serverFlags(c).option('batch-size', numberFlag('batch-size')).option('writer-id', { type: 'string' }),
      (argv) => serve(argv, startOrderWriter),
    )
    .command('expiry-listener', 'close unpaid orders on expired events (daemon two)', serverFlags, (argv) =>
      serve(argv, startExpiryListener),
    )
    .command('admission', "admit buyers from waiting rooms at each sale's rate, and make draws", serverFlags, (argv) =>
      serve(argv, startAdmission),
    )
    .command(
      'replay',
      'sweep for missed expirations on a cron schedule',
      (c) =>
        serverFlags(c)
          .option('once', { type: 'boolean', describe: 'one pass, then exit' })
          .option(
            'interval',
            numberFlag('interval', { describe: 'seconds between passes (env REPLAY_INTERVAL_SECONDS, default 5)' }),
          ),
      async (argv) => {
        if (!argv.once) return serve(argv, startReplay);
        const config = oneShotConfig(argv);
        const report = await replayPassOnce(config, createLogger(config));
        process.exitCode = report.reconciliations.every((r) => r.holds) ? 0 : 3;
      },
    );
