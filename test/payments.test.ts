// Payments by signed webhook against the real API, Postgres and Redis: a verified event pays a
// pending order once; anything unsigned, forged or stale is refused with nothing recorded; money
// for an order that can no longer take it is kept on record as a refund, and moves no stock.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { afterEach, describe, test } from 'node:test';
import { buildApp } from '../shared/http/app.js';
import { checkInvariants } from '../shared/checks/invariants.js';
import { saleKeys } from '../shared/redis/keys.js';
import { metrics } from '../shared/runtime/metrics.js';
import { restore } from '../shared/orders/close.js';
import { closeDue } from '../shared/orders/queries.js';
import { EVENT_ID_MAX, PAYMENT_ID_MAX } from '../shared/payments/provider.js';
import { SIGNATURE_TOLERANCE_SECONDS, signPayload } from '../shared/payments/providers/signed-webhook.js';
import { replayOnce } from '../shared/pipeline/replay.js';
import { pino } from 'pino';
import { Purchaser } from '../shared/purchase/purchaser.js';
import type { Sale } from '../shared/sales/sale.js';
import { apiSuite } from './support/api.js';
import { cli } from './support/cli.js';
import { assertConserved, type TestEnv } from './support/env.js';
import { newSale, runConcurrently, drainWriter } from './support/fixtures.js';
import { injector, type Inject, type Reply } from './support/http.js';
import { stateSnapshot } from './support/snapshot.js';
import { ADMIN_TOKEN, PAYMENT_WEBHOOK_SECRET } from './support/tokens.js';

let env: TestEnv;
let call: Inject;
const sales: Sale[] = [];

apiSuite((s) => ({ env, call } = s));
afterEach(async () => {
  await assertConserved(env, sales);
  const report = await checkInvariants(env.pool, env.redis, {
    saleIds: sales.map((s) => s.id),
    replayIntervalMs: 3_600_000,
  });
  assert.deepEqual(report.violations, []);
});

const now = () => Math.floor(Date.now() / 1000);

/** A delivery as the provider makes it: these exact bytes, signed with `secret` at `t`. */
function deliver(
  event: unknown,
  opts: { secret?: string; t?: number; signature?: string | null; via?: Inject } = {},
): Promise<Reply> {
  const raw = typeof event === 'string' ? event : JSON.stringify(event);
  const signature =
    opts.signature === undefined
      ? signPayload(opts.secret ?? PAYMENT_WEBHOOK_SECRET, raw, opts.t ?? now())
      : opts.signature;
  return (opts.via ?? call)('POST', '/api/payments/webhook', {
    body: raw,
    headers: signature === null ? {} : { 'flashsale-signature': signature },
  });
}

/** A payment of one unit of a test sale (SALE_PRICE: 1999 EUR), unless `fields` say otherwise. */
const succeeded = (orderId: string, fields: Record<string, unknown> = {}) => ({
  id: `evt_${randomUUID()}`,
  type: 'payment.succeeded',
  orderId,
  amount: 1999,
  currency: 'EUR',
  ...fields,
});

/** A sale with one order per user, written to Postgres (pending, inside its window). */
async function ordersOf(
  users: string[],
  fields: Record<string, unknown> = {},
  qty = 1,
): Promise<{ sale: Sale; ids: string[] }> {
  const sale = await newSale(env, { stock: 5, paymentWindowSeconds: 3600, ...fields });
  sales.push(sale);
  const ids: string[] = [];
  for (const user of users) {
    const r = await call('POST', `/api/sales/${sale.id}/purchases`, { body: { qty }, user });
    assert.equal(r.status, 202);
    ids.push(r.body.orderId as string);
  }
  await drainWriter(env, `w-${sale.id}`);
  return { sale, ids };
}

const status = async (orderId: string) =>
  (await env.pool.query<{ status: string }>('select status from orders where id = $1', [orderId])).rows[0]?.status;
const paymentsOf = async (orderId: string) =>
  (
    await env.pool.query<{
      id: string;
      outcome: string;
      reason: string | null;
      amount: number | null;
      currency: string | null;
    }>('select id, outcome, reason, amount, currency from payments where order_id = $1 order by received_at', [orderId])
  ).rows;
