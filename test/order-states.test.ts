// shared/orders/states.ts is the one home of an order's states: the schema Postgres holds must say
// the same (a state added there without its migration fails here), and each conditional write
// must move an order exactly along its transition, from no other state.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { cancelPending, closeDue, markPaid } from '../shared/orders/queries.js';
import {
  allows,
  ORDER_STATES,
  RESTORING,
  STATE_RULES,
  TRANSITIONS,
  type OrderAction,
  type OrderState,
} from '../shared/orders/states.js';
import { testEnv, type TestEnv } from './support/env.js';
import { newSale } from './support/fixtures.js';

let env: TestEnv;

before(async () => {
  env = await testEnv();
});
after(async () => {
  await env?.close();
});

/** The states a CHECK constraint on orders names, in its order, as Postgres prints it back. */
async function statesOf(constraint: string): Promise<string[]> {
  const res = await env.pool.query<{ def: string }>(
    `select pg_get_constraintdef(oid) as def from pg_constraint where conrelid = 'orders'::regclass and conname = $1`,
    [constraint],
  );
  assert.equal(res.rows.length, 1, `orders has a constraint ${constraint}`);
  return [...res.rows[0]!.def.matchAll(/'([^']*)'::text/g)].map((m) => m[1]!);
}

test("order states: the schema's CHECKs list exactly the module's states, its paid state and its closed states", async () => {
  assert.deepEqual(await statesOf('orders_status_check'), [...ORDER_STATES]);
  assert.deepEqual(await statesOf('orders_paid_check'), [TRANSITIONS.pay.to]);
  assert.deepEqual(await statesOf('orders_closed_check'), [...RESTORING]);
  // The module agrees with itself: what an action closes gives its units back.
  for (const action of ['expire', 'cancel', 'cancelQueued'] as const)
    assert.ok(STATE_RULES[TRANSITIONS[action].to].restores, action);
  assert.ok(STATE_RULES[TRANSITIONS.pay.to].holds && STATE_RULES[TRANSITIONS.write.to].holds);
});

test('order states: a state the module does not declare is refused by Postgres', async () => {
  const sale = await newSale(env);
  await assert.rejects(
    env.pool.query(
      `insert into orders (id, sale_id, user_id, qty, status, seq, purchased_at, expires_at) values ($1, $2, 'u', 1, 'refunded', 1, now(), now())`,
      [`${sale.id}.unknown`, sale.id],
    ),
    (err: { code?: string; constraint?: string }) => err.code === '23514' && err.constraint === 'orders_status_check',
  );
});

const MOVES: Record<Exclude<OrderAction, 'write' | 'cancelQueued'>, (id: string) => Promise<boolean>> = {
  pay: async (id) => markPaid(env.pool, id, 'buyer'),
  expire: async (id) => (await closeDue(env.pool, [id])).length === 1,
  cancel: async (id) => (await cancelPending(env.pool, id, 'buyer')) !== undefined,
};

test('order states: each conditional write moves an order along its transition and from no other state', async () => {
  const sale = await newSale(env);
  let seq = 0;
  for (const state of ORDER_STATES) {
    for (const [action, move] of Object.entries(MOVES) as [keyof typeof MOVES, (id: string) => Promise<boolean>][]) {
      const id = `${sale.id}.${state}-${action}`;
      // Expiry waits for the deadline; payment and cancel come before it.
      const deadline = action === 'expire' ? "now() - interval '1 second'" : "now() + interval '1 hour'";
      await env.pool.query(
        `insert into orders (id, sale_id, user_id, qty, status, seq, purchased_at, expires_at, paid_at, closed_at)
         values ($1, $2, 'buyer', 1, $3, $4, now(), ${deadline}, case when $5 then now() end, case when $6 then now() end)`,
        [id, sale.id, state, ++seq, state === TRANSITIONS.pay.to, STATE_RULES[state].restores],
      );
      const moved = await move(id);
      const now = (await env.pool.query<{ status: OrderState }>('select status from orders where id = $1', [id]))
        .rows[0]!.status;
      assert.equal(moved, allows(action, state), `${action} from ${state}`);
      assert.equal(now, moved ? TRANSITIONS[action].to : state, `${action} from ${state}`);
    }
  }
});
