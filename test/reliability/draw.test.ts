// A draw at scale, checked from outside: 20,000 buyers enter through the API (its routes as startApi
// assembles them, answered by app.inject: the sockets are not what this file is about), the admission
// loop makes the draw and gives the orders, and then an implementation written here from the
// documented algorithm alone (node:crypto and a plain sort; nothing of shared/admission/draw/draw.ts) recomputes
// every rank and the winners from what GET /api/sales/:saleId/draw publishes. Postgres, the API's
// views and `flashsale draw verify` must all agree with it.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { AdmissionLoop } from '../../shared/admission/loop.js';
import { getSale } from '../../shared/sales/sale.js';
import { apiSuite } from '../support/api.js';
import { cli } from '../support/cli.js';
import type { TestEnv } from '../support/env.js';
import { newSale, runConcurrently, waitFor } from '../support/fixtures.js';
import { outcome, type Inject } from '../support/http.js';

let env: TestEnv;
let call: Inject;
apiSuite((s) => ({ env, call } = s), { purchaseRatePerBuyer: 0 });

const ENTRANTS = 20_000;
const STOCK = 500;
const CONCURRENCY = 32;

/** The documented algorithm, from its description only. */
const hex = (text: string) => createHash('sha256').update(text, 'utf8').digest('hex');
function recompute(seed: string, tickets: string[]): string[] {
  return tickets
    .map((t) => [hex(`${seed}:${t}`), t] as const)
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    .map(([, t]) => t);
}

test(`a draw of ${ENTRANTS} entries recomputed from the revealed seed by an independent implementation matches the winners`, async () => {
  const sale = await newSale(env, {
    admission: 'draw',
    stock: STOCK,
    startsAt: new Date(Date.now() - 60_000).toISOString(),
    entriesCloseAt: new Date(Date.now() + 3_600_000).toISOString(),
  });
  const buyers = Array.from({ length: ENTRANTS }, (_, i) => `entrant-${i}`);
  const started = Date.now();
  const answers = await runConcurrently(ENTRANTS, CONCURRENCY, async (i) =>
    call('POST', `/api/sales/${sale.id}/entries`, { user: buyers[i] }),
  );
  const enterMs = Date.now() - started;
  assert.deepEqual([...new Set(answers.map(outcome))], ['200'], 'every entry answered 200');
  // Each entrant's secret, told to them alone: what their ticket is made of.
  const secretOf = new Map(answers.map((a, i) => [buyers[i]!, a.body.secret as string]));
  console.log(`# ${ENTRANTS} entries through the API in ${enterMs} ms`);

  // Entries close; the loop makes the draw and hands out the units.
  await env.pool.query(
    "update sales set entries_close_at = now(), backfill_until = now() + interval '1 hour' where id = $1",
    [sale.id],
  );
  const loop = new AdmissionLoop({ pool: env.pool, redis: env.redis, logger: env.logger });
  await loop.refreshSales();
  await loop.tick(Date.now());
  await waitFor(
    'the orders handed out',
    async () => {
      const won = await env.pool.query("select 1 from draw_entries where sale_id = $1 and status = 'won'", [sale.id]);
      return won.rowCount === STOCK;
    },
    30_000,
  );

  // What an outsider sees.
  const pub = await waitFor('the seed revealed', async () => {
    const r = await call('GET', `/api/sales/${sale.id}/draw`);
    return r.status === 200 && r.body.seed && r.body.winners.length === STOCK ? r.body : null;
  });
  assert.equal(hex(pub.seed), pub.seedSha256, 'the seed is the one committed to');
  assert.equal((await getSale(env.pool, sale.id))!.seedSha256, pub.seedSha256);
  assert.equal(pub.tickets.length, ENTRANTS);
  assert.equal(new Set(pub.tickets).size, ENTRANTS);
  const order = recompute(pub.seed, pub.tickets);
  assert.deepEqual(
    pub.winners.map((w: { ticket: string; drawRank: number }) => [w.ticket, w.drawRank]),
    order.slice(0, STOCK).map((t, i) => [t, i + 1]),
  );

  // Postgres holds the same ranks for every entry, and the winners' orders.
  const rows = (
    await env.pool.query<{ buyer: string; ticket: string; draw_rank: number; status: string; order_id: string | null }>(
      'select buyer, ticket, draw_rank, status, order_id from draw_entries where sale_id = $1',
      [sale.id],
    )
  ).rows;
  const rankOf = new Map(order.map((t, i) => [t, i + 1]));
  assert.equal(rows.length, ENTRANTS);
  for (const r of rows) {
    assert.equal(r.ticket, hex(`${sale.id}:${r.buyer}:${secretOf.get(r.buyer)}`));
    assert.equal(r.draw_rank, rankOf.get(r.ticket), `rank of ${r.buyer}`);
    assert.equal(r.status, r.draw_rank <= STOCK ? 'won' : 'waiting');
  }
  const orderOf = new Map(pub.winners.map((w: { ticket: string; orderId: string }) => [w.ticket, w.orderId]));
  for (const r of rows.filter((x) => x.status === 'won')) assert.equal(r.order_id, orderOf.get(r.ticket));

  // The buyers' own views say the same: the winner of rank 1, the last winner, the first to wait.
  const byRank = new Map(rows.map((r) => [r.draw_rank, r]));
  for (const rank of [1, STOCK, STOCK + 1, ENTRANTS]) {
    const r = byRank.get(rank)!;
    const view = (await call('GET', `/api/sales/${sale.id}/entries/me`, { user: r.buyer })).body;
    assert.deepEqual(view, {
      saleId: sale.id,
      state: rank <= STOCK ? 'won' : 'waiting',
      ticket: r.ticket,
      secret: secretOf.get(r.buyer),
      drawRank: rank,
      orderId: r.order_id,
      variant: 'default',
      secondChoice: null,
      sku: rank <= STOCK ? 'default' : null,
      entries: ENTRANTS,
    });
  }

  const verify = await cli(env, ['draw', 'verify', sale.id]);
  assert.equal(verify.code, 0, verify.out);
  assert.match(verify.stdout, new RegExp(`${ENTRANTS} entries .* ${STOCK} winners`));
});
