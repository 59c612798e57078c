// The invariants checker catches what it claims to: each invariant broken on purpose, on a sale of
// its own, is reported by name (and only it), and `flashsale check` exits 3 for it.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { restore } from '../shared/orders/close.js';
import { closeDue } from '../shared/orders/queries.js';
import { checkInvariants } from '../shared/checks/invariants.js';
import { saleKeys } from '../shared/redis/keys.js';
import { purchaseScript } from '../shared/sales/scripts.js';
import type { Sale } from '../shared/sales/sale.js';
import { payOrder } from '../shared/payments/direct-pay.js';
import { SignedWebhook } from '../shared/payments/providers/signed-webhook.js';
import { cli } from './support/cli.js';
import { testEnv, type TestEnv } from './support/env.js';
import { newSale, drainWriter } from './support/fixtures.js';
import { PAYMENT_WEBHOOK_SECRET } from './support/tokens.js';

let env: TestEnv;

before(async () => {
  env = await testEnv();
});
after(async () => {
  await env.close();
});

/** A sale with `n` orders of one unit written to Postgres (pending), plus `queued` more left in Redis. */
async function saleWithOrders(
  n: number,
  queued = 0,
  fields: Record<string, unknown> = {},
): Promise<{ sale: Sale; ids: string[] }> {
  const sale = await newSale(env, { stock: 10, perUserLimit: 2, paymentWindowSeconds: 3600, ...fields });
  const ids: string[] = [];
  const buy = async (i: number) => {
    const orderId = `${sale.id}.${randomUUID()}`;
    const [code] = await purchaseScript(env.redis, {
      saleId: sale.id,
      userId: `u${i}`,
      qty: 1,
      orderId,
      buyCountTtlSeconds: 3600,
    });
    assert.equal(code, 1);
    ids.push(orderId);
  };
  for (let i = 0; i < n; i++) await buy(i);
  // The writer drains every sale; winners an earlier test left queued get written too, harmlessly.
  await drainWriter(env, `w-${sale.id}`, env.config.writerLeaseMs);
  assert.equal((await env.pool.query('select 1 from orders where sale_id = $1', [sale.id])).rowCount, n);
  for (let i = n; i < n + queued; i++) await buy(i);
  return { sale, ids };
}

/** Paid as a buyer pays: a signed event through the webhook path (DIRECT_PAY), recorded. */
const pay = (orderId: string, user: string) =>
  payOrder(
    { pool: env.pool, redis: env.redis, signed: new SignedWebhook(PAYMENT_WEBHOOK_SECRET), logger: env.logger },
    orderId,
    user,
  );

async function broken(sale: Sale, accepted?: string[]): Promise<string[]> {
  const r = await checkInvariants(env.pool, env.redis, { saleIds: [sale.id], accepted, replayIntervalMs: 1000 });
  return r.violations.map((v) => v.invariant).sort();
}

test('invariants: a sale in every state at once (queued, pending, paid, expired and restored) breaks none', async () => {
  const { sale, ids } = await saleWithOrders(4, 2);
  await pay(ids[0]!, 'u0');
  await env.pool.query(`update orders set expires_at = now() where id = $1`, [ids[1]]);
  assert.equal(await restore(env.pool, env.redis, await closeDue(env.pool, [ids[1]!])), 1);
  assert.deepEqual(await broken(sale, ids), []);
  const r = await checkInvariants(env.pool, env.redis, { saleIds: [sale.id], accepted: ids, replayIntervalMs: 1000 });
  assert.equal(r.checks, 10, 'nine per sale, one for the accepted orders');
  const check = await cli(env, ['check', '--sale', sale.id, '--json']);
  assert.equal(check.code, 0, check.stderr);
  assert.deepEqual(JSON.parse(check.stdout), { checks: 9, violations: [] });
});

test('invariants: stock made up or lost breaks conservation; below zero, stock_never_negative too', async () => {
  const a = await saleWithOrders(2);
  await env.redis.incr(saleKeys(a.sale.id).available);
  assert.deepEqual(await broken(a.sale), ['conservation']);
  const b = await saleWithOrders(2);
  await env.redis.set(saleKeys(b.sale.id).available, -1);
  assert.deepEqual(await broken(b.sale), ['conservation', 'stock_never_negative']);
  const check = await cli(env, ['check', '--sale', b.sale.id]);
  assert.equal(check.code, 3);
  assert.match(
    check.stdout,
    /^9 checks, 2 violations\n {2}VIOLATED conservation \(sale .+\): available -1 \+ queued 0 \+ pending 2/,
  );
});

test('invariants: an order pending past its deadline beyond the replay interval, or expired with its stock never back', async () => {
  const { sale, ids } = await saleWithOrders(3);
  await env.pool.query(`update orders set expires_at = now() - interval '2.1 seconds' where id = $1`, [ids[0]]);
  assert.deepEqual(
    await broken(sale),
    ['no_overdue_pending'],
    '2.1 s past the deadline is past interval (1 s) + grace (1 s)',
  );
  await env.pool.query(`update orders set expires_at = now() - interval '1 second' where id = $1`, [ids[0]]);
  assert.deepEqual(await broken(sale), [], 'within the interval and its grace');
  await env.pool.query(`update orders set expires_at = now() + interval '1 hour' where id = $1`, [ids[0]]);
  // Closed in Postgres a minute ago, never restored in Redis: conservation holds (it is "restoring"), but late.
  await env.pool.query(
    `update orders set status = 'expired', expires_at = now() - interval '1 minute', closed_at = now() - interval '1 minute' where id = $1`,
    [ids[1]],
  );
  assert.deepEqual(await broken(sale), ['no_overdue_restore']);
});

