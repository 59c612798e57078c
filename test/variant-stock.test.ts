// An operator's live stock controls of one variant, against the real API, Redis and Postgres:
// restock adds units (a sold-out size sells again at once), remove takes only units still
// available, never a buyer's. Each changes Postgres's stock and Redis's units together, is recorded
// in the audit, keeps conservation per variant and for the sale, and a refusal changes nothing.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, test } from 'node:test';
import { reconcile } from '../shared/checks/reconcile.js';
import { closeOrders } from '../shared/orders/close.js';
import { replayOnce } from '../shared/pipeline/replay.js';
import { saleKeys } from '../shared/redis/keys.js';
import { registry } from '../shared/runtime/metrics.js';
import { getSale, type Sale } from '../shared/sales/sale.js';
import { adjustStockScript } from '../shared/sales/scripts.js';
import { changeStock } from '../shared/sales/stock.js';
import { apiSuite, type ApiSuite } from './support/api.js';
import { cliHere } from './support/cli-here.js';
import { assertConserved } from './support/env.js';
import { countBy, drainWriter, HOUR, newSale, redisNow, runConcurrently, waitFor } from './support/fixtures.js';
import { outcome } from './support/http.js';
import { stateSnapshot } from './support/snapshot.js';
import { ADMIN_TOKEN } from './support/tokens.js';

let s: ApiSuite;
apiSuite((suite) => (s = suite));

const ADMIN = { authorization: `Bearer ${ADMIN_TOKEN}` };

const buy = (sale: Sale, user: string, variant?: string) =>
  s.call('POST', `/api/sales/${sale.id}/purchases`, { user, body: variant ? { qty: 1, variant } : { qty: 1 } });
const change = (sale: Sale | string, sku: string, what: 'restock' | 'remove', body: unknown) =>
  s.call('POST', `/api/sales/${typeof sale === 'string' ? sale : sale.id}/variants/${sku}/${what}`, {
    headers: ADMIN,
    body,
  });

/** Variants of these skus (labelled so), `stock` units each. */
const each = (stock: number, ...skus: string[]) => skus.map((sku) => ({ sku, label: sku, stock }));

/** Both stores' stock of a sale: Postgres's per variant and whole, Redis's units left per variant and whole. */
async function stocks(sale: Sale) {
  const k = saleKeys(sale.id);
  const pg = await s.env.pool.query<{ sku: string; stock: number; total: number }>(
    `select v.sku, v.stock, s.stock as total from sale_variants v join sales s on s.id = v.sale_id
     where v.sale_id = $1 order by v.position`,
    [sale.id],
  );
  return {
    stock: Object.fromEntries(pg.rows.map((r) => [r.sku, r.stock])),
    total: pg.rows[0]!.total,
    left: await s.env.redis.hgetall(k.variantsLeft),
    available: Number(await s.env.redis.get(k.available)),
    metaStock: Number(await s.env.redis.hget(k.meta, 'stock')),
  };
}

const audit = async (saleId: string) =>
  (
    await s.env.pool.query<{ operator: string; action: string; detail: unknown }>(
      'select operator, action, detail from audit where sale_id = $1 order by id',
      [saleId],
    )
  ).rows;

/** Conservation of the sale as Postgres records it now (its stock changed since it was made). */
async function conserved(sale: Sale): Promise<void> {
  await assertConserved(s.env, [(await getSale(s.env.pool, sale.id))!]);
}

const drain = () => drainWriter(s.env, `w-${randomBytes(4).toString('hex')}`);

