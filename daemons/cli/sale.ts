// `flashsale sale`: create (its flags from the sale's definition), list, end and inspect sales.
import '../../shared/admission/modes.js';
import type { Argv } from 'yargs';
import { databaseNow } from '../../shared/runtime/db.js';
import { HttpError } from '../../shared/runtime/errors.js';
import { ORDER_STATES } from '../../shared/orders/states.js';
import { reconcile, UNIT_PLACES } from '../../shared/checks/reconcile.js';
import { endSale, listAllSales, type SaleListItem } from '../../shared/sales/admin.js';
import { SALE_DEFINITION, shownOrder, type SaleField } from '../../shared/sales/definition.js';
import { fieldsRenamed } from '../../shared/sales/input.js';
import { MAX_VARIANTS } from '../../shared/sales/variants.js';
import { createSale, getSale, parseSaleInput, saleView, type SaleState } from '../../shared/sales/sale.js';
import { setEndTime, setPaused } from '../../shared/sales/controls.js';
import { changeStock, type StockChange } from '../../shared/sales/stock.js';
import { numberFlag, printTable, serverFlags, withConnections } from './common.js';
import { cliOperator } from './operator.js';

function printStatus(r: Awaited<ReturnType<typeof reconcile>>): void {
  const rows: [string, number | string][] = [
    ['total', r.total],
    ...UNIT_PLACES.map((place) => [place, r[place]] as [string, number]),
    ['conservation', r.holds ? 'holds' : 'VIOLATED'],
  ];
  console.log(`sale ${r.saleId}`);
  for (const [k, v] of rows) console.log(`  ${k.padEnd(13)}${v}`);
  if (r.variants)
    printTable([
      ['variant', 'total', ...UNIT_PLACES, 'conservation'],
      ...r.variants.map((v) => [
        v.sku,
        ...[v.total, ...UNIT_PLACES.map((p) => v[p])].map(String),
        v.holds ? 'holds' : 'VIOLATED',
      ]),
    ]);
}

function printSales(sales: SaleListItem[]): void {
  if (sales.length === 0) {
    console.log('no sales');
    return;
  }
  // A sale made before prices has none: it takes any amount.
  const price = (s: SaleListItem) => (s.price === null ? '-' : `${s.price} ${s.currency}`);
  printTable([
    ['id', 'state', 'price', 'stock', 'available', ...ORDER_STATES, 'starts', 'ends', 'name'],
    ...sales.map((s) => [
      s.id,
      s.state,
      price(s),
      ...[s.stock, s.available, ...ORDER_STATES.map((o) => s[o])].map(String),
      s.startsAt,
      s.endsAt ?? '-',
      s.name,
    ]),
  ]);
}

/** A flag per field of the definition that has one; parseSaleInput checks what they say. */
const CREATE_FLAGS = shownOrder('cli').map((key) => {
  const { kind, schema, cli } = SALE_DEFINITION[key];
  const numeric = kind === 'int' || kind === 'number';
  const option = {
    ...(numeric ? numberFlag(cli!.flag, { fraction: kind === 'number' }) : { type: 'string' as const }),
    ...(cli!.describe === undefined ? {} : { describe: cli!.describe }),
    ...(cli!.demand ? { demandOption: true } : {}),
    ...(kind === 'choice' ? { choices: schema.enum as string[] } : {}),
  };
  return { key, flag: cli!.flag, option };
});

/** The definition's refusals name API fields; the operator typed flags, so they name the flags. */
async function inFlags<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (!(err instanceof HttpError && err.code === 'invalid_sale')) throw err;
    const flag = (key: SaleField) => (SALE_DEFINITION[key].cli ? `--${SALE_DEFINITION[key].cli.flag}` : undefined);
    throw new HttpError('invalid_sale', fieldsRenamed(err.message, flag));
  }
}

function readVariants(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new HttpError('invalid_sale', '--variants must be JSON: [{"sku":"M","label":"Medium","stock":10}, ...]');
  }
}

function createFlags(c: Argv): Argv {
  for (const { flag, option } of CREATE_FLAGS) c.option(flag, option);
  return c
    .option('variants', {
      type: 'string',
      describe: `the variants as JSON, [{"sku":"M","label":"Medium","stock":10,"priceCents":1999}, ...] (1 to ${MAX_VARIANTS}; priceCents optional)`,
    })
    .option('json', { type: 'boolean' });
}

