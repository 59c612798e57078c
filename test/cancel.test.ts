// Cancellation and the buyer's order list against the real API, Postgres and Redis: a cancel gives
// stock and quota back at once and once, whether the order is pending or still queued, whoever it
// races (the writer, a payment, the expiry); a refused cancel changes nothing; the list pages.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { afterEach, describe, test } from 'node:test';
import { closeOrders, sweepOverdue } from '../shared/orders/close.js';
import { checkInvariants } from '../shared/checks/invariants.js';
import { saleKeys } from '../shared/redis/keys.js';
import { run } from '../shared/redis/scripts.js';
import { parseWinner } from '../shared/runtime/ids.js';
import { metrics } from '../shared/runtime/metrics.js';
import { cancelPending, lockOrder, markPaid } from '../shared/orders/queries.js';
import { insertPayment } from '../shared/payments/queries.js';
import { signPayload } from '../shared/payments/providers/signed-webhook.js';
import type { Sale } from '../shared/sales/sale.js';
import { startApi } from '../daemons/api.js';
import { assertConserved, type TestEnv } from './support/env.js';
import { apiEnv, type ApiEnv } from './support/api.js';
import { buyCount, countBy, newSale, runConcurrently, drainWriter } from './support/fixtures.js';
import { http, outcome } from './support/http.js';
import { stateSnapshot } from './support/snapshot.js';
import { PAYMENT_WEBHOOK_SECRET } from './support/tokens.js';

/** Every sale a test made: after each test, stock is conserved and every invariant holds on all of them. */
const sales: Sale[] = [];
let env: TestEnv;
let api: ApiEnv['api'];
apiEnv((s) => ({ env, api } = s));
afterEach(async () => {
  await assertConserved(env, sales);
  assert.deepEqual(
    (await checkInvariants(env.pool, env.redis, { saleIds: sales.map((s) => s.id), replayIntervalMs: 3_600_000 }))
      .violations,
    [],
  );
});

async function sale(fields: Record<string, unknown> = {}): Promise<Sale> {
  const s = await newSale(env, { stock: 10, perUserLimit: 1, paymentWindowSeconds: 3600, ...fields });
  sales.push(s);
  return s;
}

async function buy(s: Sale, user: string): Promise<string> {
  const r = await http(api.port, 'POST', `/api/sales/${s.id}/purchases`, { body: { qty: 1 }, user });
  assert.equal(r.status, 202, outcome(r));
  return r.body.orderId as string;
}

const drain = async (s: Sale) => {
  await drainWriter(env, `w-${s.id}`);
};
const cancel = (orderId: string, user: string) => http(api.port, 'POST', `/api/orders/${orderId}/cancel`, { user });
const pay = (orderId: string, user: string) => http(api.port, 'POST', `/api/orders/${orderId}/pay`, { user });
const available = async (s: Sale) => Number(await env.redis.get(saleKeys(s.id).available));
const quota = (s: Sale, user: string) => buyCount(env.redis, s.id, user);
const row = async (id: string) =>
  (
    await env.pool.query<{ status: string; closed: boolean; restored: boolean }>(
      'select status, closed_at is not null as closed, restored_at is not null as restored from orders where id = $1',
      [id],
    )
  ).rows[0];
const closedByCancel = async () =>
  (await metrics.ordersClosed.get()).values.find((v) => v.labels.by === 'cancel')?.value ?? 0;
const deliver = (orderId: string) => {
  const raw = JSON.stringify({
    id: `evt_${randomUUID()}`,
    type: 'payment.succeeded',
    orderId,
    amount: 1999,
    currency: 'EUR',
  });
  return http(api.port, 'POST', '/api/payments/webhook', {
    body: raw,
    headers: { 'flashsale-signature': signPayload(PAYMENT_WEBHOOK_SECRET, raw) },
  });
};