describe('restock', () => {
  test('restock: a sold-out size gets units in both stores, this API stops answering it sold out, and it sells again', async () => {
    const sale = await newSale(s.env, {
      variants: [...each(1, 'S', 'M'), ...each(2, 'L')],
      paymentWindowSeconds: 3600,
    });
    assert.equal(outcome(await buy(sale, 'ann', 'S')), '202 queued');
    const refused = await buy(sale, 'bob', 'S');
    assert.equal(outcome(refused), '409 sold_out');
    assert.ok(s.purchaser.variantSoldOutAnswer(sale.id, 'S'), 'this API remembers S sold out');

    const restocked = await change(sale, 'S', 'restock', { units: 2 });
    assert.equal(outcome(restocked), '200');
    assert.deepEqual(
      {
        sku: restocked.body.sku,
        units: restocked.body.units,
        stock: restocked.body.stock,
        available: restocked.body.available,
      },
      { sku: 'S', units: 2, stock: 3, available: 2 },
    );
    assert.equal(restocked.body.sale.stock, 6);
    assert.deepEqual(await stocks(sale), {
      stock: { S: 3, M: 1, L: 2 },
      total: 6,
      left: { S: '2', M: '1', L: '2' },
      available: 5,
      metaStock: 6,
    });
    // The restock's announcement reaches this API's subscriber: the memory of S sold out goes.
    await waitFor('sold-out memory cleared', async () => s.purchaser.variantSoldOutAnswer(sale.id, 'S') === undefined);
    assert.equal(outcome(await buy(sale, 'bob', 'S')), '202 queued');
    assert.equal(outcome(await buy(sale, 'cat', 'S')), '202 queued');
    assert.equal(outcome(await buy(sale, 'dan', 'S')), '409 sold_out');
    await drain();
    await conserved(sale);
    assert.deepEqual(await audit(sale.id), [
      { operator: 'admin-token', action: 'sale.restock', detail: { sku: 'S', units: 2 } },
    ]);

    // A retried restock adds again; its answer shows the stock it left.
    const again = await change(sale, 'S', 'restock', { units: 2 });
    assert.deepEqual([again.body.stock, again.body.available], [5, 2]);
    assert.equal((await audit(sale.id)).length, 2);
    await conserved(sale);
  });

  test('restock: a one-variant sale sold out whole sells again; its units are `available` alone', async () => {
    const sale = await newSale(s.env, { stock: 1, paymentWindowSeconds: 3600 });
    assert.equal(outcome(await buy(sale, 'eve')), '202 queued');
    assert.equal(outcome(await buy(sale, 'fay')), '409 sold_out');
    assert.equal(s.purchaser.soldOut(sale.id), true, 'this API remembers the sale sold out');

    const restocked = await change(sale, 'default', 'restock', { units: 3 });
    assert.equal(outcome(restocked), '200');
    assert.deepEqual([restocked.body.stock, restocked.body.available, restocked.body.sale.stock], [4, 3, 4]);
    assert.deepEqual(await stocks(sale), { stock: { default: 4 }, total: 4, left: {}, available: 3, metaStock: 4 });
    await waitFor('sold-out memory cleared', async () => !s.purchaser.soldOut(sale.id));
    assert.equal(outcome(await buy(sale, 'fay')), '202 queued');
    await drain();
    await conserved(sale);
    assert.deepEqual(await audit(sale.id), [
      { operator: 'admin-token', action: 'sale.restock', detail: { sku: 'default', units: 3 } },
    ]);
  });
});

describe('remove', () => {
  test("remove: takes units still available, never a buyer's; more than available is refused 409 and changes nothing", async () => {
    const sale = await newSale(s.env, { variants: [...each(5, 'S'), ...each(3, 'M')], paymentWindowSeconds: 3600 });
    const held = [await buy(sale, 'gil', 'S'), await buy(sale, 'hal', 'S')];
    for (const r of held) assert.equal(outcome(r), '202 queued');
    await drain();

    const removed = await change(sale, 'S', 'remove', { units: 2 });
    assert.equal(outcome(removed), '200');
    assert.deepEqual([removed.body.stock, removed.body.available, removed.body.sale.stock], [3, 1, 6]);
    await conserved(sale);

    const before = await stateSnapshot(s.env);
    const stockBefore = await stocks(sale);
    const refused = await change(sale, 'S', 'remove', { units: 2 });
    assert.equal(outcome(refused), '409 not_enough_stock');
    assert.equal(
      refused.body.message,
      'Variant S has 1 unit available: at most 1 can be removed; the rest are held by buyers.',
    );
    assert.deepEqual(await stateSnapshot(s.env), before);
    assert.deepEqual(await stocks(sale), stockBefore);

    // The last available unit: S's stock is now what its buyers hold, and it sells out.
    const last = await change(sale, 'S', 'remove', { units: 1 });
    assert.deepEqual([last.body.stock, last.body.available], [2, 0]);
    assert.equal(outcome(await buy(sale, 'ivy', 'S')), '409 sold_out');
    assert.equal(outcome(await change(sale, 'S', 'remove', { units: 1 })), '409 not_enough_stock');
    assert.deepEqual(await stocks(sale), {
      stock: { S: 2, M: 3 },
      total: 5,
      left: { S: '0', M: '3' },
      available: 3,
      metaStock: 5,
    });
    await conserved(sale);

    // A held unit that comes back (an expiry) is the variant's again, and conservation still holds.
    await s.env.pool.query('update orders set expires_at = now() where id = $1', [held[0]!.body.orderId]);
    const { restored } = await closeOrders(s.env.pool, s.env.redis, [held[0]!.body.orderId], 'replay');
    assert.equal(restored, 1);
    assert.equal((await stocks(sale)).left.S, '1');
    await conserved(sale);
    assert.deepEqual(await audit(sale.id), [
      { operator: 'admin-token', action: 'sale.remove', detail: { sku: 'S', units: 2 } },
      { operator: 'admin-token', action: 'sale.remove', detail: { sku: 'S', units: 1 } },
    ]);
  });
});

