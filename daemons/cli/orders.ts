// `flashsale orders`: the orders in Postgres, by sale, buyer and state, and one order with its payments.
import type { Argv } from 'yargs';
import { listOrders, ORDERS_LIST_MAX, showOrder, type OperatorOrder } from '../../shared/orders/list.js';
import { ORDER_STATES, type OrderState } from '../../shared/orders/states.js';
import { numberFlag, printTable, serverFlags, withConnections } from './common.js';

function printOrders(orders: OperatorOrder[]): void {
  if (orders.length === 0) {
    console.log('no orders');
    return;
  }
  printTable([
    ['order', 'sale', 'buyer', 'qty', 'state', 'purchased', 'expires', 'paid', 'closed'],
    ...orders.map((o) => [
      o.id,
      o.saleId,
      o.userId,
      String(o.qty),
      o.state,
      o.purchasedAt,
      o.expiresAt,
      o.paidAt ?? '-',
      o.closedAt ?? '-',
    ]),
  ]);
}

export const orders = (y: Argv) =>
  y.command(
    'orders',
    'list orders, or show one with its payments',
    (c) =>
      serverFlags(c)
        .command(
          'list',
          'orders in Postgres, newest purchase first',
          (l) =>
            l
              .option('sale', { type: 'string', describe: "only this sale's orders" })
              .option('buyer', { type: 'string', describe: "only this buyer's orders (the token's sub)" })
              .option('state', { choices: ORDER_STATES, describe: 'only orders in this state' })
              .option(
                'limit',
                numberFlag('limit', { default: 50, describe: `at most this many (1 to ${ORDERS_LIST_MAX})` }),
              )
              .option('json', { type: 'boolean' }),
          async (argv) => {
            const list = await withConnections(argv, ({ pool }) =>
              listOrders(pool, {
                saleId: argv.sale,
                userId: argv.buyer,
                state: argv.state as OrderState | undefined,
                limit: argv.limit,
              }),
            );
            if (argv.json) console.log(JSON.stringify(list));
            else printOrders(list);
          },
        )
        .command(
          'show <id>',
          'one order: its state, times and every payment recorded for it',
          (s) => s.positional('id', { type: 'string', demandOption: true }).option('json', { type: 'boolean' }),
          async (argv) => {
            const order = await withConnections(argv, ({ pool }) => showOrder(pool, argv.id));
            if (argv.json) {
              console.log(JSON.stringify(order));
              return;
            }
            const { payments, ...fields } = order;
            for (const [k, v] of Object.entries(fields)) console.log(`${k.padEnd(12)}${v ?? '-'}`);
            if (payments.length === 0) console.log('no payments');
            else {
              console.log('');
              printTable([
                ['payment', 'outcome', 'reason', 'amount', 'received', 'refunded'],
                ...payments.map((p) => [
                  p.id,
                  p.outcome,
                  p.reason ?? '-',
                  p.amount === null ? '-' : `${p.amount} ${p.currency ?? ''}`.trimEnd(),
                  p.receivedAt,
                  p.refundedAt ?? '-',
                ]),
              ]);
            }
          },
        )
        .demandCommand(1),
    () => {},
  );
