// The challenge itself, over a real Redis: the counter a solver must reach gives no head start, and
// the key that signs challenges and tokens is followed by every API process when it changes.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Challenge } from 'altcha-lib';
import { Challenges } from '../shared/challenge.js';
import { parseSaleInput } from '../shared/sales.js';
import { testEnv, type TestEnv } from './support/env.js';
import { counterOf, solve } from './support/pow.js';

let env: TestEnv;
before(async () => {
  env = await testEnv();
});
after(() => env?.close());

const COMPLEXITY = 1000;
const sale = parseSaleInput({ id: 'pow-keys', name: 'pow', stock: 10, challenge: 'pow', challengeComplexity: COMPLEXITY });

describe('the work', () => {
  test('the counter is uniform from 0 to twice the complexity: no public lower bound, about `complexity` hashes on average, and it verifies', async () => {
    const challenges = new Challenges(env.redis);
    const counters: number[] = [];
    for (let i = 0; i < 60; i++) counters.push(await counterOf(await challenges.challenge(sale, 'ann')));
    assert.ok(counters.every((c) => c >= 0 && c < 2 * COMPLEXITY), `counters ${counters}`);
    // With a range starting at complexity/2 (or ending at complexity) neither would ever happen;
    // uniform, all 60 miss either by chance once in 30 million runs.
    assert.ok(counters.some((c) => c < COMPLEXITY / 2), `some counter below ${COMPLEXITY / 2}: ${counters}`);
    assert.ok(counters.some((c) => c >= COMPLEXITY), `some counter at or above ${COMPLEXITY}: ${counters}`);
    // The mean of 60 draws has a standard deviation of 75 here: 400 off is over five of them.
    const mean = counters.reduce((a, b) => a + b, 0) / counters.length;
    assert.ok(Math.abs(mean - COMPLEXITY) < 400, `mean counter ${mean}`);

    const payload = await solve(await challenges.challenge(sale, 'ann') as Challenge);
    const { token } = await challenges.exchange(sale, 'ann', payload, 1);
    assert.deepEqual(Object.keys(await challenges.check(sale.id, 'ann', token)).sort(), ['expiresAt', 'id']);
  });
});
