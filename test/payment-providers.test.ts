// The payment provider seam: events are recorded under `<provider>:<event id>`, and a database
// from before that (sql/0010) keeps recognising its events: an old event delivered again after the
// upgrade is a duplicate, and other bytes under its id are still a conflict.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, test } from 'node:test';
import { createPool, type Pool } from '../shared/runtime/db.js';
import { HttpError } from '../shared/runtime/errors.js';
import { migrate } from '../shared/runtime/migrate.js';
import { receivePayment } from '../shared/payments/decide.js';
import { recordedId } from '../shared/payments/provider.js';
import { PAYMENT_SUCCEEDED, SignedWebhook } from '../shared/payments/providers/signed-webhook.js';
import { testEnv, type TestEnv } from './support/env.js';
import { PAYMENT_WEBHOOK_SECRET } from './support/tokens.js';

let env: TestEnv;
let old: { name: string; pool: Pool } | undefined;

before(async () => {
  env = await testEnv();
});
after(async () => {
  await old?.pool.end();
  if (old) await env.pool.query(`drop database ${old.name}`);
  await env?.close();
});

const signed = new SignedWebhook(PAYMENT_WEBHOOK_SECRET);
const ORDER = 'old-sale.00000000-0000-4000-8000-000000000001';

test('payment providers: the signed webhook verifies a delivery into an event, recorded as signed:<event id>', () => {
  const raw = JSON.stringify({ id: 'evt_1', type: PAYMENT_SUCCEEDED, orderId: ORDER, amount: 5, currency: 'EUR' });
  assert.deepEqual(signed.verify(Buffer.from(raw), signed.headersFor(raw)), {
    kind: 'succeeded',
    id: 'evt_1',
    orderId: ORDER,
    amount: 5,
    currency: 'EUR',
  });
  const other = JSON.stringify({ id: 'evt_2', type: 'payment.refunded' });
  assert.deepEqual(signed.verify(Buffer.from(other), signed.headersFor(other)), {
    kind: 'ignored',
    id: 'evt_2',
    type: 'payment.refunded',
  });
  assert.throws(
    () => signed.verify(Buffer.from(raw), {}),
    (err) => err instanceof HttpError && err.code === 'invalid_signature',
  );
  assert.equal(recordedId(signed, 'evt_1'), 'signed:evt_1');
});

test('payment providers: an event recorded before ids named their provider is a duplicate when delivered again after the upgrade', async () => {
  // A database at the schema just before sql/0010, holding a payment under its bare event id.
  const name = `t_old_${randomBytes(6).toString('hex')}`;
  await env.pool.query(`create database ${name}`);
  old = { name, pool: createPool(env.config.databaseUrl!.replace(/\/[^/]*$/, `/${name}`), 4) };
  const db = old.pool;
  await migrate(db, undefined, { through: '0009_order_states' });
  const raw = JSON.stringify({
    id: 'evt_before_upgrade',
    type: PAYMENT_SUCCEEDED,
    orderId: ORDER,
    amount: 1999,
    currency: 'EUR',
  });
  await db.query(
    `insert into sales (id, name, stock, price, currency) values ('old-sale', 'Old sale', 1, 1999, 'EUR')`,
  );
  await db.query(
    `insert into orders (id, sale_id, user_id, qty, status, seq, purchased_at, expires_at, paid_at)
     values ($1, 'old-sale', 'ann', 1, 'paid', 1, now(), now() + interval '5 minutes', now())`,
    [ORDER],
  );
  await db.query(
    `insert into payments (id, order_id, outcome, amount, currency, raw) values ('evt_before_upgrade', $1, 'applied', 1999, 'EUR', $2)`,
    [ORDER, Buffer.from(raw)],
  );

  assert.deepEqual(await migrate(db, undefined, { through: '0010_payment_providers' }), ['0010_payment_providers']);
  assert.deepEqual((await db.query('select id from payments')).rows, [{ id: 'signed:evt_before_upgrade' }]);

  const deps = { pool: db, redis: env.redis, logger: env.logger };
  const before = (await db.query('select row_to_json(p)::text as r from payments p')).rows;
  assert.deepEqual(await receivePayment(deps, signed, Buffer.from(raw), signed.headersFor(raw)), {
    id: 'evt_before_upgrade',
    outcome: 'applied',
    duplicate: true,
  });
  const changed = JSON.stringify({ ...JSON.parse(raw), amount: 1 });
  await assert.rejects(
    receivePayment(deps, signed, Buffer.from(changed), signed.headersFor(changed)),
    (err) =>
      err instanceof HttpError && err.code === 'event_conflict' && err.message.includes('Event "evt_before_upgrade"'),
  );
  assert.deepEqual(
    (await db.query('select row_to_json(p)::text as r from payments p')).rows,
    before,
    'nothing recorded, nothing changed',
  );
});
