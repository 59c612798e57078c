// `flashsale refunds`: payments that could not pay their order, money to pay back, and marking
// one paid back.
import type { Argv } from 'yargs';
import { listRefunds, markRefunded, type Refund } from '../../shared/payments/refunds.js';
import { printTable, serverFlags, withConnections } from './common.js';
import { cliOperator } from './operator.js';

function printRefunds(refunds: Refund[], all: boolean): void {
  if (refunds.length === 0) {
    console.log(all ? 'no refunds' : 'no refunds due');
    return;
  }
  const amount = (r: Refund) => (r.amount === null ? '-' : `${r.amount}${r.currency ? ` ${r.currency}` : ''}`);
  printTable([
    ['payment', 'order', 'sale', 'buyer', 'amount', 'reason', 'received', ...(all ? ['refunded', 'reference'] : [])],
    ...refunds.map((r) => [
      r.paymentId,
      r.orderId,
      r.saleId,
      r.userId,
      amount(r),
      r.reason,
      r.receivedAt,
      ...(all ? [r.refundedAt ?? '-', r.reference ?? '-'] : []),
    ]),
  ]);
}

export const refunds = (y: Argv) =>
  y.command(
    'refunds',
    'list payments that could not pay their order (wrong amount or currency, closed, or paid already): money to pay back',
    (c) =>
      serverFlags(c)
        .option('json', { type: 'boolean' })
        .option('all', { type: 'boolean', describe: 'refunds already paid back too' })
        .command(
          'mark <paymentId>',
          'record that a refund due was paid back (marking again answers the first record, unchanged)',
          (m) =>
            m.positional('paymentId', { type: 'string', demandOption: true }).option('reference', {
              type: 'string',
              demandOption: true,
              describe: "the provider's refund id, or how the money went back",
            }),
          async (argv) => {
            const refund = await withConnections(argv, ({ pool }) =>
              markRefunded(pool, argv.paymentId, argv.reference, cliOperator()),
            );
            console.log(
              argv.json
                ? JSON.stringify(refund)
                : `refund of payment ${refund.paymentId} recorded at ${refund.refundedAt} (${refund.reference})`,
            );
          },
        ),
    async (argv) => {
      const list = await withConnections(argv, ({ pool }) => listRefunds(pool, { all: argv.all }));
      if (argv.json) console.log(JSON.stringify(list));
      else printRefunds(list, argv.all === true);
    },
  );