describe('cancel', () => {
  test("cancel: a pending order becomes cancelled; its unit and the buyer's quota are back at once, once; cancelling again changes nothing", async () => {
    const s = await sale();
    const id = await buy(s, 'ann');
    await drain(s);
    assert.equal(await env.redis.exists(saleKeys(s.id).expiry(id)), 1);
    assert.deepEqual([await available(s), await quota(s, 'ann')], [9, 1]);
    const counted = await closedByCancel();

    const r = await cancel(id, 'ann');
    assert.equal(r.status, 200, outcome(r));
    assert.deepEqual(r.body, { orderId: id, status: 'cancelled' });
    assert.deepEqual(await row(id), { status: 'cancelled', closed: true, restored: true });
    assert.deepEqual([await available(s), await quota(s, 'ann')], [10, 0], 'unit and quota back in the same request');
    assert.equal(await env.redis.sismember(saleKeys(s.id).restored, id), 1);
    assert.equal(await env.redis.exists(saleKeys(s.id).expiry(id)), 0, 'no expiry left to fire');
    assert.equal(await closedByCancel(), counted + 1);
    assert.deepEqual((await http(api.port, 'GET', `/api/orders/${id}`, { user: 'ann' })).body, {
      orderId: id,
      saleId: s.id,
      qty: 1,
      status: 'cancelled',
    });

    const state = await stateSnapshot(env);
    const again = await runConcurrently(5, 5, () => cancel(id, 'ann'));
    assert.deepEqual(again.map(outcome), Array(5).fill('200 cancelled'));
    assert.deepEqual(await stateSnapshot(env), state, 'a repeated cancel changes nothing');
    assert.equal(await closedByCancel(), counted + 1);
    // The quota came back: the same buyer (limit 1) may buy again.
    await buy(s, 'ann');
  });

  test('cancel: a still-queued order is written cancelled with its stock back; the writer then leaves it cancelled and sets no expiry', async () => {
    const s = await sale();
    const id = await buy(s, 'bea');
    assert.equal(await env.redis.hexists(saleKeys(s.id).queued, id), 1, 'no writer ran: still queued');
    const r = await cancel(id, 'bea');
    assert.deepEqual(r.body, { orderId: id, status: 'cancelled' });
    assert.deepEqual(await row(id), { status: 'cancelled', closed: true, restored: true });
    assert.deepEqual([await available(s), await quota(s, 'bea')], [10, 0]);
    assert.equal(
      (await http(api.port, 'GET', `/api/orders/${id}`, { user: 'bea' })).body.status,
      'cancelled',
      'not "queued" any more',
    );
    await assertConserved(env, [s]);

    await drain(s);
    assert.deepEqual(await row(id), { status: 'cancelled', closed: true, restored: true });
    assert.equal(await env.redis.hlen(saleKeys(s.id).queued), 0);
    assert.equal(await env.redis.exists(saleKeys(s.id).expiry(id)), 0);
    assert.equal(await available(s), 10, 'restored once');
  });

  test("cancel: a purchase's winner entry, its buyer holding '|', is read by the one parser and cancelled for that buyer only", async () => {
    const s = await sale();
    const [before] = await env.redis.time();
    const id = await buy(s, 'pipe|ann|1');
    const [after] = await env.redis.time();
    const k = saleKeys(s.id);
    const entry = (await env.redis.hget(k.queued, id))!;
    const winner = parseWinner(entry);
    assert.deepEqual(
      { ...winner, purchasedAt: 0 },
      { orderId: id, seq: 1, qty: 1, purchasedAt: 0, userId: 'pipe|ann|1' },
    );
    assert.ok(
      winner.purchasedAt >= Number(before) * 1000 && winner.purchasedAt < (Number(after) + 1) * 1000,
      "stamped by Redis's TIME",
    );
    assert.equal(await env.redis.lindex(k.winners, 0), entry, 'the writer reads the same entry');

    // cancel.lua compares the entry whole: one that is not the queued one (written meanwhile) notes nothing.
    assert.equal(await run(env.redis, 'cancel', [k.queued, k.cancels], [id, `${entry}x`]), 0);
    for (const other of ['pipe', 'pipe|ann', '1'])
      assert.equal(outcome(await cancel(id, other)), '404 order_not_found', other);
    assert.equal(await env.redis.hlen(k.cancels), 0, 'no cancel noted');

    assert.deepEqual((await cancel(id, 'pipe|ann|1')).body, { orderId: id, status: 'cancelled' });
    assert.deepEqual((await env.pool.query('select user_id, qty, status from orders where id = $1', [id])).rows, [
      { user_id: 'pipe|ann|1', qty: 1, status: 'cancelled' },
    ]);
    assert.equal(await env.redis.hexists(k.cancels, id), 1, 'the cancel was noted');
    assert.deepEqual([await available(s), await quota(s, 'pipe|ann|1')], [10, 0]);
    await drain(s);
  });

  test("cancel: another buyer's, a paid, an expired, an overdue, an unknown or a malformed order is refused and nothing changes", async () => {
    const s = await sale();
    const [queued, pending, paid, expired, overdue] = [
      await buy(s, 'cy'),
      await buy(s, 'cal'),
      await buy(s, 'cat'),
      await buy(s, 'cob'),
      await buy(s, 'cid'),
    ];
    await env.redis.rpop(saleKeys(s.id).winners); // leave the first purchase queued: the writer never sees it
    const held = await env.redis.lrange(saleKeys(s.id).winners, 0, -1);
    await drain(s);
    assert.equal((await pay(paid, 'cat')).status, 200);
    await env.pool.query(`update orders set expires_at = now() where id = any($1::text[])`, [[expired, overdue]]);
    await closeOrders(env.pool, env.redis, [expired], 'replay');
    assert.equal(held.length, 4);

    const state = await stateSnapshot(env);
    const cases: [string, string, string, string][] = [
      ["another buyer's queued order", queued, 'eve', '404 order_not_found'],
      ["another buyer's pending order", pending, 'eve', '404 order_not_found'],
      ['a paid order', paid, 'cat', '409 order_paid'],
      ['an expired order', expired, 'cob', '409 order_expired'],
      ['a pending order past its deadline', overdue, 'cid', '409 order_expired'],
      ['no such order', `${s.id}.${randomUUID()}`, 'cal', '404 order_not_found'],
      ['a malformed id', 'not-an-order', 'cal', '400 invalid_id'],
    ];
    for (const [what, id, user, expected] of cases) {
      const r = await cancel(id, user);
      assert.equal(outcome(r), expected, what);
      assert.equal(typeof r.body.message, 'string');
    }
    assert.equal((await http(api.port, 'POST', `/api/orders/${pending}/cancel`)).status, 401);
    // The queued order got no write either: its buyer is checked before cancel.lua writes its note.
    assert.deepEqual(await stateSnapshot(env), state);
    await env.redis.lpush(saleKeys(s.id).winners, (await env.redis.hget(saleKeys(s.id).queued, queued))!);
    await drain(s);
    await closeOrders(env.pool, env.redis, [overdue], 'replay');
  });

  test('cancel: a payment for a cancelled order is recorded refund_due and moves no stock; DIRECT_PAY answers order_cancelled and records nothing', async () => {
    const s = await sale();
    const [a, b] = [await buy(s, 'dot'), await buy(s, 'dan')];
    await drain(s);
    for (const [id, user] of [
      [a, 'dot'],
      [b, 'dan'],
    ] as const)
      assert.equal((await cancel(id!, user)).status, 200);
    const stock = await available(s);
    const webhook = await deliver(a!);
    assert.equal(webhook.status, 200);
    assert.equal(webhook.body.outcome, 'refund_due');
    assert.equal(outcome(await pay(b!, 'dan')), '409 order_cancelled');
    assert.deepEqual(
      [await row(a!), await row(b!)].map((r) => r!.status),
      ['cancelled', 'cancelled'],
    );
    const payments = await env.pool.query<{ outcome: string }>(
      'select outcome from payments where order_id = any($1::text[])',
      [[a, b]],
    );
    // The provider took a's money; the demo route never charged b's.
    assert.deepEqual(
      payments.rows.map((p) => p.outcome),
      ['refund_due'],
    );
    assert.equal(await available(s), stock, 'no stock moved');
  });

  test('cancel: 60 queued orders cancelled while the writer drains them: each is written once, cancelled, its unit back once', async () => {
    const s = await sale({ stock: 60 });
    const users = Array.from({ length: 60 }, (_, i) => `q${i}`);
    const ids = await runConcurrently(60, 20, (i) => buy(s, users[i]!));
    const writing = drain(s);
    const answers = await runConcurrently(60, 30, (i) => cancel(ids[i]!, users[i]!));
    await writing;
    await drain(s);
    assert.deepEqual(answers.map(outcome), Array(60).fill('200 cancelled'));
    const rows = await env.pool.query<{ n: number }>(
      `select count(*)::int as n from orders where sale_id = $1 and status = 'cancelled' and restored_at is not null`,
      [s.id],
    );
    assert.equal(rows.rows[0]!.n, 60);
    assert.equal(await available(s), 60);
    assert.equal(Number(await env.redis.get(saleKeys(s.id).restoredQty)), 60);
    // A cancel may come between the writer's insert and its ack, which then sets the expiry key: it
    // fires at the deadline, finds the order closed and does nothing.
    assert.deepEqual((await closeOrders(env.pool, env.redis, ids, 'listener')).closed, []);
  });

  test('cancel: a cancel asked after the deadline while a payment that locked the order in time is committing answers order_paid', async () => {
    const s = await sale();
    const id = await buy(s, 'late');
    await drain(s);
    await env.pool.query(`update orders set expires_at = now() + interval '300 milliseconds' where id = $1`, [id]);
    // The payment's transaction as payments.ts runs it: the row locked and paid inside the window,
    // the commit held back until after the deadline.
    const payment = await env.pool.connect();
    try {
      await payment.query('begin');
      await lockOrder(payment, id);
      assert.equal(await markPaid(payment, id, 'late'), true);
      await insertPayment(payment, {
        id: `evt-${id}`,
        orderId: id,
        outcome: 'applied',
        amount: 1999,
        currency: 'EUR',
        raw: Buffer.from('{}'),
      });
      await new Promise((r) => setTimeout(r, 400));
      const answer = cancel(id, 'late');
      await new Promise((r) => setTimeout(r, 200));
      await payment.query('commit');
      assert.equal(outcome(await answer), '409 order_paid');
    } finally {
      payment.release();
    }
    assert.deepEqual(await row(id), { status: 'paid', closed: false, restored: false });
    assert.equal(await available(s), 9);
  });

  test('cancel: a cancel asked inside the window that waits for a payment refused past the deadline answers order_expired', async () => {
    const s = await sale();
    const id = await buy(s, 'waits');
    await drain(s);
    // The payment's transaction as payments.ts runs it: the row locked first. The cancel's update
    // starts while the window is open (its deadline is moved to just after that start, whatever the
    // machine's speed) and waits for the row; the payment then finds the window closed.
    const payment = await env.pool.connect();
    try {
      await payment.query('begin');
      await lockOrder(payment, id);
      const answer = cancel(id, 'waits');
      let started: Date | undefined;
      while (!started) {
        const waiting = await env.pool.query<{ query_start: Date }>(
          `select query_start from pg_stat_activity where wait_event_type = 'Lock' and query like 'update orders set status%' and query like '%expires_at >%'`,
        );
        started = waiting.rows[0]?.query_start;
        if (!started) await new Promise((r) => setTimeout(r, 10));
      }
      await payment.query(`update orders set expires_at = $2::timestamptz + interval '1 millisecond' where id = $1`, [
        id,
        started,
      ]);
      while (
        !(await payment.query(`select clock_timestamp() > expires_at as past from orders where id = $1`, [id])).rows[0]
          .past
      )
        await new Promise((r) => setTimeout(r, 1));
      assert.equal(await markPaid(payment, id, 'waits'), false, 'the payment finds the window closed');
      await payment.query('commit');
      assert.equal(outcome(await answer), '409 order_expired');
    } finally {
      payment.release();
    }
    assert.deepEqual(await row(id), { status: 'pending', closed: false, restored: false }, 'left for the expiry');
    assert.deepEqual(
      (await closeOrders(env.pool, env.redis, [id], 'listener')).closed.map((o) => o.id),
      [id],
    );
    assert.deepEqual(await row(id), { status: 'expired', closed: true, restored: true });
    assert.equal(await available(s), 10);
  });

  test('cancel: racing payment and expiry on 90 orders around their deadlines, each ends in one state, as its answers say, restored once if closed', async () => {
    const s = await sale({ stock: 90 });
    const users = Array.from({ length: 90 }, (_, i) => `r${i}`);
    const ids = await runConcurrently(90, 30, (i) => buy(s, users[i]!));
    await drain(s);
    // Deadlines spread over 1.5 s from half a second on; cancel, pay and the expiry all fire within
    // 30 ms of each order's deadline, so every pair of them meets.
    const deadlines = new Map(
      (
        await env.pool.query<{ id: string; ms: number }>(
          `update orders set expires_at = now() + ((seq % 30) * interval '50 milliseconds') + interval '500 milliseconds'
       where sale_id = $1 returning id, extract(epoch from expires_at) * 1000 as ms`,
          [s.id],
        )
      ).rows.map((r) => [r.id, Number(r.ms)]),
    );
    const answers = await runConcurrently(90, 90, async (i) => {
      const offset = ((i * 7) % 61) - 30;
      await new Promise((r) => setTimeout(r, Math.max(0, deadlines.get(ids[i]!)! + offset - Date.now())));
      const [c, p] = await Promise.all([
        cancel(ids[i]!, users[i]!),
        pay(ids[i]!, users[i]!),
        closeOrders(env.pool, env.redis, [ids[i]!], 'listener'),
      ]);
      return { c: outcome(c), p: outcome(p) };
    });
    await sweepOverdue(env.pool, env.redis, 'replay');
    const final = await env.pool.query<{ id: string; status: string; restored: boolean }>(
      'select id, status, restored_at is not null as restored from orders where sale_id = $1',
      [s.id],
    );
    const byId = new Map(final.rows.map((r) => [r.id, r]));
    // What each answer says the order became.
    const byCancel: Record<string, string> = {
      '200 cancelled': 'cancelled',
      '409 order_paid': 'paid',
      '409 order_expired': 'expired',
    };
    const byPay: Record<string, string> = {
      '200 paid': 'paid',
      '409 order_cancelled': 'cancelled',
      '409 order_expired': 'expired',
    };
    const problems: string[] = [];
    ids.forEach((id, i) => {
      const { c, p } = answers[i]!;
      const { status, restored } = byId.get(id)!;
      if (byCancel[c] !== status) problems.push(`${id}: cancel answered ${c}, is ${status}`);
      // A pay after the deadline answers order_expired ("too late to pay") while the order is still
      // pending; a cancel asked before the deadline (its now() earlier), waiting on the payment's row
      // lock, may then still win it: consistent when that cancel answered 200.
      const lateBehindCancel = p === '409 order_expired' && status === 'cancelled' && c === '200 cancelled';
      if (byPay[p] !== status && !lateBehindCancel) problems.push(`${id}: pay answered ${p}, is ${status}`);
      if (status !== 'paid' && !restored) problems.push(`${id}: ${status}, not restored`);
    });
    const tally: Record<string, number> = {};
    for (const r of final.rows) tally[r.status] = (tally[r.status] ?? 0) + 1;
    console.log(`# cancel/pay/expiry race: ${JSON.stringify(tally)}`);
    assert.deepEqual(problems, []);
    const closed = final.rows.filter((r) => r.status !== 'paid').length;
    assert.equal(await available(s), closed, "each closed order's unit back once");
    assert.equal(Number(await env.redis.get(saleKeys(s.id).restoredQty)), closed);
  });

  test("cancel: a cancel whose restore a crash interrupted is finished by the replay's sweep", async () => {
    const s = await sale();
    const id = await buy(s, 'fin');
    await drain(s);
    assert.ok(await cancelPending(env.pool, id, 'fin'), 'closed in Postgres, then the process died');
    assert.deepEqual(await row(id), { status: 'cancelled', closed: true, restored: false });
    assert.equal(await available(s), 9);
    const swept = await sweepOverdue(env.pool, env.redis, 'replay');
    assert.equal(swept.restored, 1);
    assert.deepEqual(await row(id), { status: 'cancelled', closed: true, restored: true });
    assert.deepEqual([await available(s), await quota(s, 'fin')], [10, 0]);
  });

  test('cancel: the invariants catch a unit restored twice', async () => {
    const s = await newSale(env, { stock: 3 });
    const id = await buy(s, 'gil');
    await drain(s);
    assert.equal((await cancel(id, 'gil')).status, 200);
    await env.redis.incr(saleKeys(s.id).restoredQty);
    const r = await checkInvariants(env.pool, env.redis, { saleIds: [s.id], replayIntervalMs: 3_600_000 });
    assert.deepEqual(r.violations.map((v) => v.invariant).sort(), ['conservation', 'restored_once']);
  });
});

