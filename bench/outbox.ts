// Outbox cost (docs/events.md): the order writer's batch insert as it runs (`writeOrders`: the
// orders, one orders.created row per batch and a sale.sold_out when the claim reported one) against
// the same insert without its event rows (`INSERT_WINNERS` in the same CTE shape, returning the same
// columns). Rounds alternate the two, each round a fresh sale of `batches` batches of `batchSize`
// winners, one Postgres with fsync on and durable commits, as the product's pool runs them. The
// rest of a drain (claim.lua, ack.lua, the expiry keys) does not change with the outbox, so the
// insert's ratio is the floor of the whole drain's.
import { loadavg } from 'node:os';
import { writeOrders, EXPIRES_MS, INSERT_WINNERS } from '../shared/orders/queries.js';
import type { Winner } from '../shared/runtime/ids.js';
import { BENCH_PRICE, Cleanup, freshDatabase, progress, type BenchPostgres } from './harness.js';

export interface OutboxResults {
  batches: number;
  batchSize: number;
  rounds: number;
  /** Orders/s of each round, in round order. */
  withEvents: number[];
  without: number[];
  /** Median with events over median without. */
  ratio: number;
  events: number;
  loadAvgAtStart: number[];
}

const WITHOUT_EVENTS = `with w as (${INSERT_WINNERS} returning *) select id, status, ${EXPIRES_MS} from w`;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;

export async function runOutbox(
  pg: BenchPostgres,
  opts: { rounds: number; batches: number; batchSize: number },
): Promise<OutboxResults> {
  const loadAvgAtStart = loadavg().map((l) => Math.round(l * 100) / 100);
  const cleanup = new Cleanup();
  try {
    const db = await freshDatabase(pg.url, 'bench_outbox');
    cleanup.add(() => db.pool.end());
    let sales = 0;
    /** One round: a fresh sale, its batches inserted one after another; orders/s. */
    const round = async (events: boolean): Promise<number> => {
      const sale = `outbox-${++sales}`;
      await db.pool.query(
        `insert into sales (id, name, stock, price, currency, payment_window_seconds) values ($1, $1, $2, $3, $4, 300)`,
        [sale, opts.batches * opts.batchSize, BENCH_PRICE.price, BENCH_PRICE.currency],
      );
      await db.pool.query(
        `insert into sale_variants (sale_id, sku, label, stock, position) values ($1, 'default', 'default', $2, 0)`,
        [sale, opts.batches * opts.batchSize],
      );
      const t0 = performance.now();
      for (let b = 0; b < opts.batches; b++) {
        const winners: Winner[] = Array.from({ length: opts.batchSize }, (_, i) => ({
          orderId: `${sale}.${b}-${i}`,
          userId: `buyer-${b}-${i}`,
          qty: 1,
          seq: b * opts.batchSize + i,
          purchasedAt: Date.now(),
        }));
        // The last batch sells the stock out, as a sale's last claim reports.
        const soldOut = b === opts.batches - 1;
        if (events) await writeOrders(db.pool, sale, winners, soldOut);
        else
          await db.pool.query(WITHOUT_EVENTS, [
            sale,
            winners.map((w) => w.orderId),
            winners.map((w) => w.userId),
            winners.map((w) => w.qty),
            winners.map((w) => w.seq),
            winners.map((w) => w.purchasedAt),
            winners.map(() => null),
          ]);
      }
      return (opts.batches * opts.batchSize) / ((performance.now() - t0) / 1000);
    };
    // A warm-up of each, not counted.
    await round(true);
    await round(false);
    const withEvents: number[] = [];
    const without: number[] = [];
    for (let r = 1; r <= opts.rounds; r++) {
      // Alternated each round, so the machine's noise falls on both alike.
      for (const events of r % 2 === 1 ? [true, false] : [false, true]) {
        const rate = Math.round(await round(events));
        (events ? withEvents : without).push(rate);
      }
      progress(
        `outbox round ${r}/${opts.rounds}: with events ${withEvents.at(-1)} orders/s, without ${without.at(-1)}`,
      );
    }
    const counted = await db.pool.query<{ n: number }>('select count(*)::int as n from events');
    return {
      batches: opts.batches,
      batchSize: opts.batchSize,
      rounds: opts.rounds,
      withEvents,
      without,
      ratio: Math.round((median(withEvents) / median(without)) * 1000) / 1000,
      events: counted.rows[0]!.n,
      loadAvgAtStart,
    };
  } finally {
    await cleanup.run();
  }
}

const fmt = (v: number) => v.toLocaleString('en-US');

/** BENCHMARKS.md's section: the writer's insert with and without its event rows. */
export function outboxSection(o: OutboxResults, mode: string): string {
  const pct = Math.round(o.ratio * 1000) / 10;
  return [
    '## Outbox cost on the order writer',
    '',
    `\`bench/outbox.ts\` (\`npm run bench -- --only outbox\`, ${mode} run): the writer's batch insert as it runs (\`writeOrders\`: the orders, one \`orders.created\` row per batch, a \`sale.sold_out\` with the last batch) against the same insert without its event rows, ${o.rounds} rounds alternating the two, each a fresh sale of ${o.batches} batches of ${fmt(o.batchSize)} winners inserted one after another, on one Postgres with fsync on and durable commits. The rest of a drain does not change with the outbox, so this ratio is the floor of the whole drain's. Load average at the start ${o.loadAvgAtStart.join(' / ')}.`,
    '',
    '| insert | orders/s (median) | every round |',
    '|---|---:|---|',
    `| with its event rows | ${fmt(median(o.withEvents))} | ${o.withEvents.map(fmt).join(', ')} |`,
    `| without | ${fmt(median(o.without))} | ${o.without.map(fmt).join(', ')} |`,
    '',
    `With over without: ${pct}% (target 90%: ${pct >= 90 ? 'met' : '**missed**'}); event rows written: ${fmt(o.events)}.`,
    '',
  ].join('\n');
}
