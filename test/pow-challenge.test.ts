// The challenge itself, over a real Redis: the counter a solver must reach gives no head start, and
// the key that signs challenges and tokens is followed by every API process when it changes.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Challenge } from 'altcha-lib';
import { Challenges, KEY_REFRESH_MS } from '../shared/purchase/challenge.js';
import { CHALLENGE_KEY } from '../shared/redis/keys.js';
import { duplicateRedis } from '../shared/redis/connect.js';
import { loadSaleIntoRedis, parseSaleInput } from '../shared/sales/sale.js';
import { SALE_PRICE } from './support/fixtures.js';
import { testEnv, type TestEnv } from './support/env.js';
import { counterOf, solve } from './support/pow.js';

let env: TestEnv;
before(async () => {
  env = await testEnv();
  // The exchange judges the sale's window in Redis (exchange.lua).
  await loadSaleIntoRedis(env.redis, sale);
});
after(() => env?.close());

const COMPLEXITY = 1000;
const sale = parseSaleInput({
  id: 'pow-keys',
  name: 'pow',
  stock: 10,
  ...SALE_PRICE,
  challenge: 'pow',
  challengeComplexity: COMPLEXITY,
});

describe('the work', () => {
  test('the counter is uniform from 0 to twice the complexity: no public lower bound, about `complexity` hashes on average, and it verifies', async () => {
    const challenges = new Challenges(env.redis);
    const counters: number[] = [];
    for (let i = 0; i < 60; i++) counters.push(await counterOf(await challenges.challenge(sale, 'ann')));
    assert.ok(
      counters.every((c) => c >= 0 && c < 2 * COMPLEXITY),
      `counters ${counters}`,
    );
    // With a range starting at complexity/2 (or ending at complexity) neither would ever happen;
    // uniform, all 60 miss either by chance once in 30 million runs.
    assert.ok(
      counters.some((c) => c < COMPLEXITY / 2),
      `some counter below ${COMPLEXITY / 2}: ${counters}`,
    );
    assert.ok(
      counters.some((c) => c >= COMPLEXITY),
      `some counter at or above ${COMPLEXITY}: ${counters}`,
    );
    // The mean of 60 draws has a standard deviation of 75 here: 400 off is over five of them.
    const mean = counters.reduce((a, b) => a + b, 0) / counters.length;
    assert.ok(Math.abs(mean - COMPLEXITY) < 400, `mean counter ${mean}`);

    const payload = await solve((await challenges.challenge(sale, 'ann')) as Challenge);
    const { token } = await challenges.exchange(sale, 'ann', payload);
    assert.deepEqual(Object.keys(await challenges.check(sale.id, 'ann', token)).sort(), ['expiresAt', 'id', 'kind']);
  });
});

describe('the signing key', () => {
  /** A token earned from `by`, at `now`. */
  const earn = async (by: Challenges, user: string, now: number) => {
    const payload = await solve((await by.challenge(sale, user, now)) as Challenge);
    return (await by.exchange(sale, user, payload, now)).token;
  };
  const getCalls = async () => Number(/cmdstat_get:calls=(\d+)/.exec(await env.redis.info('commandstats'))?.[1] ?? 0);

  test('two API processes follow a key replaced or deleted in Redis within KEY_REFRESH_MS, and read it once per interval, not per purchase', async () => {
    const other = duplicateRedis(env.redis);
    try {
      const [a, b] = [new Challenges(env.redis), new Challenges(other)];
      const t0 = Date.now();
      const old = await earn(a, 'ann', t0);
      await b.check(sale.id, 'ann', old, t0);
      // Between refreshes a check costs no round trip.
      const gets = await getCalls();
      for (let i = 0; i < 100; i++) await b.check(sale.id, 'ann', old, t0 + i);
      assert.equal(await getCalls(), gets);

      await env.redis.set(CHALLENGE_KEY, 'a-key-the-operator-rotated-to');
      // Not yet read: both still take the old key's tokens.
      await a.check(sale.id, 'ann', old, t0 + KEY_REFRESH_MS - 1);
      await b.check(sale.id, 'ann', old, t0 + KEY_REFRESH_MS - 1);
      const t1 = t0 + KEY_REFRESH_MS;
      for (const c of [a, b])
        await assert.rejects(c.check(sale.id, 'ann', old, t1), { code: 'invalid_purchase_token' });
      const fresh = await earn(a, 'ann', t1);
      await b.check(sale.id, 'ann', fresh, t1);

      // Gone from Redis: the first process to notice makes a new one, and the other reads that.
      await env.redis.del(CHALLENGE_KEY);
      const t2 = t1 + KEY_REFRESH_MS;
      const made = await earn(b, 'bob', t2);
      await a.check(sale.id, 'bob', made, t2);
      for (const c of [a, b])
        await assert.rejects(c.check(sale.id, 'ann', fresh, t2), { code: 'invalid_purchase_token' });
      assert.notEqual(await env.redis.get(CHALLENGE_KEY), null);
    } finally {
      other.disconnect();
    }
  });
});