describe('cancel limit', () => {
  const MAX = 3;
  const queuedIds = async (s: Sale) => (await env.redis.hkeys(saleKeys(s.id).queued)).sort();
  const cancelledOf = async (s: Sale, user: string) =>
    (
      await env.pool.query<{ id: string }>(
        `select id from orders where sale_id = $1 and user_id = $2 and status = 'cancelled' order by id`,
        [s.id, user],
      )
    ).rows.map((r) => r.id);

  test('cancel limit: a buyer cancels at most MAX_CANCELS_PER_SALE orders of a sale, queued or pending; past it 409 cancel_limit and nothing changes', async () => {
    assert.equal(env.config.maxCancelsPerSale, MAX, 'the default');
    const s = await sale({ stock: 20, perUserLimit: 20 });
    const other = await sale({ perUserLimit: 5 });
    // Refused cancels use nothing up: a paid and an expired order of the same buyer.
    const paid = await buy(s, 'kim');
    const expired = await buy(s, 'kim');
    const pending = [await buy(s, 'kim'), await buy(s, 'kim')];
    await drain(s);
    assert.equal((await pay(paid, 'kim')).status, 200);
    await env.pool.query(`update orders set expires_at = now() where id = $1`, [expired]);
    await closeOrders(env.pool, env.redis, [expired], 'replay');
    assert.equal(outcome(await cancel(paid, 'kim')), '409 order_paid');
    assert.equal(outcome(await cancel(expired, 'kim')), '409 order_expired');
    const queued = await buy(s, 'kim');
    const done = [pending[0]!, queued, pending[1]!];
    for (const id of done) assert.equal(outcome(await cancel(id, 'kim')), '200 cancelled', id);
    assert.deepEqual(await cancelledOf(s, 'kim'), [...done].sort(), 'two pending and one queued: three cancels');
    await drain(s);

    // Past the limit: a queued and a pending order stay as they are, byte for byte.
    const [stillQueued, stillPending] = [await buy(s, 'kim'), await buy(s, 'kim')];
    await env.redis.rpop(saleKeys(s.id).winners); // the writer never sees the first
    await drain(s);
    const state = await stateSnapshot(env);
    for (const id of [stillQueued, stillPending]) {
      const r = await cancel(id, 'kim');
      assert.equal(outcome(r), '409 cancel_limit', id);
      assert.match(r.body.message, /cancelled as many orders/);
    }
    // A paid order says it is paid, an expired one that it expired; a cancelled one is still 200, and counts once.
    assert.equal(outcome(await cancel(paid, 'kim')), '409 order_paid');
    assert.equal(outcome(await cancel(expired, 'kim')), '409 order_expired');
    for (const id of done) assert.equal(outcome(await cancel(id, 'kim')), '200 cancelled', `${id} again`);
    assert.deepEqual(await stateSnapshot(env), state, 'nothing changed');
    assert.deepEqual(await queuedIds(s), [stillQueued]);
    assert.equal((await row(stillPending))?.status, 'pending');

    // Per buyer and per sale: another buyer of this sale, and the same buyer in another sale, may cancel.
    assert.equal(outcome(await cancel(await buy(s, 'lee'), 'lee')), '200 cancelled');
    assert.equal(outcome(await cancel(await buy(other, 'kim'), 'kim')), '200 cancelled');
    await env.redis.lpush(saleKeys(s.id).winners, (await env.redis.hget(saleKeys(s.id).queued, stillQueued))!);
    await drain(s);
    assert.equal((await row(stillQueued))?.status, 'pending', 'written by the writer as any order');
  });

  test("cancel limit: 10 concurrent cancels of one buyer's 10 orders through two API processes: exactly MAX cancelled, the rest 409 cancel_limit; it holds after a restart", async () => {
    const second = await startApi(env.config, env.logger);
    try {
      for (const round of [0, 1, 2]) {
        const user = `con${round}`;
        const s = await sale({ stock: 10, perUserLimit: 10 });
        const ids: string[] = [];
        // Half pending (the conditional update), half still queued (cancel.lua and the insert).
        for (let i = 0; i < 5; i++) ids.push(await buy(s, user));
        await drain(s);
        for (let i = 0; i < 5; i++) ids.push(await buy(s, user));
        const answers = await runConcurrently(10, 10, (i) =>
          http(i % 2 ? second.port : api.port, 'POST', `/api/orders/${ids[i]}/cancel`, { user }),
        );
        assert.deepEqual(
          countBy(answers, outcome),
          { '200 cancelled': MAX, '409 cancel_limit': 10 - MAX },
          `round ${round}`,
        );
        const won = ids.filter((_, i) => answers[i]!.status === 200);
        assert.deepEqual(await cancelledOf(s, user), [...won].sort(), 'the orders answered 200 are the cancelled ones');
        assert.equal(await available(s), MAX, 'only the cancelled units came back');
        assert.equal(await quota(s, user), 10 - MAX);
        const refused = ids.filter((_, i) => answers[i]!.status === 409);
        for (const id of refused) {
          const r = await row(id);
          assert.ok(
            r === undefined ? await env.redis.hexists(saleKeys(s.id).queued, id) : r.status === 'pending',
            `${id} stays as it was`,
          );
        }
        assert.equal(
          await env.redis.hlen(saleKeys(s.id).cancels),
          won.filter((id) => ids.indexOf(id) >= 5).length,
          'no note left by a refused cancel',
        );
        await drain(s);
        // Postgres keeps the count: a fresh API process refuses the next cancel too.
        if (round === 2) {
          await second.stop();
          const again = await startApi(env.config, env.logger);
          try {
            assert.equal(
              outcome(await http(again.port, 'POST', `/api/orders/${refused[0]}/cancel`, { user })),
              '409 cancel_limit',
            );
          } finally {
            await again.stop();
          }
        }
      }
    } finally {
      await second.stop();
    }
  });
});

