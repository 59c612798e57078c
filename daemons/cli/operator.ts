// `flashsale operator`: named operators of the admin API, issued and revoked here; and `flashsale
// audit`, the record of what every operator did. The CLI acts as `cli:<os user>`: it holds the
// database's credentials, which already let it do anything.
import { userInfo } from 'node:os';
import type { Argv } from 'yargs';
import { AUDIT_LIMIT, listAudit, type AuditEntry } from '../../shared/operators/audit.js';
import { addOperator, listOperators, revokeOperator } from '../../shared/operators/operators.js';
import { numberFlag, printTable, serverFlags, withConnections } from './common.js';

/** Who the CLI's actions are recorded as. */
export const cliOperator = (): string => `cli:${userInfo().username}`;

export const operator = (y: Argv) =>
  y.command(
    'operator',
    'named operators of the admin API: each sends its own secret as Authorization: Bearer <secret>',
    (c) =>
      serverFlags(c)
        .option('json', { type: 'boolean' })
        .command(
          'add <name>',
          'issue an operator a secret, printed this once (only its sha256 is kept)',
          (a) => a.positional('name', { type: 'string', demandOption: true }),
          async (argv) => {
            const { operator, secret } = await withConnections(argv, ({ pool }) =>
              addOperator(pool, argv.name, cliOperator()),
            );
            if (argv.json) console.log(JSON.stringify({ ...operator, secret }));
            else {
              console.log(`operator ${operator.name} added; its secret, shown this once:`);
              console.log(secret);
            }
          },
        )
        .command(
          'revoke <name>',
          "revoke an operator's secret: refused (401) from the next request on",
          (r) => r.positional('name', { type: 'string', demandOption: true }),
          async (argv) => {
            const { operator, revoked } = await withConnections(argv, ({ pool }) =>
              revokeOperator(pool, argv.name, cliOperator()),
            );
            if (argv.json) console.log(JSON.stringify(operator));
            else
              console.log(
                revoked
                  ? `operator ${operator.name} revoked at ${operator.revokedAt}`
                  : `operator ${operator.name} was revoked already, at ${operator.revokedAt}`,
              );
          },
        )
        .command(
          'list',
          'every operator, revoked ones too',
          (l) => l,
          async (argv) => {
            const list = await withConnections(argv, ({ pool }) => listOperators(pool));
            if (argv.json) console.log(JSON.stringify(list));
            else if (list.length === 0) console.log('no operators (ADMIN_TOKEN is the only one)');
            else
              printTable([['name', 'added', 'revoked'], ...list.map((o) => [o.name, o.createdAt, o.revokedAt ?? '-'])]);
          },
        )
        .demandCommand(1),
    () => {},
  );

function printAudit(entries: AuditEntry[]): void {
  if (entries.length === 0) {
    console.log('no admin actions recorded');
    return;
  }
  printTable([
    ['at', 'operator', 'action', 'sale', 'detail'],
    ...entries.map((e) => [
      e.at,
      e.operator,
      e.action,
      e.saleId ?? '-',
      Object.keys(e.detail).length ? JSON.stringify(e.detail) : '',
    ]),
  ]);
}

export const audit = (y: Argv) =>
  y.command(
    'audit',
    'admin actions, newest first: who did what, and when',
    (c) =>
      serverFlags(c)
        .option('sale', { type: 'string', describe: "only this sale's actions" })
        .option(
          'limit',
          numberFlag('limit', { describe: `entries, at most ${AUDIT_LIMIT.max}`, default: AUDIT_LIMIT.default }),
        )
        .option('json', { type: 'boolean' }),
    async (argv) => {
      const entries = await withConnections(argv, ({ pool }) =>
        listAudit(pool, { saleId: argv.sale, limit: argv.limit }),
      );
      if (argv.json) console.log(JSON.stringify(entries));
      else printAudit(entries);
    },
  );