test('invariants: a buyer holding more than the limit, counting winners not yet written', async () => {
  const { sale } = await saleWithOrders(1, 1);
  assert.deepEqual(await broken(sale), []);
  // u0 has one written order; give u0 two queued winners beyond it (a purchase path that skipped the check).
  const k = saleKeys(sale.id);
  for (const seq of [90, 91]) {
    const id = `${sale.id}.${randomUUID()}`;
    await env.redis.hset(k.queued, id, `${id}|${seq}|1|${Date.now()}|u0`);
  }
  const r = await checkInvariants(env.pool, env.redis, { saleIds: [sale.id], replayIntervalMs: 1000 });
  assert.deepEqual(
    r.violations.map((v) => [v.invariant, v.detail]),
    [['per_user_limit', 'above 2: u0 holds 3']],
  );
});

test('invariants: stock restored for an order that is paid', async () => {
  const { sale, ids } = await saleWithOrders(2);
  await pay(ids[0]!, 'u0');
  await env.redis.sadd(saleKeys(sale.id).restored, ids[0]!);
  assert.deepEqual(await broken(sale), ['paid_never_expired']);
});

test('invariants: payments and orders that disagree (paid without a payment, applied but not paid, refund due yet paid)', async () => {
  const { sale, ids } = await saleWithOrders(4);
  await pay(ids[0]!, 'u0');
  assert.deepEqual(await broken(sale), []);
  const applied = (id: string, outcome = 'applied') =>
    env.pool.query(`insert into payments (id, order_id, outcome, reason, raw) values ($1, $2, $3, $4, '\\x7b7d')`, [
      `evt_${randomUUID()}`,
      id,
      outcome,
      outcome === 'refund_due' ? 'already_paid' : null,
    ]);
  const paidBySql = (id: string) =>
    env.pool.query(`update orders set status = 'paid', paid_at = now() where id = $1`, [id]);
  await paidBySql(ids[1]!);
  assert.deepEqual(await broken(sale), ['payments_match_orders'], 'paid without a payment');
  await applied(ids[1]!);
  assert.deepEqual(await broken(sale), []);
  await applied(ids[2]!);
  const r = await checkInvariants(env.pool, env.redis, { saleIds: [sale.id], replayIntervalMs: 1000 });
  assert.deepEqual(
    r.violations.map((v) => [v.invariant, v.detail]),
    [['payments_match_orders', `payments and orders disagree: ${ids[2]} (applied payment, order pending)`]],
  );
  await paidBySql(ids[2]!);
  await applied(ids[3]!, 'refund_due');
  await paidBySql(ids[3]!);
  const again = await checkInvariants(env.pool, env.redis, { saleIds: [sale.id], replayIntervalMs: 1000 });
  assert.deepEqual(
    again.violations.map((v) => v.detail),
    [`payments and orders disagree: ${ids[3]} (refund due, yet paid)`],
  );
});

test('invariants: a 202 without an order, or the same order answered twice', async () => {
  const { sale, ids } = await saleWithOrders(2, 1);
  const lost = `${sale.id}.${randomUUID()}`;
  assert.deepEqual(await broken(sale, ids), [], 'written and queued orders both count');
  assert.deepEqual(await broken(sale, [...ids, lost]), ['accepted_has_one_order']);
  assert.deepEqual(await broken(sale, [...ids, ids[0]!]), ['accepted_has_one_order']);
  const r = await checkInvariants(env.pool, env.redis, {
    saleIds: [sale.id],
    accepted: [...ids, lost, ids[0]!],
    replayIntervalMs: 1000,
  });
  assert.equal(r.violations[0]!.detail, `answered 202 but no order: ${lost}; answered 202 twice: ${ids[0]}`);
});

test('invariants: an unknown sale is reported, not skipped', async () => {
  const r = await checkInvariants(env.pool, env.redis, { saleIds: ['no-such-sale'], replayIntervalMs: 1000 });
  assert.deepEqual(r, {
    checks: 1,
    violations: [{ sale: 'no-such-sale', invariant: 'sale_exists', detail: 'no such sale in Postgres' }],
  });
});

test('invariants: with REDIS_MIN_REPLICAS_ACK, a sale whose master has fewer replicas online is named (replicated), and check exits 3 for it', async () => {
  // The test server has no replica: with 0 asked for it is no problem, with 1 every sale is in the degraded mode.
  const { sale } = await saleWithOrders(1);
  assert.deepEqual(await broken(sale, []), []);
  const r = await checkInvariants(env.pool, env.redis, {
    saleIds: [sale.id],
    replayIntervalMs: 1000,
    minReplicasAck: 1,
  });
  assert.deepEqual(
    r.violations.map((v) => [v.sale, v.invariant]),
    [[sale.id, 'replicated']],
  );
  assert.match(
    r.violations[0]!.detail,
    new RegExp(
      `its master 127\\.0\\.0\\.1:${env.redisServer.port} has 0 of the 1 replicas REDIS_MIN_REPLICAS_ACK asks for`,
    ),
  );
  const check = await cli(env, ['check', '--sale', sale.id], { REDIS_MIN_REPLICAS_ACK: '1' });
  assert.equal(check.code, 3, check.out);
  assert.match(check.stdout, new RegExp(`VIOLATED replicated \\(sale ${sale.id}\\)`));
});
