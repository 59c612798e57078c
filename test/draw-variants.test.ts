// A draw per variant against the real API, Redis and Postgres, the admission loop's ticks driven by
// the test: an entry names the variant wanted and a second choice (required on a sale of several,
// refused when it names none of the sale's), one ranking over all entries, the award per variant
// as recomputed here from scratch, orders of the right sku through the writer, backfill of a unit
// that came back to the lowest rank without one that wants its variant (told by its stream), and
// `flashsale draw verify`, which agrees and catches a winner's variant changed.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { AdmissionLoop } from '../shared/admission/loop.js';
import { checkInvariants } from '../shared/checks/invariants.js';
import { awardUnits, makeDraw, recoverAwards, reserveUnit } from '../shared/admission/draw/steps.js';
import { closeOrders } from '../shared/orders/close.js';
import { saleKeys } from '../shared/redis/keys.js';
import type { Sale } from '../shared/sales/sale.js';
import { apiEnv, type ApiEnv } from './support/api.js';
import { cli } from './support/cli.js';
import type { TestEnv } from './support/env.js';
import { closeEntries, drainWriter, endBackfillIn, newSale, openDraw, waitFor } from './support/fixtures.js';
import { http, outcome, sseEvents } from './support/http.js';
import { token } from './support/tokens.js';

let env: TestEnv;
let api: ApiEnv['api'];
apiEnv((s) => ({ env, api } = s), { challengeRatePerBuyer: 0, purchaseRatePerBuyer: 0 });

let shared: AdmissionLoop | undefined;
async function tick() {
  shared ??= new AdmissionLoop({ pool: env.pool, redis: env.redis, logger: env.logger });
  await shared.refreshSales();
  await shared.tick(Date.now());
}

const STOCK = { S: 2, M: 1, L: 1 };
const sizes = () => Object.entries(STOCK).map(([sku, stock]) => ({ sku, label: `Size ${sku}`, stock }));
/** Each entrant's first and second choice: more want S and M than there are. */
const WANTS: [string, string, string | null][] = [
  ['b1', 'S', 'M'],
  ['b2', 'S', null],
  ['b3', 'M', 'L'],
  ['b4', 'L', 'S'],
  ['b5', 'M', null],
  ['b6', 'S', 'L'],
  ['b7', 'L', null],
  ['b8', 'M', 'S'],
  ['b9', 'S', 'M'],
];

const enter = (s: Sale, user: string, body?: unknown) =>
  http(api.port, 'POST', `/api/sales/${s.id}/entries`, body === undefined ? { user } : { user, body });
const me = (s: Sale, user: string) => http(api.port, 'GET', `/api/sales/${s.id}/entries/me`, { user });
const verify = (s: Sale) => cli(env, ['draw', 'verify', s.id]);

interface Row {
  buyer: string;
  status: string;
  draw_rank: number;
  order_id: string | null;
  variant: string;
  second_choice: string | null;
  sku: string | null;
}
const rowsOf = async (s: Sale) =>
  (
    await env.pool.query<Row>(
      'select buyer, status, draw_rank, order_id, variant, second_choice, sku from draw_entries where sale_id = $1 order by draw_rank',
      [s.id],
    )
  ).rows;

/** The award as documented, from scratch: in rank order, the first choice if it has a unit left, else the second, else none. */
function expectedAward(rows: Row[]): Map<string, string | null> {
  const left = new Map(Object.entries(STOCK));
  const award = new Map<string, string | null>();
  for (const r of rows) {
    const sku = [r.variant, r.second_choice].find((v) => v !== null && left.get(v)! > 0) ?? null;
    if (sku) left.set(sku, left.get(sku)! - 1);
    award.set(r.buyer, sku);
  }
  return award;
}