export const sale = (y: Argv) =>
  y.command(
    'sale',
    'create, list, end, pause and inspect sales',
    (c) =>
      serverFlags(c)
        .command('create', 'create a sale and load it into Redis', createFlags, async (argv) => {
          const given = CREATE_FLAGS.map(({ key, flag }) => [key, argv[flag]]).filter(([, v]) => v !== undefined);
          const view = await inFlags(async () => {
            const variants = argv.variants === undefined ? undefined : readVariants(String(argv.variants));
            const input = { ...Object.fromEntries(given), ...(variants ? { variants } : {}) };
            // Refused before connecting; then read again with Postgres's now for a sale given no start.
            parseSaleInput(input);
            return withConnections(argv, async ({ pool, redis }, config) => {
              const created = parseSaleInput(input, await databaseNow(pool));
              await createSale(pool, redis, created, { legacyBuyCounts: config.legacyBuyCounts }, cliOperator());
              return saleView(redis, created);
            });
          });
          console.log(
            argv.json ? JSON.stringify(view) : `created sale ${view.id} (${view.stock} in stock, ${view.state})`,
          );
        })
        .command(
          'status <id>',
          'stock, orders by state and the conservation check',
          (s) => s.positional('id', { type: 'string', demandOption: true }).option('json', { type: 'boolean' }),
          async (argv) => {
            const r = await withConnections(argv, async ({ pool, redis }) => {
              const found = await getSale(pool, argv.id);
              if (!found) throw new HttpError('sale_not_found', `No sale with id "${argv.id}".`);
              return reconcile(pool, redis, found.id, found.stock, found.variants);
            });
            if (argv.json) console.log(JSON.stringify(r));
            else printStatus(r);
            if (!r.holds) process.exitCode = 3;
          },
        )
        .command(
          'list',
          'every sale, newest first: state, price and currency, stock left, orders by state',
          (l) =>
            l
              .option('state', { choices: ['upcoming', 'open', 'sold_out', 'ended'] as const })
              .option('json', { type: 'boolean' }),
          async (argv) => {
            const sales = await withConnections(argv, ({ pool, redis }) =>
              listAllSales(pool, redis, argv.state as SaleState | undefined),
            );
            if (argv.json) console.log(JSON.stringify(sales));
            else printSales(sales);
          },
        )
        .command(
          'end <id>',
          'end a sale now: no new purchases; pending orders stay payable until their deadline',
          (e) => e.positional('id', { type: 'string', demandOption: true }).option('json', { type: 'boolean' }),
          async (argv) => {
            const { view, ended } = await withConnections(argv, async ({ pool, redis }) => {
              const r = await endSale(pool, redis, argv.id, undefined, cliOperator());
              return { view: await saleView(redis, r.sale), ended: r.ended };
            });
            if (argv.json) console.log(JSON.stringify(view));
            else
              console.log(
                ended
                  ? `ended sale ${view.id} at ${view.endsAt}`
                  : `sale ${view.id} had ended already, at ${view.endsAt}`,
              );
          },
        )
        .command(
          'pause <id>',
          "pause a sale: buyers' purchases answer 409 paused, its waiting room admits nobody; a draw takes entries",
          (p) => p.positional('id', { type: 'string', demandOption: true }).option('json', { type: 'boolean' }),
          (argv) => pauseCommand(argv, true),
        )
        .command(
          'resume <id>',
          'resume a paused sale',
          (p) => p.positional('id', { type: 'string', demandOption: true }).option('json', { type: 'boolean' }),
          (argv) => pauseCommand(argv, false),
        )
        .command(
          'end-time <id> <endsAt>',
          "move a live sale's end, earlier or later (ISO 8601 with Z or an offset, to come)",
          (e) =>
            e
              .positional('id', { type: 'string', demandOption: true })
              .positional('endsAt', { type: 'string', demandOption: true })
              .option('json', { type: 'boolean' }),
          async (argv) => {
            const view = await withConnections(argv, async ({ pool, redis }) =>
              saleView(redis, await setEndTime(pool, redis, argv.id, argv.endsAt, cliOperator())),
            );
            console.log(argv.json ? JSON.stringify(view) : `sale ${view.id} now ends at ${view.endsAt}`);
          },
        )
        .command(
          'restock <id> <sku> <units>',
          'add units to one variant of a sale (a sale made without variants: sku default); a retry adds again',
          stockFlags,
          (argv) => stockCommand(argv, 'restock'),
        )
        .command(
          'remove <id> <sku> <units>',
          "take unsold units out of one variant: only units available now, never a buyer's",
          stockFlags,
          (argv) => stockCommand(argv, 'remove'),
        )
        .demandCommand(1),
    () => {},
  );

async function pauseCommand(argv: { id: string; json?: boolean } & Record<string, unknown>, paused: boolean) {
  const r = await withConnections(argv, async ({ pool, redis }) => {
    const done = await setPaused(pool, redis, argv.id, paused, cliOperator());
    return { sale: await saleView(redis, done.sale), paused: done.paused, changed: done.changed };
  });
  const word = paused ? 'paused' : 'resumed';
  if (argv.json) console.log(JSON.stringify(r));
  else
    console.log(
      r.changed ? `${word} sale ${r.sale.id}` : `sale ${r.sale.id} was ${paused ? 'paused' : 'not paused'} already`,
    );
}

const stockFlags = (c: Argv) =>
  c
    .positional('id', { type: 'string', demandOption: true })
    .positional('sku', { type: 'string', demandOption: true })
    .positional('units', { type: 'string', demandOption: true })
    .option('json', { type: 'boolean' });

async function stockCommand(
  argv: { id: string; sku: string; units: string; json?: boolean } & Record<string, unknown>,
  change: StockChange,
) {
  const r = await withConnections(argv, async ({ pool, redis }) => {
    const done = await changeStock(pool, redis, argv.id, argv.sku, change, String(argv.units), cliOperator());
    return {
      sale: await saleView(redis, done.sale),
      sku: done.sku,
      units: done.units,
      stock: done.stock,
      available: done.available,
    };
  });
  if (argv.json) console.log(JSON.stringify(r));
  else
    console.log(
      `${change === 'restock' ? 'added' : 'removed'} ${r.units} of ${r.sku} in sale ${r.sale.id}: its stock is ${r.stock}, ${r.available} available`,
    );
}
