#!/usr/bin/env node
// `flashsale`: the one way to start anything. Each command group is a module of daemons/cli/,
// added here in the order the help lists them.
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { check, draw } from './cli/checks.js';
import { exitCodeFor } from './cli/common.js';
import { orders } from './cli/orders.js';
import { refunds } from './cli/refunds.js';
import { sale } from './cli/sale.js';
import { services } from './cli/services.js';
import { tools } from './cli/tools.js';

try {
  const cli = [services, check, refunds, tools, draw, sale, orders].reduce((y, add) => add(y), yargs(hideBin(process.argv)).scriptName('flashsale'));
  await cli
    .demandCommand(1)
    .strict()
    .fail((msg, err, y) => {
      // A flag's own check (a number's coerce) fails as a YError: the input's fault, said plainly.
      if (err?.name === 'YError') {
        console.error(`flashsale: ${err.message}`);
        process.exit(2);
      }
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