describe('metrics', () => {
  test("metrics: flashsale_variant_units_available{sale,sku} shows each variant's units left as the replay reconciled them, restock and removal included", async () => {
    const sale = await newSale(s.env, { variants: each(3, 'S', 'M', 'L'), paymentWindowSeconds: 3600 });
    assert.equal(outcome(await buy(sale, 'jon', 'M')), '202 queued');
    assert.equal(outcome(await change(sale, 'S', 'restock', { units: 4 })), '200');
    assert.equal(outcome(await change(sale, 'L', 'remove', { units: 2 })), '200');
    await drain();
    const pass = await replayOnce({ pool: s.env.pool, redis: s.env.redis, logger: s.env.logger });
    assert.ok(pass.ran);
    assert.ok(pass.reconciliations.find((r) => r.saleId === sale.id)?.holds, 'the replay found it conserved');
    const text = await registry.metrics();
    const shown = Object.fromEntries(
      [
        ...text.matchAll(
          new RegExp(`^flashsale_variant_units_available\\{sale="${sale.id}",sku="(\\w+)"\\} (\\d+)$`, 'gm'),
        ),
      ].map((m) => [m[1], Number(m[2])]),
    );
    assert.deepEqual(shown, { S: 7, M: 2, L: 1 });
    // A sale of one variant has no such series: flashsale_sale_stock{state="available"} is its variant's.
    const plain = await newSale(s.env, { stock: 2 });
    await replayOnce({ pool: s.env.pool, redis: s.env.redis, logger: s.env.logger });
    assert.doesNotMatch(await registry.metrics(), new RegExp(`flashsale_variant_units_available\\{sale="${plain.id}"`));
  });
});