describe('unpaid limit', () => {
  /** Lets the buyer's order run out unpaid: its deadline moved to now, then closed by the sweep, as the replay would. */
  const expire = async (id: string) => {
    await env.pool.query(`update orders set expires_at = now() where id = $1`, [id]);
    await sweepOverdue(env.pool, env.redis, 'replay');
    assert.equal((await row(id))?.status, 'expired', id);
  };

  test('unpaid limit: a buyer who let MAX_UNPAID_PER_SALE orders of a sale expire is refused 409 unpaid_limit there, nothing taken; the last unit goes to another buyer', async () => {
    assert.equal(env.config.maxUnpaidPerSale, 2, 'the default');
    const s = await sale({ stock: 1 });
    const other = await sale({ stock: 1 });
    // The last unit, held and let go twice: each expiry gives the unit and the quota back.
    for (let i = 0; i < 2; i++) {
      const id = await buy(s, 'hoarder');
      await drain(s);
      await expire(id);
      assert.equal(await available(s), 1);
      assert.equal(await quota(s, 'hoarder'), 0);
    }
    assert.equal(await env.redis.hget(saleKeys(s.id).unpaid, 'hoarder'), '2');
    const state = await stateSnapshot(env);
    const refused = await http(api.port, 'POST', `/api/sales/${s.id}/purchases`, { body: { qty: 1 }, user: 'hoarder' });
    assert.equal(outcome(refused), '409 unpaid_limit');
    assert.match(refused.body.message, /let 2 orders of this sale expire unpaid/);
    assert.deepEqual(await stateSnapshot(env), state, 'nothing changed');
    // Per buyer and per sale: another buyer takes the unit, and the same buyer still buys elsewhere.
    await buy(s, 'honest');
    await buy(other, 'hoarder');
    await drain(s);
    await drain(other);
    // A second sweep restores nothing again, and counts nothing again.
    await sweepOverdue(env.pool, env.redis, 'replay');
    assert.equal(await env.redis.hget(saleKeys(s.id).unpaid, 'hoarder'), '2');
  });

  test('unpaid limit: cancels and paid orders are not unpaid expiries; the buyer buys again after them', async () => {
    const s = await sale({ stock: 10, perUserLimit: 1 });
    for (let i = 0; i < 2; i++)
      assert.equal(outcome(await cancel(await buy(s, 'undecided'), 'undecided')), '200 cancelled');
    const paid = await buy(s, 'undecided');
    await drain(s);
    assert.equal((await pay(paid, 'undecided')).status, 200);
    await sweepOverdue(env.pool, env.redis, 'replay');
    assert.equal(await env.redis.hget(saleKeys(s.id).unpaid, 'undecided'), null);
    // One expiry is under the bound: this buyer's next order is taken.
    const late = await sale({ stock: 10 });
    const id = await buy(late, 'undecided');
    await drain(late);
    await expire(id);
    assert.equal(await env.redis.hget(saleKeys(late.id).unpaid, 'undecided'), '1');
    await buy(late, 'undecided');
    await drain(late);
  });
});

