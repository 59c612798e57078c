// Verification an operator runs: every invariant of the sales (`check`), and a draw recomputed
// from its revealed seed (`draw verify`). Both exit 3 on a violation.
import type { Argv } from 'yargs';
import { verifyDraw } from '../../shared/admission/draw/verify.js';
import { checkInvariants, formatInvariants } from '../../shared/checks/invariants.js';
import { numberFlag, serverFlags, withConnections } from './common.js';

export const check = (y: Argv) =>
  y.command(
    'check',
    "check every invariant of one sale or all from Postgres and Redis, and with REDIS_MIN_REPLICAS_ACK that each sale's master has its replicas (exit 3 on a violation)",
    (c) =>
      serverFlags(c)
        .option('sale', { type: 'string', describe: 'only this sale' })
        .option('json', { type: 'boolean' })
        .option(
          'interval',
          numberFlag('interval', {
            describe: 'the replay interval in seconds (env REPLAY_INTERVAL_SECONDS, default 5)',
          }),
        ),
    async (argv) => {
      const report = await withConnections(argv, ({ pool, redis }, config) =>
        checkInvariants(pool, redis, {
          saleIds: argv.sale === undefined ? undefined : [argv.sale],
          replayIntervalMs: config.replayIntervalSeconds * 1000,
          minReplicasAck: config.redisMinReplicasAck,
        }),
      );
      console.log(argv.json ? JSON.stringify(report) : formatInvariants(report));
      if (report.violations.length > 0) process.exitCode = 3;
    },
  );

export const draw = (y: Argv) =>
  y.command(
    'draw',
    'check draws',
    (c) =>
      serverFlags(c)
        .command(
          'verify <saleId>',
          'recompute a draw from its revealed seed and entries in Postgres and compare it with the recorded ranks and winners (exit 3 on a mismatch)',
          (v) => v.positional('saleId', { type: 'string', demandOption: true }).option('json', { type: 'boolean' }),
          async (argv) => {
            const verdict = await withConnections(argv, ({ pool }) => verifyDraw(pool, argv.saleId));
            console.log(argv.json ? JSON.stringify(verdict) : verdict.line);
            if (!verdict.ok) process.exitCode = 3;
          },
        )
        .demandCommand(1),
    () => {},
  );
