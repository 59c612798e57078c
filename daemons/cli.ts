#!/usr/bin/env node
// `flashsale`: the one way to start anything.
import yargs, { type Argv } from 'yargs';
import { hideBin } from 'yargs/helpers';
import { signJwt } from '../shared/jwt.js';
import { ConfigError, loadConfig, redisConfigured, requireDirectPayConsent, requireSecrets, requireServers, withLocalSecrets, type Config, type ConfigOverrides } from '../shared/config.js';
import { runUntilSignal, type Stoppable } from '../shared/daemon.js';
import { classify, HttpError } from '../shared/errors.js';
import { checkInvariants, formatInvariants } from '../shared/invariants.js';
import { verifyDraw } from '../shared/draw-verify.js';
import { createLogger } from '../shared/logger.js';
import { formatReport, progressReporter, runLoadtest } from '../tools/loadtest.js';
import { migrate } from '../shared/migrate.js';
import { listRefunds, markRefunded, type Refund } from '../shared/refunds.js';
import { reconcile } from '../shared/reconcile.js';
import { endSale, listAllSales, type SaleListItem } from '../shared/sale-admin.js';
import { createSale, getSale, parseSaleInput, saleView, type SaleState } from '../shared/sales.js';
import { connect } from '../shared/services.js';
import { startApi } from './api.js';
import { startDev } from './dev.js';
import { startAdmission } from './admission.js';
import { startExpiryListener } from './expiry-listener.js';
import { startOrderWriter } from './order-writer.js';
import { startServers } from './servers.js';
import { replayPassOnce, startReplay } from './replay.js';

type Args = Record<string, unknown>;

const FLAG_TO_CONFIG: Record<string, keyof Config> = {
  'database-url': 'databaseUrl', 'redis-url': 'redisUrl', 'log-level': 'logLevel', port: 'port', host: 'host',
  'jwt-secret': 'jwtSecret', 'admin-token': 'adminToken', 'auth-mode': 'authMode', 'batch-size': 'writerBatchSize',
  'writer-id': 'writerId', interval: 'replayIntervalSeconds', 'data-dir': 'dataDir', development: 'development',
  'ops-port': 'opsPort', 'local-stack': 'localStack',
};

function configFrom(argv: Args): Config {
  const overrides: ConfigOverrides = {};
  for (const [flag, key] of Object.entries(FLAG_TO_CONFIG)) if (argv[flag] !== undefined) overrides[key] = argv[flag];
  return withLocalSecrets(loadConfig(overrides));
}

/**
 * Starts a long-running service and keeps it until a signal; a bad setting exits 2, a failed start
 * 1, with the reason. Every service but the local stack's own refuses to run without real secrets.
 */
function serve(argv: Args, start: (config: Config, logger: ReturnType<typeof createLogger>) => Promise<Stoppable>, opts = { secrets: true, dev: false }): void {
  const config = configFrom(argv);
  const logger = createLogger(config);
  runUntilSignal(async () => {
    // `dev` turns DIRECT_PAY on for its demo page; every other process needs the consent.
    if (!opts.dev) requireDirectPayConsent(config);
    if (opts.secrets) {
      if (!config.development) requireServers(config);
      requireSecrets(config);
    }
    return start(config, logger);
  }, logger);
}

/** 2: the settings or the input are wrong (fix them); 1: a dependency is unusable, or a bug. */
function exitCodeFor(err: unknown): number {
  return classify(err) === 'client' ? 2 : 1;
}

async function withConnections<T>(argv: Args, fn: (c: Awaited<ReturnType<typeof connect>>, config: Config) => Promise<T>): Promise<T> {
  const config = configFrom(argv);
  const conn = await connect(config, createLogger({ ...config, logLevel: 'warn' }, 'flashsale', 2));
  try {
    await migrate(conn.pool);
    return await fn(conn, config);
  } finally {
    await conn.close();
  }
}