describe('draw per variant', () => {
  test('entry choices: required on a sale of several, checked against its skus; a sale of one takes none; 4xx enters nothing', async () => {
    const s = await newSale(env, { ...openDraw(), variants: sizes() });
    const cases: [unknown, string][] = [
      [undefined, '400 variant_required'],
      [{}, '400 variant_required'],
      [{ variant: 'XL' }, '400 unknown_variant'],
      [{ variant: 'S', secondChoice: 'XL' }, '400 unknown_variant'],
      [{ variant: 'S', secondChoice: 'S' }, '400 bad_request'],
      [{ variant: 'S', size: 'M' }, '400 bad_request'],
      [{ variant: 's m' }, '400 unknown_variant'],
      [null, '400 bad_request'],
    ];
    for (const [body, expected] of cases) {
      const r = await enter(s, 'ann', body);
      assert.equal(outcome(r), expected, JSON.stringify(body));
      assert.deepEqual(Object.keys(r.body).sort(), ['error', 'message']);
    }
    assert.equal((await env.pool.query('select 1 from draw_entries where sale_id = $1', [s.id])).rowCount, 0);
    const ok = await enter(s, 'ann', { variant: 'M', secondChoice: 'L' });
    assert.equal(outcome(ok), '200');
    assert.deepEqual([ok.body.variant, ok.body.secondChoice, ok.body.sku], ['M', 'L', null]);
    // Entering again keeps the entry, choices included.
    assert.deepEqual((await enter(s, 'ann', { variant: 'S' })).body, ok.body);
    assert.deepEqual((await me(s, 'ann')).body, ok.body);

    const one = await newSale(env, openDraw());
    const plain = await enter(one, 'bob');
    assert.equal(outcome(plain), '200');
    assert.deepEqual([plain.body.variant, plain.body.secondChoice], ['default', null]);
    assert.equal(
      outcome(await enter(one, 'cat', { variant: 'default', secondChoice: 'other' })),
      '400 unknown_variant',
    );
    assert.equal(outcome(await enter(one, 'cat', { variant: 'default' })), '200');
  });

  test('three variants: one ranking, the award per variant as recomputed, orders of its sku; backfill gives a unit that came back to the next who wants its variant; verify agrees and catches a changed sku', async () => {
    let s = await newSale(env, { ...openDraw(), variants: sizes(), paymentWindowSeconds: 60 });
    for (const [b, variant, secondChoice] of WANTS)
      assert.equal(outcome(await enter(s, b, secondChoice ? { variant, secondChoice } : { variant })), '200');
    s = await closeEntries(env, s);
    await tick();
    await drainWriter(env, `w-${s.id}`);
    const rows = await rowsOf(s);
    assert.deepEqual(
      rows.map((r) => r.draw_rank),
      WANTS.map((_, i) => i + 1),
      'one ranking over every entry',
    );
    const award = expectedAward(rows);
    assert.deepEqual(
      rows.map((r) => [r.buyer, r.status === 'won' ? r.sku : r.status]),
      rows.map((r) => [r.buyer, award.get(r.buyer) ?? 'waiting']),
    );
    // Every unit of the stock was given: more want each size than it has.
    assert.equal(rows.filter((r) => r.status === 'won').length, 4);
    // The orders are of their winner's variant.
    const orders = await env.pool.query<{ id: string; user_id: string; sku: string }>(
      'select id, user_id, sku from orders where sale_id = $1 order by id',
      [s.id],
    );
    assert.deepEqual(
      orders.rows.map((o) => [o.id, o.user_id, o.sku]).sort(),
      rows
        .filter((r) => r.status === 'won')
        .map((r) => [r.order_id, r.buyer, r.sku])
        .sort(),
    );
    const winner = rows.find((r) => r.status === 'won')!;
    const view = (await me(s, winner.buyer)).body;
    assert.deepEqual(
      [view.state, view.variant, view.secondChoice, view.sku],
      ['won', winner.variant, winner.second_choice, winner.sku],
    );
    const pub = await waitFor('the record drawn', async () => ((await record(s)).drawn ? record(s) : null));
    assert.deepEqual(pub.stock, [
      { sku: 'S', units: 2 },
      { sku: 'M', units: 1 },
      { sku: 'L', units: 1 },
    ]);
    assert.deepEqual(
      pub.winners.map((w: { drawRank: number; sku: string }) => [w.drawRank, w.sku]),
      rows.filter((r) => r.status === 'won').map((r) => [r.draw_rank, r.sku]),
    );
    assert.equal(pub.choices.length, WANTS.length);
    let ok = await verify(s);
    assert.equal(ok.code, 0, ok.out);
    assert.match(ok.stdout, /9 entries .* 4 winners over 3 variants/);

    // The lowest rank without a unit wants `wanted`; a winner of `wanted` lets its order expire.
    const next = rows.find((r) => r.status === 'waiting')!;
    const wanted = next.variant;
    const giver = rows.find((r) => r.status === 'won' && r.sku === wanted)!;
    const others = rows.filter((r) => r.status === 'waiting' && r !== next);
    const told = sseEvents(api.port, `/api/sales/${s.id}/entries/events?access_token=${token(next.buyer)}`);
    const quiet = others.map((r) =>
      sseEvents(api.port, `/api/sales/${s.id}/entries/events?access_token=${token(r.buyer)}`),
    );
    await waitFor("the streams' first events", async () => [told, ...quiet].every((st) => st.events.length >= 1));
    await env.pool.query('update orders set expires_at = now() where id = $1', [giver.order_id]);
    await closeOrders(env.pool, env.redis, [giver.order_id!], 'replay');
    await tick();
    await told.ended;
    const backfilled = (await me(s, next.buyer)).body;
    assert.deepEqual(told.events.at(-1), backfilled);
    assert.deepEqual([backfilled.state, backfilled.sku], ['won', wanted]);
    await drainWriter(env, `w-${s.id}`);
    assert.equal(
      (await env.pool.query('select sku from orders where id = $1', [backfilled.orderId])).rows[0].sku,
      wanted,
    );
    const after = await rowsOf(s);
    assert.deepEqual(
      after.filter((r) => r.buyer !== next.buyer).map((r) => [r.buyer, r.status, r.sku]),
      rows.filter((r) => r.buyer !== next.buyer).map((r) => [r.buyer, r.status, r.sku]),
      'nobody else changed',
    );
    ok = await verify(s);
    assert.equal(ok.code, 0, ok.out);
    assert.match(ok.stdout, /5 winners over 3 variants/);

    // A winner's variant changed in the record, then its order's: each a mismatch.
    const other = winner.sku === 'L' ? 'M' : 'L';
    await env.pool.query('update draw_entries set sku = $3 where sale_id = $1 and buyer = $2', [
      s.id,
      winner.buyer,
      other,
    ]);
    const bad = await verify(s);
    await env.pool.query('update draw_entries set sku = $3 where sale_id = $1 and buyer = $2', [
      s.id,
      winner.buyer,
      winner.sku,
    ]);
    assert.equal(bad.code, 3, bad.out);
    assert.match(bad.stdout, new RegExp(`MISMATCH: rank ${winner.draw_rank} was given variant ${other}`));
    await env.pool.query('update orders set sku = $2 where id = $1', [winner.order_id, other]);
    const badOrder = await verify(s);
    await env.pool.query('update orders set sku = $2 where id = $1', [winner.order_id, winner.sku]);
    assert.equal(badOrder.code, 3, badOrder.out);
    assert.match(badOrder.stdout, /MISMATCH: order .* is of variant/);

    // Backfill over: the rest have lost, told by their streams.
    s = await endBackfillIn(env, s);
    await tick();
    await Promise.all(quiet.map((st) => st.ended));
    assert.deepEqual(
      quiet.map((st) => st.events.at(-1).state),
      others.map(() => 'lost'),
    );
    ok = await verify(s);
    assert.equal(ok.code, 0, ok.out);
    assert.match(ok.stdout, /backfill over/);
    assert.deepEqual(
      (await checkInvariants(env.pool, env.redis, { saleIds: [s.id], replayIntervalMs: 3_600_000 })).violations,
      [],
    );
  });

  test('the stock goes as recomputed even when a unit comes back before it is all given: a step stopped after rank 1, whose order then expired', async () => {
    let s = await newSale(env, {
      ...openDraw(),
      variants: [
        { sku: 'S', label: 'S', stock: 1 },
        { sku: 'M', label: 'M', stock: 1 },
      ],
      paymentWindowSeconds: 60,
    });
    for (const b of ['c1', 'c2', 'c3']) assert.equal(outcome(await enter(s, b, { variant: 'S' })), '200');
    s = await closeEntries(env, s);
    assert.equal(await makeDraw(env.pool, s, Date.now()), 3);
    // The ranking reads no choice: each rank's choices are set here, so the case does not depend on the seed.
    const [r1, r2, r3] = await rowsOf(s);
    const choose = (r: Row, variant: string, second: string | null) =>
      env.pool.query('update draw_entries set variant = $3, second_choice = $4 where sale_id = $1 and buyer = $2', [
        s.id,
        r.buyer,
        variant,
        second,
      ]);
    // Recomputed: rank 1 takes S, rank 2 finds S gone and takes M, rank 3 finds M gone.
    await choose(r1!, 'S', null);
    await choose(r2!, 'S', 'M');
    await choose(r3!, 'M', null);
    const deps = { pool: env.pool, redis: env.redis, buyCountTtlSeconds: 86_400 };
    // The award of rank 1 reached Redis and the step stopped; the next one records it.
    assert.equal(await reserveUnit(deps, s, 1, r1!.buyer, 'S'), 1);
    assert.equal(await recoverAwards(env.pool, env.redis, s), 1);
    await drainWriter(env, `w-${s.id}`);
    const [won1] = await rowsOf(s);
    await env.pool.query('update orders set expires_at = now() where id = $1', [won1!.order_id]);
    await closeOrders(env.pool, env.redis, [won1!.order_id!], 'replay');
    assert.equal(await env.redis.hget(saleKeys(s.id).variantsLeft, 'S'), '1', "rank 1's unit of S came back");
    // S is back in Redis, yet rank 2 gets M, as the walk over the stock gives it; S waits for backfill,
    // which nobody still waiting wants.
    assert.equal(await awardUnits(deps, s, Date.now()), 1);
    assert.equal(await awardUnits(deps, s, Date.now()), 0);
    assert.deepEqual(
      (await rowsOf(s)).map((r) => [r.draw_rank, r.status, r.sku]),
      [
        [1, 'won', 'S'],
        [2, 'won', 'M'],
        [3, 'waiting', null],
      ],
    );
    await drainWriter(env, `w-${s.id}`);
    const ok = await verify(s);
    assert.equal(ok.code, 0, ok.out);
  });
});

async function record(s: Sale) {
  return (await http(api.port, 'GET', `/api/sales/${s.id}/draw`)).body;
}