describe('reconciliation', () => {
  test('reconciliation beside a stock change: a stale stock is read afresh, and a change in flight (Redis done, Postgres not committed) is waited for, not reported', async () => {
    const sale = await newSale(s.env, { variants: each(4, 'S', 'M') });
    assert.equal(outcome(await change(sale, 'S', 'restock', { units: 3 })), '200');
    // The caller read the sale before the restock: the count takes Postgres's stock as it is now.
    assert.ok((await reconcile(s.env.pool, s.env.redis, sale.id, sale.stock, sale.variants)).holds);

    // A restock of M stopped between its Redis step and its commit, as changeStock runs it.
    const client = await s.env.pool.connect();
    try {
      await client.query('begin');
      await client.query('select 1 from sales where id = $1 for update', [sale.id]);
      await client.query(`update sale_variants set stock = stock + 2 where sale_id = $1 and sku = 'M'`, [sale.id]);
      await client.query('update sales set stock = stock + 2 where id = $1', [sale.id]);
      const { rows } = await client.query<{ id: string }>(
        `insert into audit (operator, action, sale_id, detail) values ('test', 'sale.restock', $1, $2) returning id`,
        [sale.id, { sku: 'M', units: 2 }],
      );
      assert.deepEqual(await adjustStockScript(s.env.redis, sale.id, 'M', 2, { id: rows[0]!.id, by: 'test' }), [1, 6]);
      const counted = reconcile(s.env.pool, s.env.redis, sale.id, sale.stock, sale.variants);
      await waitFor('the count waits for the change', async () => {
        const { rows } = await s.env.pool.query<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and query like '%for key share%'`,
        );
        return rows[0]!.n === 1;
      });
      await client.query('commit');
      const r = await counted;
      assert.ok(r.holds, JSON.stringify(r));
      assert.deepEqual(
        r.variants?.map((v) => [v.sku, v.total, v.available]),
        [
          ['S', 7, 7],
          ['M', 6, 6],
        ],
      );
    } finally {
      client.release();
    }
  });

  test('a restock and a removal applied in Redis whose Postgres commit fails: the stores disagree until the replay records them in Postgres, once', async () => {
    const sale = await newSale(s.env, { variants: each(4, 'S', 'M') });
    const operator = `failing-${randomBytes(4).toString('hex')}`;
    const fn = `refuse_${operator.replace('-', '_')}`;
    // The commit itself fails, after every statement and the Redis step have run: a deferred
    // constraint trigger refusing this operator's audit rows (the repair's rows are let through).
    await s.env.pool.query(`
      create function ${fn}() returns trigger language plpgsql as $$
      begin
        if new.operator = '${operator}' and not new.detail ? 'repairs' then raise exception 'commit refused'; end if;
        return new;
      end $$;
      create constraint trigger ${fn} after insert on audit deferrable initially deferred
        for each row execute function ${fn}()`);
    try {
      await assert.rejects(
        changeStock(s.env.pool, s.env.redis, sale.id, 'M', 'restock', 3, operator),
        /commit refused/,
      );
      await assert.rejects(changeStock(s.env.pool, s.env.redis, sale.id, 'S', 'remove', 1, operator), /commit refused/);
    } finally {
      await s.env.pool.query(`drop trigger ${fn} on audit; drop function ${fn}`);
    }
    // Redis sells from the new units; Postgres still counts the old stock and recorded nothing.
    assert.deepEqual(await stocks(sale), {
      stock: { S: 4, M: 4 },
      total: 8,
      left: { S: '3', M: '7' },
      available: 10,
      metaStock: 10,
    });
    assert.deepEqual(await audit(sale.id), []);
    const before = await reconcile(s.env.pool, s.env.redis, sale.id, sale.stock, sale.variants);
    assert.equal(before.holds, false);
    assert.equal(await s.env.redis.hlen(saleKeys(sale.id).stockChanges), 2);

    const pass = await replayOnce({ pool: s.env.pool, redis: s.env.redis, logger: s.env.logger });
    assert.ok(
      pass.reconciliations.find((r) => r.saleId === sale.id)?.holds,
      'the replay found it holding once recorded',
    );
    assert.deepEqual(await stocks(sale), {
      stock: { S: 3, M: 7 },
      total: 10,
      left: { S: '3', M: '7' },
      available: 10,
      metaStock: 10,
    });
    // Recorded by the repair, each naming the audit id its failed commit never kept.
    const rows = await audit(sale.id);
    assert.deepEqual(
      rows
        .map((r) => {
          const d = r.detail as { sku: string; units: number; repairs: string };
          return [r.operator, r.action, d.sku, d.units, /^[0-9]+$/.test(d.repairs)];
        })
        .sort((a, b) => String(a[2]).localeCompare(String(b[2]))),
      [
        [operator, 'sale.restock', 'M', 3, true],
        [operator, 'sale.remove', 'S', 1, true],
      ],
    );
    await conserved(sale);
    assert.equal(
      await s.env.redis.hlen(saleKeys(sale.id).stockChanges),
      0,
      'the record in Redis dropped once repaired',
    );
    // A second pass finds nothing left to record.
    await replayOnce({ pool: s.env.pool, redis: s.env.redis, logger: s.env.logger });
    assert.equal((await audit(sale.id)).length, 2);
    assert.equal((await stocks(sale)).total, 10);
  });
});

describe('refusals', () => {
  test('bad input, an unknown sku, an ended sale: 4xx {error, message}, and nothing changes in Postgres or Redis', async () => {
    const now = await redisNow(s.env.redis);
    const sale = await newSale(s.env, { variants: each(2, 'S', 'M') });
    const ended = await newSale(s.env, { stock: 5, startsAt: new Date(now - 2 * HOUR).toISOString() });
    assert.equal(outcome(await s.call('POST', `/api/sales/${ended.id}/end`, { headers: ADMIN })), '200');
    const big = await newSale(s.env, { stock: 10_000_000 });
    const draw = await newSale(s.env, {
      variants: each(2, 'S', 'M'),
      admission: 'draw',
      entriesOpenAt: new Date(now - HOUR).toISOString(),
      entriesCloseAt: new Date(now + HOUR).toISOString(),
      backfillUntil: new Date(now + 2 * HOUR).toISOString(),
    });
    const before = await stateSnapshot(s.env);
    const variantRows = async () =>
      (await s.env.pool.query('select * from sale_variants order by sale_id, position')).rows;
    const variantsBefore = await variantRows();
    const auditBefore = (await s.env.pool.query('select count(*)::int as n from audit')).rows[0].n;

    const cases: [string, ReturnType<typeof change>, string][] = [
      ['units 0', change(sale, 'S', 'restock', { units: 0 }), '400 invalid_units'],
      ['units negative', change(sale, 'S', 'remove', { units: -1 }), '400 invalid_units'],
      ['units fractional', change(sale, 'S', 'restock', { units: 1.5 }), '400 invalid_units'],
      ['units as text', change(sale, 'S', 'restock', { units: '3' }), '400 invalid_units'],
      ['units too many', change(sale, 'S', 'restock', { units: 10_000_001 }), '400 invalid_units'],
      ['no units', change(sale, 'S', 'restock', {}), '400 invalid_units'],
      ['no body', change(sale, 'S', 'restock', undefined), '400 invalid_units'],
      ['an unknown field', change(sale, 'S', 'restock', { units: 1, sku: 'M' }), '400 invalid_units'],
      ['a stock past the most a sale holds', change(big, 'default', 'restock', { units: 1 }), '400 invalid_units'],
      ['an unknown sku', change(sale, 'XL', 'restock', { units: 1 }), '400 unknown_variant'],
      ['removing an unknown sku', change(sale, 'XL', 'remove', { units: 1 }), '400 unknown_variant'],
      ['a malformed sku', change(sale, 'a.b', 'restock', { units: 1 }), '400 invalid_id'],
      ['an ended sale', change(ended, 'default', 'restock', { units: 1 }), '403 ended'],
      ['removing from an ended sale', change(ended, 'default', 'remove', { units: 1 }), '403 ended'],
      ['no such sale', change('nope', 'S', 'restock', { units: 1 }), '404 sale_not_found'],
      ['a draw sale', change(draw, 'S', 'restock', { units: 1 }), '409 fixed_stock'],
      ['removing from a draw sale', change(draw, 'M', 'remove', { units: 1 }), '409 fixed_stock'],
      [
        'no operator',
        s.call('POST', `/api/sales/${sale.id}/variants/S/restock`, { body: { units: 1 } }),
        '401 unauthorized',
      ],
    ];
    for (const [what, reply, expected] of cases) {
      const r = await reply;
      assert.equal(outcome(r), expected, what);
      assert.equal(typeof r.body.message, 'string', what);
    }
    assert.equal(
      (await change(sale, 'XL', 'restock', { units: 1 })).body.message,
      `Sale "${sale.id}" has no variant "XL": its variants are S, M.`,
    );
    assert.deepEqual(await stateSnapshot(s.env), before);
    assert.deepEqual(await variantRows(), variantsBefore);
    assert.equal((await s.env.pool.query('select count(*)::int as n from audit')).rows[0].n, auditBefore);
  });
});

describe('the CLI', () => {
  test('flashsale sale restock and remove: the same change, recorded as the CLI; a refusal exits 2 and changes nothing', async () => {
    const sale = await newSale(s.env, { variants: each(2, 'S', 'M') });
    const restocked = await cliHere(s.env, ['sale', 'restock', sale.id, 'M', '4']);
    assert.equal(restocked.code, 0, restocked.stderr);
    assert.equal(restocked.stdout.trim(), `added 4 of M in sale ${sale.id}: its stock is 6, 6 available`);
    const removed = await cliHere(s.env, ['sale', 'remove', sale.id, 'S', '1', '--json']);
    assert.equal(removed.code, 0, removed.stderr);
    const r = JSON.parse(removed.stdout);
    assert.deepEqual([r.sku, r.units, r.stock, r.available, r.sale.stock], ['S', 1, 1, 1, 7]);
    const before = await stocks(sale);
    for (const args of [
      ['remove', sale.id, 'S', '2'],
      ['restock', sale.id, 'S', '0'],
      ['restock', sale.id, 'S', '1e3'],
      ['restock', sale.id, 'XL', '1'],
    ]) {
      const refused = await cliHere(s.env, ['sale', ...args]);
      assert.equal(refused.code, 2, `${args.join(' ')}: ${refused.stdout}${refused.stderr}`);
    }
    assert.deepEqual(await stocks(sale), before);
    assert.deepEqual(
      (await audit(sale.id)).map((a) => [a.operator.startsWith('cli:'), a.action, a.detail]),
      [
        [true, 'sale.restock', { sku: 'M', units: 4 }],
        [true, 'sale.remove', { sku: 'S', units: 1 }],
      ],
    );
    await conserved(sale);
  });
});

describe('race', () => {
  test('race: restocks and removes among 200 concurrent purchases, cancels and expiries on a 3-variant sale; conservation per variant, no remove takes a held unit', async () => {
    const SKUS = ['A', 'B', 'C'];
    const sale = await newSale(s.env, { variants: each(40, ...SKUS), perUserLimit: 1, paymentWindowSeconds: 3600 });
    const added = Object.fromEntries(SKUS.map((sku) => [sku, 0]));
    const accepted: string[] = [];
    const controls: string[] = [];
    await runConcurrently(200, 20, async (i) => {
      const sku = SKUS[i % 3]!;
      if (i % 10 === 0) {
        // Every tenth worker also changes the stock of a variant: a restock or a removal, in turn.
        const what = i % 20 === 0 ? 'restock' : 'remove';
        const units = what === 'restock' ? 3 : 6;
        const r = await change(sale, SKUS[(i / 10) % 3]!, what, { units });
        controls.push(`${what} ${outcome(r)}`);
        if (r.status === 200) {
          assert.ok(r.body.available >= 0, JSON.stringify(r.body));
          added[r.body.sku as string]! += what === 'restock' ? units : -units;
        } else assert.equal(outcome(r), '409 not_enough_stock', JSON.stringify(r.body));
      }
      const bought = await buy(sale, `racer-${i}`, sku);
      if (bought.status !== 202) {
        assert.equal(outcome(bought), '409 sold_out', JSON.stringify(bought.body));
        return;
      }
      const orderId = bought.body.orderId as string;
      accepted.push(orderId);
      if (i % 7 === 0) {
        // A cancel, queued or pending as it comes.
        const cancelled = await s.call('POST', `/api/orders/${orderId}/cancel`, { user: `racer-${i}` });
        assert.equal(outcome(cancelled), '200 cancelled', JSON.stringify(cancelled.body));
      } else if (i % 7 === 1) {
        // An expiry: written, its deadline brought to now, and closed as the replay would.
        await drain();
        await s.env.pool.query(`update orders set expires_at = now() where id = $1 and status = 'pending'`, [orderId]);
        await closeOrders(s.env.pool, s.env.redis, [orderId], 'replay');
      }
    });
    await drain();
    const counted = countBy(controls, (c) => c);
    assert.ok((counted['restock 200'] ?? 0) === 10, JSON.stringify(counted));

    const now = (await getSale(s.env.pool, sale.id))!;
    // Postgres's stock is the start, with what each answered change added or took.
    assert.deepEqual(
      Object.fromEntries(now.variants.map((v) => [v.sku, v.stock])),
      Object.fromEntries(SKUS.map((sku) => [sku, 40 + added[sku]!])),
    );
    // Every accepted purchase is an order: no removal took a reserved unit.
    const orders = await s.env.pool.query<{ id: string }>('select id from orders where sale_id = $1', [sale.id]);
    assert.deepEqual(orders.rows.map((r) => r.id).sort(), accepted.slice().sort());
    const r = await reconcile(s.env.pool, s.env.redis, now.id, now.stock, now.variants);
    assert.equal(r.variants?.length, 3);
    for (const v of r.variants!) {
      assert.ok(v.holds && v.available >= 0, JSON.stringify(v));
      assert.equal(v.available + v.pending + v.paid, v.total, `variant ${v.sku}: ${JSON.stringify(v)}`);
    }
    assert.ok(r.holds, JSON.stringify(r));
  });
});