const serverFlags = (y: Argv) =>
  y.option('ops-port', { type: 'number', describe: 'port of /healthz, /readyz, /metrics for a daemon (env OPS_PORT, 0 = off)' })
    .option('database-url', { type: 'string', describe: 'Postgres URL (env DATABASE_URL)' })
    .option('redis-url', { type: 'string', describe: 'Redis URL (env REDIS_URL)' })
    .option('log-level', { type: 'string', describe: 'pino level (env LOG_LEVEL)' });

const apiFlags = (y: Argv) =>
  y.option('port', { type: 'number', describe: 'HTTP port (env PORT, default 3000)' })
    .option('host', { type: 'string', describe: 'HTTP host (env HOST, default 127.0.0.1)' })
    .option('jwt-secret', { type: 'string', describe: 'HS256 key of buyer tokens (env JWT_SECRET)' })
    .option('admin-token', { type: 'string', describe: 'bearer token of the admin API (env ADMIN_TOKEN)' })
    .option('auth-mode', { choices: ['jwt', 'trusted-header'], describe: 'buyer identity (env AUTH_MODE)' });

function printStatus(r: Awaited<ReturnType<typeof reconcile>>): void {
  const rows: [string, number | string][] = [
    ['total', r.total], ['available', r.available], ['queued', r.queued], ['pending', r.pending],
    ['paid', r.paid], ['expired', r.expired], ['cancelled', r.cancelled], ['restoring', r.restoring],
    ['conservation', r.holds ? 'holds' : 'VIOLATED'],
  ];
  console.log(`sale ${r.saleId}`);
  for (const [k, v] of rows) console.log(`  ${k.padEnd(13)}${v}`);
}

/** A header row and its rows, in columns as wide as their widest cell. */
function printTable(rows: string[][]): void {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  for (const row of rows) console.log(row.map((cell, i) => cell.padEnd(widths[i]!)).join('  ').trimEnd());
}

function printRefunds(refunds: Refund[], all: boolean): void {
  if (refunds.length === 0) {
    console.log(all ? 'no refunds' : 'no refunds due');
    return;
  }
  const amount = (r: Refund) => (r.amount === null ? '-' : `${r.amount}${r.currency ? ` ${r.currency}` : ''}`);
  printTable([['payment', 'order', 'sale', 'buyer', 'amount', 'reason', 'received', ...(all ? ['refunded', 'reference'] : [])],
    ...refunds.map((r) => [r.paymentId, r.orderId, r.saleId, r.userId, amount(r), r.reason, r.receivedAt, ...(all ? [r.refundedAt ?? '-', r.reference ?? '-'] : [])])]);
}

function printSales(sales: SaleListItem[]): void {
  if (sales.length === 0) {
    console.log('no sales');
    return;
  }
  printTable([['id', 'state', 'stock', 'available', 'pending', 'paid', 'expired', 'starts', 'ends', 'name'],
    ...sales.map((s) => [s.id, s.state, ...[s.stock, s.available, s.pending, s.paid, s.expired].map(String), s.startsAt, s.endsAt ?? '-', s.name])]);
}