/** Everything a refused delivery must leave as it was: Redis, sales, orders, and every payment row. */
const everything = async () => ({
  ...(await stateSnapshot(env)),
  payments: (
    await env.pool.query<{ r: string }>('select row_to_json(p)::text as r from payments p order by id')
  ).rows.map((x) => x.r),
});
/** The id a signed webhook's event is recorded under (sql/0010): its provider's name, a colon, the event's own id. */
const recorded = (eventId: string) => `signed:${eventId}`;
const counted = async (outcome: string) =>
  (await metrics.payments.get()).values.find((v) => v.labels.outcome === outcome)?.value ?? 0;

describe('payments', () => {
  test('payments: a signed payment.succeeded pays a pending order, records the payment and drops its expiry key', async () => {
    const {
      sale,
      ids: [id],
    } = await ordersOf(['alice']);
    assert.equal(await env.redis.exists(saleKeys(sale.id).expiry(id!)), 1);
    const applied = await counted('applied');
    const event = succeeded(id!);
    const r = await deliver(event);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual(r.body, { id: event.id, outcome: 'applied' });
    assert.equal(await status(id!), 'paid');
    assert.deepEqual(await paymentsOf(id!), [
      { id: recorded(event.id), outcome: 'applied', reason: null, amount: 1999, currency: 'EUR' },
    ]);
    const stored = await env.pool.query<{ raw: Buffer }>('select raw from payments where id = $1', [
      recorded(event.id),
    ]);
    assert.deepEqual(stored.rows[0]!.raw, Buffer.from(JSON.stringify(event)), 'the signed bytes are kept as they came');
    assert.equal(await env.redis.exists(saleKeys(sale.id).expiry(id!)), 0);
    assert.equal(await counted('applied'), applied + 1);
    assert.equal((await call('GET', `/api/orders/${id}`, { user: 'alice' })).body.status, 'paid');
  });

  test('payments: a redelivered event answers 200 and changes nothing, even ten at once', async () => {
    const {
      ids: [id, other],
    } = await ordersOf(['bob', 'bea']);
    const event = succeeded(id!);
    assert.equal((await deliver(event)).body.outcome, 'applied');
    const state = await everything();
    const duplicates = await counted('duplicate');
    const again = await deliver(event);
    assert.equal(again.status, 200);
    assert.deepEqual(again.body, { id: event.id, outcome: 'applied', duplicate: true });
    assert.deepEqual(await everything(), state);

    // Concurrent first deliveries of one event: one decides, the others find it decided.
    const burst = succeeded(other!);
    const answers = await runConcurrently(10, 10, () => deliver(burst));
    assert.deepEqual(
      answers.map((a) => a.status),
      Array(10).fill(200),
    );
    assert.equal(answers.filter((a) => !a.body.duplicate).length, 1);
    assert.ok(answers.every((a) => a.body.outcome === 'applied'));
    assert.deepEqual(await paymentsOf(other!), [
      { id: recorded(burst.id), outcome: 'applied', reason: null, amount: 1999, currency: 'EUR' },
    ]);
    assert.equal(await counted('duplicate'), duplicates + 10);
  });

  test('payments: a forged, unsigned, malformed, tampered or stale delivery is refused 400 with nothing recorded', async () => {
    const {
      ids: [id],
    } = await ordersOf(['carl']);
    const event = succeeded(id!);
    const raw = JSON.stringify(event);
    const good = signPayload(PAYMENT_WEBHOOK_SECRET, raw);
    const state = await everything();
    const refused = await counted('refused');
    const stale = SIGNATURE_TOLERANCE_SECONDS + 2;
    const cases: [string, Promise<Reply>, string][] = [
      ['unsigned', deliver(event, { signature: null }), 'invalid_signature'],
      ['another secret', deliver(event, { secret: 'not-the-webhook-secret-0123' }), 'invalid_signature'],
      ['no timestamp', deliver(event, { signature: good.replace(/^t=\d+,/, '') }), 'invalid_signature'],
      ['no v1', deliver(event, { signature: good.replace(/,v1=.*$/, '') }), 'invalid_signature'],
      ['short v1', deliver(event, { signature: good.slice(0, -2) }), 'invalid_signature'],
      ['v0 only', deliver(event, { signature: good.replace('v1=', 'v0=') }), 'invalid_signature'],
      ['tampered amount', deliver(raw.replace('1999', '1'), { signature: good }), 'invalid_signature'],
      [
        'another timestamp',
        deliver(event, { signature: good.replace(/^t=(\d+)/, (_, t: string) => `t=${Number(t) - 1}`) }),
        'invalid_signature',
      ],
      // `now()` drops the fraction and the server reads its clock later: 2 s past the tolerance is
      // past it on the server whatever the fraction (1 s ahead was not, when a second boundary fell between).
      [`${stale} s old`, deliver(event, { t: now() - stale }), 'stale_signature'],
      [`${stale} s ahead`, deliver(event, { t: now() + stale }), 'stale_signature'],
      ['signed, not JSON', deliver('{"id":'), 'invalid_event'],
      ['signed, a key twice', deliver(raw.replace('{', `{"orderId":"${id}",`)), 'invalid_event'],
      ['signed, no order id', deliver({ id: 'evt_no_order', type: 'payment.succeeded' }), 'invalid_event'],
      ['signed, no event id', deliver({ type: 'payment.succeeded', orderId: id }), 'invalid_event'],
      ['signed, a fractional amount', deliver(succeeded(id!, { amount: 19.99 })), 'invalid_event'],
      ['signed, no amount', deliver(succeeded(id!, { amount: undefined })), 'invalid_event'],
      ['signed, an amount as text', deliver(succeeded(id!, { amount: '1999' })), 'invalid_event'],
      ['signed, a negative amount', deliver(succeeded(id!, { amount: -1999 })), 'invalid_event'],
      ['signed, no currency', deliver(succeeded(id!, { currency: undefined })), 'invalid_event'],
      ['signed, a currency as a number', deliver(succeeded(id!, { currency: 978 })), 'invalid_event'],
      ['signed, a null currency', deliver(succeeded(id!, { currency: null })), 'invalid_event'],
    ];
    for (const [what, reply, code] of cases) {
      const r = await reply;
      assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error, code, what);
      assert.equal(typeof r.body.message, 'string');
    }
    assert.deepEqual(await everything(), state);
    assert.equal(await status(id!), 'pending');
    assert.equal(await counted('refused'), refused + cases.length);
    // A rotation: the old secret's signature next to the new one's is accepted.
    // Both signed at `good`'s timestamp: a second boundary crossed since would otherwise part them.
    const t = Number(/^t=(\d+)/.exec(good)![1]);
    const rotated = `${signPayload('the-previous-secret-0123456', raw, t)},${good.replace(/^t=\d+,/, '')}`;
    assert.equal((await deliver(event, { signature: rotated })).body.outcome, 'applied');
  });

  test('payments: money for an expired order is recorded refund_due, moves no stock and is listed by `flashsale refunds`', async () => {
    const {
      sale,
      ids: [late, overdue, twice],
    } = await ordersOf(['dora', 'dan', 'dee']);
    // Closed and its unit back on sale; past its deadline but not yet closed; paid already.
    await env.pool.query(`update orders set expires_at = now() where id = any($1::text[])`, [[late, overdue]]);
    assert.equal(await restore(env.pool, env.redis, await closeDue(env.pool, [late!])), 1);
    assert.equal((await deliver(succeeded(twice!))).body.outcome, 'applied');
    const available = await env.redis.get(saleKeys(sale.id).available);
    const events = [succeeded(late!), succeeded(overdue!), succeeded(twice!, { amount: 700, currency: 'USD' })];
    const reasons = ['order_expired', 'order_expired', 'already_paid'];
    for (const [i, e] of events.entries())
      assert.deepEqual((await deliver(e)).body, { id: e.id, outcome: 'refund_due', reason: reasons[i] });
    assert.deepEqual(
      [await status(late!), await status(overdue!), await status(twice!)],
      ['expired', 'pending', 'paid'],
    );
    assert.equal(await env.redis.get(saleKeys(sale.id).available), available, 'no stock moved');
    // The overdue order is closed as usual, and its unit goes back on sale once.
    assert.equal(await restore(env.pool, env.redis, await closeDue(env.pool, [overdue!])), 1);

    const listed = await cli(env, ['refunds', '--json']);
    assert.equal(listed.code, 0, listed.stderr);
    const mine = (JSON.parse(listed.stdout) as { paymentId: string; receivedAt: string }[]).filter((r) =>
      events.some((e) => recorded(e.id) === r.paymentId),
    );
    const open = { refundedAt: null, reference: null, receivedAt: 'string' };
    assert.deepEqual(
      mine.map((r) => ({ ...r, receivedAt: typeof r.receivedAt })),
      [
        {
          paymentId: recorded(events[0]!.id),
          orderId: late,
          saleId: sale.id,
          userId: 'dora',
          reason: 'order_expired',
          amount: 1999,
          currency: 'EUR',
          ...open,
        },
        {
          paymentId: recorded(events[1]!.id),
          orderId: overdue,
          saleId: sale.id,
          userId: 'dan',
          reason: 'order_expired',
          amount: 1999,
          currency: 'EUR',
          ...open,
        },
        {
          paymentId: recorded(events[2]!.id),
          orderId: twice,
          saleId: sale.id,
          userId: 'dee',
          reason: 'already_paid',
          amount: 700,
          currency: 'USD',
          ...open,
        },
      ],
    );
    const table = await cli(env, ['refunds']);
    assert.equal(table.code, 0, table.stderr);
    assert.match(table.stdout, /^payment +order +sale +buyer +amount +reason +received\n/);
    assert.match(
      table.stdout,
      new RegExp(
        `${recorded(events[0]!.id)} +${late!.replace('.', '\\.')} +${sale.id} +dora +1999 EUR +order_expired +\\d{4}-`,
      ),
    );
  });

  test('payments: an order still queued answers 503 (the provider retries), an unknown one 404, an unknown type 200 ignored; none recorded', async () => {
    const sale = await newSale(env, { stock: 2, paymentWindowSeconds: 3600 });
    sales.push(sale);
    const queued = (await call('POST', `/api/sales/${sale.id}/purchases`, { body: { qty: 1 }, user: 'erin' })).body
      .orderId as string;
    const state = await everything();
    const waiting = await deliver(succeeded(queued));
    assert.equal(waiting.status, 503, JSON.stringify(waiting.body));
    assert.equal(waiting.body.error, 'unavailable');
    const unknown = await deliver(succeeded(`${sale.id}.${randomUUID()}`));
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.error, 'order_not_found');
    const ignored = { id: `evt_${randomUUID()}`, type: 'payment.refunded', orderId: queued };
    assert.deepEqual((await deliver(ignored)).body, { id: ignored.id, outcome: 'ignored' });
    const again = await deliver(ignored);
    assert.equal(again.status, 200, 'the same id with the same type stays ignored');
    assert.deepEqual(again.body, { id: ignored.id, outcome: 'ignored' });
    assert.deepEqual(await everything(), state);
    // Once written, the provider's retry of the same event pays it.
    await drainWriter(env, `w-${sale.id}`);
    const event = succeeded(queued);
    assert.equal((await deliver(event)).body.outcome, 'applied');
    assert.equal(await status(queued), 'paid');
  });

  test('payments: POST /api/orders/:id/pay exists only with DIRECT_PAY, and takes the webhook path', async () => {
    const {
      ids: [id],
    } = await ordersOf(['fay']);
    const paid = await call('POST', `/api/orders/${id}/pay`, { user: 'fay' });
    assert.deepEqual(paid.body, { orderId: id, status: 'paid' });
    // It pays what the provider would charge: price x qty in the sale's currency.
    assert.deepEqual(await paymentsOf(id!), [
      { id: recorded(`direct.${id}`), outcome: 'applied', reason: null, amount: 1999, currency: 'EUR' },
    ]);
    assert.deepEqual((await call('POST', `/api/orders/${id}/pay`, { user: 'fay' })).body, {
      orderId: id,
      status: 'paid',
    });
    assert.equal((await paymentsOf(id!)).length, 1, 'paying again records nothing');

    const config = { ...env.config, directPay: false };
    const app = buildApp({
      config,
      pool: env.pool,
      redis: env.redis,
      purchaser: new Purchaser(env.redis, config),
      logger: env.logger,
    });
    await app.ready();
    try {
      const via = injector(app);
      const {
        ids: [other],
      } = await ordersOf(['gus']);
      const r = await via('POST', `/api/orders/${other}/pay`, { user: 'gus' });
      assert.equal(r.status, 404);
      assert.equal(r.body.error, 'not_found');
      assert.equal(await status(other!), 'pending');
      assert.equal((await deliver(succeeded(other!), { via })).body.outcome, 'applied');
    } finally {
      await app.close();
    }
  });
  test('payments: DIRECT_PAY refuses 409 an order paid by another payment, cancelled or expired, and records nothing; a second click stays 200', async () => {
    const {
      ids: [byWebhook, cancelled, expired, clicked],
    } = await ordersOf(['nia', 'ned', 'noa', 'nel']);
    assert.equal((await deliver(succeeded(byWebhook!))).body.outcome, 'applied');
    assert.equal((await call('POST', `/api/orders/${cancelled}/cancel`, { user: 'ned' })).status, 200);
    await env.pool.query('update orders set expires_at = now() where id = $1', [expired]);
    assert.deepEqual((await call('POST', `/api/orders/${clicked}/pay`, { user: 'nel' })).body, {
      orderId: clicked,
      status: 'paid',
    });
    const state = await everything();
    for (const [id, user, code] of [
      [byWebhook, 'nia', 'order_paid'],
      [cancelled, 'ned', 'order_cancelled'],
      [expired, 'noa', 'order_expired'],
    ] as const) {
      const r = await call('POST', `/api/orders/${id}/pay`, { user });
      assert.equal(r.status, 409, `${code}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error, code);
      assert.match(r.body.message, /Nothing was charged|nothing was charged/);
    }
    assert.deepEqual((await call('POST', `/api/orders/${clicked}/pay`, { user: 'nel' })).body, {
      orderId: clicked,
      status: 'paid',
    });
    assert.deepEqual(await everything(), state, 'no refund due, nothing changed');
    assert.deepEqual(
      [await status(byWebhook!), await status(cancelled!), await status(expired!)],
      ['paid', 'cancelled', 'pending'],
    );
    // The provider's own webhook still records what it charged for the expired order.
    assert.deepEqual((await deliver(succeeded(expired!))).body.reason, 'order_expired');
    assert.deepEqual(
      (await paymentsOf(expired!)).map((p) => p.outcome),
      ['refund_due'],
    );
    await restore(env.pool, env.redis, await closeDue(env.pool, [expired!]));
  });

  test("payments: only price x qty in the sale's currency pays; any other amount or currency is refund_due with its reason and the order stays pending", async () => {
    const {
      sale,
      ids: [id],
    } = await ordersOf(['hana'], { perUserLimit: 2, maxPerOrder: 2 }, 2);
    const available = await env.redis.get(saleKeys(sale.id).available);
    const wrong: [Record<string, unknown>, string][] = [
      [{ amount: 1999 }, 'amount_mismatch'],
      [{ amount: 3999 }, 'amount_mismatch'],
      [{ amount: 0 }, 'amount_mismatch'],
      [{ amount: 3998, currency: 'USD' }, 'currency_mismatch'],
      [{ amount: 3998, currency: 'eur' }, 'currency_mismatch'],
      [{ amount: 1999, currency: 'GBP' }, 'currency_mismatch'],
    ];
    const events = wrong.map(([fields]) => succeeded(id!, fields));
    for (const [i, e] of events.entries()) {
      const r = await deliver(e);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.deepEqual(r.body, { id: e.id, outcome: 'refund_due', reason: wrong[i]![1] });
      assert.equal(await status(id!), 'pending', JSON.stringify(wrong[i]));
    }
    assert.equal(await env.redis.get(saleKeys(sale.id).available), available, 'no stock moved');
    assert.equal(await env.redis.exists(saleKeys(sale.id).expiry(id!)), 1, 'the order still expires on time');
    const right = succeeded(id!, { amount: 3998 });
    assert.deepEqual((await deliver(right)).body, { id: right.id, outcome: 'applied' });
    assert.equal(await status(id!), 'paid');
    assert.deepEqual(
      (await paymentsOf(id!)).map((p) => [p.outcome, p.reason, p.amount, p.currency]),
      [
        ...wrong.map(([f, reason]) => ['refund_due', reason, f.amount, f.currency ?? 'EUR']),
        ['applied', null, 3998, 'EUR'],
      ],
    );
    // A redelivery answers the recorded reason.
    assert.deepEqual((await deliver(events[0]!)).body, {
      id: events[0]!.id,
      outcome: 'refund_due',
      reason: 'amount_mismatch',
      duplicate: true,
    });
    const listed = JSON.parse((await cli(env, ['refunds', '--json'])).stdout) as {
      paymentId: string;
      reason: string;
    }[];
    assert.deepEqual(
      listed.filter((r) => events.some((e) => recorded(e.id) === r.paymentId)).map((r) => r.reason),
      wrong.map(([, reason]) => reason),
    );
  });

  test('payments: a sale made before prices (price null) takes any amount, by webhook and by DIRECT_PAY', async () => {
    const {
      sale,
      ids: [a, b],
    } = await ordersOf(['ivy', 'ian']);
    await env.pool.query('update sales set price = null, currency = null where id = $1', [sale.id]);
    const view = await call('GET', `/api/sales/${sale.id}`);
    assert.deepEqual([view.body.price, view.body.currency], [null, null]);
    const any = succeeded(a!, { amount: 5, currency: 'GBP' });
    assert.deepEqual((await deliver(any)).body, { id: any.id, outcome: 'applied' });
    assert.deepEqual((await call('POST', `/api/orders/${b}/pay`, { user: 'ian' })).body, {
      orderId: b,
      status: 'paid',
    });
    assert.deepEqual(await paymentsOf(b!), [
      { id: recorded(`direct.${b}`), outcome: 'applied', reason: null, amount: 0, currency: 'XXX' },
    ]);
  });

  test('payments: an event id delivered again with other bytes (another type too) is 409 event_conflict, recorded nowhere and logged PAYMENT_EVENT_CONFLICT; the same bytes stay 200 duplicate', async () => {
    const lines: { level: number; alert?: string; event?: { id: string } }[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const app = buildApp({
      config: env.config,
      pool: env.pool,
      redis: env.redis,
      purchaser: new Purchaser(env.redis, env.config),
      logger,
    });
    await app.ready();
    try {
      const via = injector(app);
      const {
        ids: [id, other],
      } = await ordersOf(['jack', 'jill']);
      const event = succeeded(id!);
      const raw = JSON.stringify(event);
      assert.equal((await deliver(raw, { via })).body.outcome, 'applied');
      const state = await everything();
      const conflicts = await counted('conflict');
      // Another amount; the same fields spaced otherwise; the same id for another order; another type (ignored, were the id new).
      const bodies = [
        JSON.stringify({ ...event, amount: 1 }),
        raw.replace(',', ', '),
        `${raw}\n`,
        JSON.stringify({ ...event, orderId: other }),
        JSON.stringify({ id: event.id, type: 'payment.refunded', orderId: id }),
      ];
      for (const body of bodies) {
        const r = await deliver(body, { via });
        assert.equal(r.status, 409, `${body}: ${JSON.stringify(r.body)}`);
        assert.equal(r.body.error, 'event_conflict');
        assert.match(r.body.message, new RegExp(`Event "${event.id}" was recorded with a different body`));
      }
      assert.deepEqual(await everything(), state, 'nothing recorded, nothing changed');
      assert.equal(await status(other!), 'pending');
      assert.equal(await counted('conflict'), conflicts + bodies.length);
      const alerts = lines.filter((l) => l.alert === 'PAYMENT_EVENT_CONFLICT');
      assert.deepEqual(
        alerts.map((l) => [l.level, l.event?.id]),
        Array(bodies.length).fill([50, event.id]),
      );
      assert.deepEqual((await deliver(raw, { via })).body, { id: event.id, outcome: 'applied', duplicate: true });
    } finally {
      await app.close();
    }
  });

  test('payments: the exact signed bytes are stored, whatever their spacing, key order or escapes', async () => {
    const {
      ids: [id],
    } = await ordersOf(['kim']);
    const eventId = `evt_${randomUUID()}`;
    // Keys out of order, odd spacing, a \u escape for "E", raw UTF-8 and an escaped emoji: a
    // re-serialisation would change every one of them.
    const raw = `{ "type" :"payment.succeeded",\n\t"amount":1999 , "currency" : "\\u0045UR","orderId":"${id}",  "note":"café \\ud83d\\ude00 ☕",\r\n"id":"${eventId}"  }`;
    assert.deepEqual((await deliver(raw)).body, { id: eventId, outcome: 'applied' });
    const stored = await env.pool.query<{ raw: Buffer; currency: string }>(
      'select raw, currency from payments where id = $1',
      [recorded(eventId)],
    );
    assert.ok(stored.rows[0]!.raw.equals(Buffer.from(raw, 'utf8')), `stored ${stored.rows[0]!.raw.toString('utf8')}`);
    assert.equal(stored.rows[0]!.currency, 'EUR');
  });

  test('refunds: an event id of 300 characters goes webhook -> refund due -> refunded over HTTP; one above EVENT_ID_MAX is 400 invalid_event, nothing recorded', async () => {
    const {
      ids: [id, other],
    } = await ordersOf(['mia', 'max']);
    // Characters a path must percent-encode: the router's limit is on the decoded id.
    const long = `evt_${'a/%?#'.repeat(59)}z`;
    assert.equal(long.length, 300);
    const event = succeeded(id!, { id: long, amount: 1 });
    assert.deepEqual((await deliver(event)).body, { id: long, outcome: 'refund_due', reason: 'amount_mismatch' });
    const marked = await call('POST', `/api/payments/${encodeURIComponent(recorded(long))}/refund`, {
      body: { reference: 'psp-refund-long' },
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    assert.equal(marked.status, 200, JSON.stringify(marked.body));
    assert.equal(marked.body.paymentId, recorded(long));
    const row = await env.pool.query('select refund_reference from payments where id = $1', [recorded(long)]);
    assert.deepEqual(row.rows, [{ refund_reference: 'psp-refund-long' }]);

    // The longest id taken is refundable too; one character more is refused before anything is recorded.
    const longest = succeeded(other!, { id: 'e'.repeat(EVENT_ID_MAX), amount: 1 });
    assert.equal((await deliver(longest)).body.outcome, 'refund_due');
    const closed = await call('POST', `/api/payments/${recorded(longest.id)}/refund`, {
      body: { reference: 'r' },
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    assert.equal(closed.status, 200, JSON.stringify(closed.body));
    const state = await everything();
    const over = await deliver(succeeded(other!, { id: 'e'.repeat(EVENT_ID_MAX + 1) }));
    assert.equal(over.status, 400, JSON.stringify(over.body));
    assert.equal(over.body.error, 'invalid_event');
    assert.match(over.body.message, new RegExp(`1 to ${EVENT_ID_MAX} printable characters`));
    assert.deepEqual(await everything(), state);
    const beyond = await call('POST', `/api/payments/${'p'.repeat(PAYMENT_ID_MAX + 1)}/refund`, {
      body: { reference: 'r' },
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    assert.equal(beyond.status, 400);
    assert.equal(beyond.body.error, 'invalid_id');
  });

  test('refunds: closed by the admin route or `flashsale refunds mark`; marking again answers the first record; unknown 404, applied 409; the open ones are counted for the gauge', async () => {
    const {
      ids: [a, b, c],
    } = await ordersOf(['lea', 'leo', 'lou']);
    const refundA = succeeded(a!, { amount: 1 });
    const refundB = succeeded(b!, { currency: 'USD' });
    const paid = succeeded(c!);
    for (const e of [refundA, refundB, paid]) assert.equal((await deliver(e)).status, 200);
    const mark = (paymentId: string, body: unknown, token = ADMIN_TOKEN) =>
      call('POST', `/api/payments/${encodeURIComponent(paymentId)}/refund`, {
        body,
        headers: { authorization: `Bearer ${token}` },
      });
    const before = await everything();
    for (const [what, reply, code, status] of [
      ['unknown', mark('evt_nobody', { reference: 'r' }), 'payment_not_found', 404],
      ['applied', mark(recorded(paid.id), { reference: 'r' }), 'not_refund_due', 409],
      ['no reference', mark(recorded(refundA.id), {}), 'bad_request', 400],
      ['empty reference', mark(recorded(refundA.id), { reference: '' }), 'bad_request', 400],
      ['a control character', mark(recorded(refundA.id), { reference: 'ref\u0007' }), 'bad_request', 400],
      ['not the admin', mark(recorded(refundA.id), { reference: 'r' }, 'not-the-admin-token-0123'), 'forbidden', 403],
    ] as [string, Promise<Reply>, string, number][]) {
      const r = await reply;
      assert.equal(r.status, status, `${what}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error, code, what);
    }
    assert.deepEqual(await everything(), before, 'a refused mark changes nothing');

    const first = await mark(recorded(refundA.id), { reference: 'psp-refund-0001' });
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.equal(first.body.paymentId, recorded(refundA.id));
    assert.equal(first.body.reason, 'amount_mismatch');
    assert.equal(first.body.reference, 'psp-refund-0001');
    assert.equal(typeof first.body.refundedAt, 'string');
    const again = await mark(recorded(refundA.id), { reference: 'another-reference' });
    assert.deepEqual(again.body, first.body, 'marking twice answers the first record unchanged');
    const row = await env.pool.query(
      'select refund_reference, refunded_at is not null as refunded from payments where id = $1',
      [recorded(refundA.id)],
    );
    assert.deepEqual(row.rows, [{ refund_reference: 'psp-refund-0001', refunded: true }]);

    const byCli = await cli(env, [
      'refunds',
      'mark',
      recorded(refundB.id),
      '--reference',
      'bank transfer 42',
      '--json',
    ]);
    assert.equal(byCli.code, 0, byCli.stderr);
    assert.equal(JSON.parse(byCli.stdout).reference, 'bank transfer 42');
    const unknown = await cli(env, ['refunds', 'mark', 'evt_nobody', '--reference', 'x']);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /No payment has the id "evt_nobody"/);
    const applied = await cli(env, ['refunds', 'mark', recorded(paid.id), '--reference', 'x']);
    assert.equal(applied.code, 2);
    assert.match(applied.stderr, /paid its order: there is nothing to refund/);

    const open = JSON.parse((await cli(env, ['refunds', '--json'])).stdout) as { paymentId: string }[];
    assert.ok(
      !open.some((r) => r.paymentId === recorded(refundA.id) || r.paymentId === recorded(refundB.id)),
      'closed refunds are not listed by default',
    );
    const all = JSON.parse((await cli(env, ['refunds', '--all', '--json'])).stdout) as {
      paymentId: string;
      reference: string | null;
    }[];
    assert.deepEqual(
      all
        .filter((r) => r.paymentId === recorded(refundA.id) || r.paymentId === recorded(refundB.id))
        .map((r) => r.reference),
      ['psp-refund-0001', 'bank transfer 42'],
    );
    const table = await cli(env, ['refunds', '--all']);
    assert.match(table.stdout, /^payment +order +sale +buyer +amount +reason +received +refunded +reference\n/);

    const openCount = (
      await env.pool.query<{ n: number }>(
        `select count(*)::int as n from payments where outcome = 'refund_due' and refunded_at is null`,
      )
    ).rows[0]!.n;
    assert.ok((await replayOnce({ pool: env.pool, redis: env.redis, logger: env.logger })).ran);
    assert.equal((await metrics.refundsOpen.get()).values[0]?.value, openCount);
  });
});
