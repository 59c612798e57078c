// Tools for tests and load tests: a buyer token, and a crowd of buyers fired at a sale.
import type { Argv } from 'yargs';
import { ConfigError, redisConfigured } from '../../shared/config/index.js';
import { signJwt } from '../../shared/buyers/jwt.js';
import { createLogger } from '../../shared/runtime/logger.js';
import { connect } from '../../shared/runtime/services.js';
import { formatReport, progressReporter, runLoadtest } from '../../tools/loadtest.js';
import { numberFlag, oneShotConfig, serverFlags } from './common.js';

export const tools = (y: Argv) =>
  y
    .command(
      'token <user>',
      'print a buyer token signed with JWT_SECRET (for tests and load tests)',
      (c) =>
        c
          .positional('user', { type: 'string', demandOption: true })
          .option('jwt-secret', { type: 'string' })
          .option('ttl', numberFlag('ttl', { default: 3600 }))
          .option('email-verified', {
            type: 'boolean',
            describe: 'the token says email_verified: true (a `buyers: verified-email` sale sells only to such buyers)',
          }),
      (argv) => {
        const config = oneShotConfig(argv);
        if (!config.jwtSecret) throw new ConfigError('JWT_SECRET is not set: set JWT_SECRET or pass --jwt-secret');
        console.log(signJwt(argv.user, config.jwtSecret, argv.ttl, argv.emailVerified ? { email_verified: true } : {}));
      },
    )
    .command(
      'loadtest',
      'fire N distinct buyers at a sale, then report outcomes, latency, orders and the conservation check',
      (c) =>
        serverFlags(c)
          .option('url', {
            type: 'string',
            describe: 'API base URL (default http://127.0.0.1:$PORT, PORT default 3000)',
          })
          .option('sale', { type: 'string', describe: 'fire at this existing sale' })
          .option(
            'stock',
            numberFlag('stock', { describe: 'create a fresh sale of this stock through the admin API (default 1000)' }),
          )
          .conflicts('sale', 'stock')
          .option('buyers', numberFlag('buyers', { default: 10_000 }))
          .option('concurrency', numberFlag('concurrency', { default: 500 }))
          .option('qty', numberFlag('qty', { default: 1 }))
          .option(
            'pay-ratio',
            numberFlag('pay-ratio', { default: 0, fraction: true, describe: 'share of won orders to pay, 0..1' }),
          )
          .option('jwt-secret', {
            type: 'string',
            describe: 'HS256 key the API checks buyer tokens with (env JWT_SECRET)',
          })
          .option('admin-token', { type: 'string', describe: 'admin token, to create the sale (env ADMIN_TOKEN)' })
          .option('json', { type: 'boolean', describe: 'print the report as JSON' }),
      async (argv) => {
        const config = oneShotConfig(argv);
        if (!config.jwtSecret)
          throw new ConfigError(
            'JWT_SECRET is not set: set JWT_SECRET or pass --jwt-secret (the local stack keeps its own in <data dir>/secrets.json)',
          );
        // Postgres and Redis are optional here: without them the report leaves out orders and conservation.
        const conn =
          config.databaseUrl && redisConfigured(config)
            ? await connect(config, createLogger({ ...config, logLevel: 'warn' }, 'flashsale', 2))
            : undefined;
        try {
          const report = await runLoadtest({
            url: argv.url ?? `http://127.0.0.1:${config.port}`,
            saleId: argv.sale,
            stock: argv.stock,
            adminToken: config.adminToken,
            buyers: argv.buyers,
            concurrency: argv.concurrency,
            qty: argv.qty,
            payRatio: argv['pay-ratio'],
            jwtSecret: config.jwtSecret,
            db: conn,
            onProgress: progressReporter(process.stderr),
          });
          console.log(argv.json ? JSON.stringify(report) : formatReport(report));
          if (report.reconciliation && !report.reconciliation.holds) process.exitCode = 3;
        } finally {
          await conn?.close();
        }
      },
    );