try {
  await yargs(hideBin(process.argv))
    .scriptName('flashsale')
    .command('dev', 'run the whole service locally with a demo sale (embedded Postgres, redis-server child)',
      (y) => apiFlags(serverFlags(y)).option('data-dir', { type: 'string', describe: 'where local data lives (default .data)' }),
      (argv) => serve({ ...argv, development: true, 'local-stack': true }, startDev, { secrets: true, dev: true }))
    .command('servers', 'run local Postgres (embedded) and redis-server on fixed ports for the PM2 ecosystem',
      (y) => y.option('data-dir', { type: 'string', describe: 'where local data lives (default .data)' }),
      (argv) => serve(argv, startServers, { secrets: false, dev: false }))
    .command('migrate', 'apply pending sql/ migrations', serverFlags, async (argv) => {
      const applied = await withConnections(argv, async ({ pool }) => migrate(pool));
      console.log(applied.length ? `applied ${applied.join(', ')}` : 'schema up to date');
    })
    .command('api', 'serve the HTTP API', (y) => apiFlags(serverFlags(y)), (argv) => serve(argv, startApi))
    .command('order-writer', 'drain winners into Postgres orders (daemon one)',
      (y) => serverFlags(y).option('batch-size', { type: 'number' }).option('writer-id', { type: 'string' }),
      (argv) => serve(argv, startOrderWriter))
    .command('expiry-listener', 'close unpaid orders on expired events (daemon two)', serverFlags, (argv) => serve(argv, startExpiryListener))
    .command('admission', 'admit buyers from waiting rooms at each sale\'s rate, and make draws', serverFlags, (argv) => serve(argv, startAdmission))
    .command('replay', 'sweep for missed expirations on a cron schedule',
      (y) => serverFlags(y).option('once', { type: 'boolean', describe: 'one pass, then exit' })
        .option('interval', { type: 'number', describe: 'seconds between passes (env REPLAY_INTERVAL_SECONDS, default 5)' }),
      async (argv) => {
        if (!argv.once) return serve(argv, startReplay);
        const config = configFrom(argv);
        const report = await replayPassOnce(config, createLogger(config));
        process.exitCode = report.reconciliations.every((r) => r.holds) ? 0 : 3;
      })
    .command('check', 'check every invariant of one sale or all from Postgres and Redis (exit 3 on a violation)',
      (y) => serverFlags(y).option('sale', { type: 'string', describe: 'only this sale' }).option('json', { type: 'boolean' })
        .option('interval', { type: 'number', describe: 'the replay interval in seconds (env REPLAY_INTERVAL_SECONDS, default 5)' }),
      async (argv) => {
        const report = await withConnections(argv, ({ pool, redis }, config) => checkInvariants(pool, redis, {
          saleIds: argv.sale === undefined ? undefined : [argv.sale], replayIntervalMs: config.replayIntervalSeconds * 1000,
        }));
        console.log(argv.json ? JSON.stringify(report) : formatInvariants(report));
        if (report.violations.length > 0) process.exitCode = 3;
      })
    .command('refunds', 'list payments that could not pay their order (wrong amount or currency, closed, or paid already): money to pay back',
      (y) => serverFlags(y).option('json', { type: 'boolean' }).option('all', { type: 'boolean', describe: 'refunds already paid back too' })
        .command('mark <paymentId>', 'record that a refund due was paid back (marking again answers the first record, unchanged)',
          (c) => c.positional('paymentId', { type: 'string', demandOption: true })
            .option('reference', { type: 'string', demandOption: true, describe: 'the provider\'s refund id, or how the money went back' }),
          async (argv) => {
            const refund = await withConnections(argv, ({ pool }) => markRefunded(pool, argv.paymentId, argv.reference));
            console.log(argv.json ? JSON.stringify(refund) : `refund of payment ${refund.paymentId} recorded at ${refund.refundedAt} (${refund.reference})`);
          }),
      async (argv) => {
        const refunds = await withConnections(argv, ({ pool }) => listRefunds(pool, { all: argv.all }));
        if (argv.json) console.log(JSON.stringify(refunds));
        else printRefunds(refunds, argv.all === true);
      })
    .command('token <user>', 'print a buyer token signed with JWT_SECRET (for tests and load tests)',
      (y) => y.positional('user', { type: 'string', demandOption: true }).option('jwt-secret', { type: 'string' })
        .option('ttl', { type: 'number', default: 3600 }),
      (argv) => {
        const config = configFrom(argv);
        if (!config.jwtSecret) throw new ConfigError('JWT_SECRET is not set: set JWT_SECRET or pass --jwt-secret');
        console.log(signJwt(argv.user, config.jwtSecret, argv.ttl));
      })
    .command('loadtest', 'fire N distinct buyers at a sale, then report outcomes, latency, orders and the conservation check',
      (y) => serverFlags(y)
        .option('url', { type: 'string', describe: 'API base URL (default http://127.0.0.1:$PORT, PORT default 3000)' })
        .option('sale', { type: 'string', describe: 'fire at this existing sale' })
        .option('stock', { type: 'number', describe: 'create a fresh sale of this stock through the admin API (default 1000)' })
        .conflicts('sale', 'stock')
        .option('buyers', { type: 'number', default: 10_000 })
        .option('concurrency', { type: 'number', default: 500 })
        .option('qty', { type: 'number', default: 1 })
        .option('pay-ratio', { type: 'number', default: 0, describe: 'share of won orders to pay, 0..1' })
        .option('jwt-secret', { type: 'string', describe: 'HS256 key the API checks buyer tokens with (env JWT_SECRET)' })
        .option('admin-token', { type: 'string', describe: 'admin token, to create the sale (env ADMIN_TOKEN)' })
        .option('json', { type: 'boolean', describe: 'print the report as JSON' }),
      async (argv) => {
        const config = configFrom(argv);
        if (!config.jwtSecret) throw new ConfigError('JWT_SECRET is not set: set JWT_SECRET or pass --jwt-secret (the local stack keeps its own in <data dir>/secrets.json)');
        // Postgres and Redis are optional here: without them the report leaves out orders and conservation.
        const conn = config.databaseUrl && redisConfigured(config) ? await connect(config, createLogger({ ...config, logLevel: 'warn' }, 'flashsale', 2)) : undefined;
        try {
          const report = await runLoadtest({
            url: argv.url ?? `http://127.0.0.1:${config.port}`, saleId: argv.sale, stock: argv.stock, adminToken: config.adminToken,
            buyers: argv.buyers, concurrency: argv.concurrency, qty: argv.qty, payRatio: argv['pay-ratio'], jwtSecret: config.jwtSecret,
            db: conn, onProgress: progressReporter(process.stderr),
          });
          console.log(argv.json ? JSON.stringify(report) : formatReport(report));
          if (report.reconciliation && !report.reconciliation.holds) process.exitCode = 3;
        } finally {
          await conn?.close();
        }
      })
    .command('draw', 'check draws', (y) => serverFlags(y)
      .command('verify <saleId>', 'recompute a draw from its revealed seed and entries in Postgres and compare it with the recorded ranks and winners (exit 3 on a mismatch)',
        (c) => c.positional('saleId', { type: 'string', demandOption: true }).option('json', { type: 'boolean' }),
        async (argv) => {
          const verdict = await withConnections(argv, ({ pool }) => verifyDraw(pool, argv.saleId));
          console.log(argv.json ? JSON.stringify(verdict) : verdict.line);
          if (!verdict.ok) process.exitCode = 3;
        })
      .demandCommand(1), () => {})
    .command('sale', 'create, list, end and inspect sales', (y) => serverFlags(y)
      .command('create', 'create a sale and load it into Redis',
        (c) => c.option('name', { type: 'string', demandOption: true }).option('stock', { type: 'number', demandOption: true })
          .option('price', { type: 'number', describe: 'one unit, in the currency\'s minor unit (cents for EUR)' })
          .option('currency', { type: 'string', describe: 'ISO 4217 code, e.g. EUR' })
          .option('per-user', { type: 'number' }).option('max-per-order', { type: 'number' })
          .option('starts-at', { type: 'string', describe: 'ISO 8601' }).option('ends-at', { type: 'string', describe: 'ISO 8601' })
          .option('payment-window', { type: 'number', describe: 'seconds (default 300)' })
          .option('challenge', { type: 'string', choices: ['none', 'pow'], describe: 'pow: buyers solve a proof-of-work challenge first (default none)' })
          .option('challenge-complexity', { type: 'number', describe: 'about how many hashes a challenge takes (default 50000)' })
          .option('admission', { type: 'string', choices: ['first-come', 'queue', 'draw'], describe: 'queue: a waiting room in front; draw: entries, then a draw (default first-come)' })
          .option('admit-rate', { type: 'number', describe: 'queue: passes per second (default 50)' })
          .option('admit-overbook', { type: 'number', describe: 'queue: passes outstanding per unit left, for no-shows (default 1.2)' })
          .option('pass-seconds', { type: 'number', describe: 'queue: how long a pass buys (default 120)' })
          .option('entries-open-at', { type: 'string', describe: 'draw: ISO 8601 (default: starts-at)' })
          .option('entries-close-at', { type: 'string', describe: 'draw: ISO 8601, when the draw is made' })
          .option('backfill-until', { type: 'string', describe: 'draw: ISO 8601 (default: an hour after entries close)' })
          .option('id', { type: 'string' }).option('json', { type: 'boolean' }),
        async (argv) => {
          const sale = parseSaleInput(Object.fromEntries(Object.entries({
            id: argv.id, name: argv.name, stock: argv.stock, price: argv.price, currency: argv.currency, perUserLimit: argv['per-user'], maxPerOrder: argv['max-per-order'],
            startsAt: argv['starts-at'], endsAt: argv['ends-at'], paymentWindowSeconds: argv['payment-window'],
            challenge: argv.challenge, challengeComplexity: argv['challenge-complexity'],
            admission: argv.admission, admitRatePerSecond: argv['admit-rate'], admitOverbook: argv['admit-overbook'], passSeconds: argv['pass-seconds'],
            entriesOpenAt: argv['entries-open-at'], entriesCloseAt: argv['entries-close-at'], backfillUntil: argv['backfill-until'],
          }).filter(([, v]) => v !== undefined)));
          const view = await withConnections(argv, async ({ pool, redis }, config) => {
            await createSale(pool, redis, sale, { legacyBuyCounts: config.legacyBuyCounts });
            return saleView(redis, sale);
          });
          console.log(argv.json ? JSON.stringify(view) : `created sale ${view.id} (${view.stock} in stock, ${view.state})`);
        })
      .command('status <id>', 'stock, orders by state and the conservation check',
        (c) => c.positional('id', { type: 'string', demandOption: true }).option('json', { type: 'boolean' }),
        async (argv) => {
          const r = await withConnections(argv, async ({ pool, redis }) => {
            const sale = await getSale(pool, argv.id);
            if (!sale) throw new HttpError('sale_not_found', `No sale with id "${argv.id}".`);
            return reconcile(pool, redis, sale.id, sale.stock);
          });
          if (argv.json) console.log(JSON.stringify(r));
          else printStatus(r);
          if (!r.holds) process.exitCode = 3;
        })
      .command('list', 'every sale, newest first: state, stock left, orders pending, paid and expired',
        (c) => c.option('state', { choices: ['upcoming', 'open', 'sold_out', 'ended'] as const }).option('json', { type: 'boolean' }),
        async (argv) => {
          const sales = await withConnections(argv, ({ pool, redis }) => listAllSales(pool, redis, argv.state as SaleState | undefined));
          if (argv.json) console.log(JSON.stringify(sales));
          else printSales(sales);
        })
      .command('end <id>', 'end a sale now: no new purchases; pending orders stay payable until their deadline',
        (c) => c.positional('id', { type: 'string', demandOption: true }).option('json', { type: 'boolean' }),
        async (argv) => {
          const { view, ended } = await withConnections(argv, async ({ pool, redis }) => {
            const r = await endSale(pool, redis, argv.id);
            return { view: await saleView(redis, r.sale), ended: r.ended };
          });
          if (argv.json) console.log(JSON.stringify(view));
          else console.log(ended ? `ended sale ${view.id} at ${view.endsAt}` : `sale ${view.id} had ended already, at ${view.endsAt}`);
        })
      .demandCommand(1), () => {})
    .demandCommand(1)
    .strict()
    .fail((msg, err, y) => {
      if (err) throw err;
      console.error(`${y.help()}\n\n${msg}`);
      process.exit(2);
    })
    .help()
    .parseAsync();
} catch (err) {
  console.error(`flashsale: ${(err as Error).message}`);
  process.exit(exitCodeFor(err));
}