describe('my orders', () => {
  test("me/orders: the buyer's own orders, newest first, a page at a time, of one sale if asked; bad queries are 400", async () => {
    const [s1, s2] = [await sale({ perUserLimit: 5 }), await sale({ perUserLimit: 5 })];
    const mine: string[] = [];
    for (const s of [s1, s2, s1, s2, s1]) {
      mine.unshift(await buy(s, 'hal'));
      await new Promise((r) => setTimeout(r, 3)); // distinct purchase times: the order is then the buyer's
    }
    await buy(s1, 'ivy');
    await drain(s1);
    await drain(s2);
    assert.equal((await cancel(mine[0]!, 'hal')).status, 200);

    const list = async (query: string, user = 'hal') => http(api.port, 'GET', `/api/me/orders${query}`, { user });
    const all = await list('');
    assert.equal(all.status, 200, outcome(all));
    assert.deepEqual(
      all.body.orders.map((o: { orderId: string }) => o.orderId),
      mine,
    );
    assert.equal(all.body.next, null);
    assert.deepEqual(Object.keys(all.body.orders[0]).sort(), ['orderId', 'purchasedAt', 'qty', 'saleId', 'status']);
    assert.equal(all.body.orders[0].status, 'cancelled');
    assert.equal(all.body.orders[1].status, 'pending_payment');
    assert.equal(typeof all.body.orders[1].expiresAt, 'string');

    const pages: string[] = [];
    let before = '';
    for (let n = 0; n < 3; n++) {
      const page = await list(`?limit=2${before}`);
      pages.push(...page.body.orders.map((o: { orderId: string }) => o.orderId));
      if (page.body.next === null) break;
      before = `&before=${page.body.next}`;
    }
    assert.deepEqual(pages, mine, 'pages of 2 walk every order once, in order');
    const ofSale = await list(`?sale=${s2.id}`);
    assert.deepEqual(
      ofSale.body.orders.map((o: { saleId: string }) => o.saleId),
      [s2.id, s2.id],
    );
    assert.deepEqual((await list('', 'nobody')).body, { orders: [], next: null });

    for (const [query, expected] of [
      ['?limit=0', '400 bad_request'],
      ['?limit=101', '400 bad_request'],
      ['?limit=x', '400 bad_request'],
      ['?when=now', '400 bad_request'],
      ['?before=nope', '400 bad_request'],
      ['?sale=a%20b', '400 invalid_id'],
      [`?before=${s1.id}.${randomUUID()}`, '404 order_not_found'],
    ])
      assert.equal(outcome(await list(query!)), expected, query);
    const ivys = (await list('', 'ivy')).body.orders[0].orderId as string;
    assert.equal(outcome(await list(`?before=${ivys}`)), '404 order_not_found', "another buyer's order is no cursor");
    assert.equal((await http(api.port, 'GET', '/api/me/orders')).status, 401);
  });
});
