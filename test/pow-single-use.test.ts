// Single use, against the real API and Redis: one solved challenge earns one purchase token, and one
// purchase token makes one reservation, however many copies of either arrive, at once or later. A
// purchase refused for another reason leaves the token good; a script resent after a reconnect
// still finds its own reservation.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Challenge } from 'altcha-lib';
import { Challenges } from '../shared/purchase/challenge.js';
import { saleKeys } from '../shared/redis/keys.js';
import { newOrderId } from '../shared/runtime/ids.js';
import { purchaseScript, TOKEN_MARK_MARGIN_MS } from '../shared/sales/scripts.js';
import type { Sale } from '../shared/sales/sale.js';
import { Refusal } from '../shared/purchase/purchaser.js';
import type { TestEnv } from './support/env.js';
import { apiEnv, type ApiEnv } from './support/api.js';
import { buyCount, countBy, newSale } from './support/fixtures.js';
import { outcome } from './support/http.js';
import * as pow from './support/pow.js';
import { stateSnapshot } from './support/snapshot.js';

let env: TestEnv;
let api: ApiEnv['api'];
// Many challenges per buyer here: the challenge limits have their own tests (rate-limit.test.ts).
apiEnv((s) => ({ env, api } = s), { challengeRatePerBuyer: 0 });

const powSale = (fields: Record<string, unknown> = {}) =>
  newSale(env, { challenge: 'pow', challengeComplexity: 1000, ...fields });
const buy = (s: Sale, user: string, token?: string, qty = 1) => pow.buy(api.port, s, user, token, qty);
const tokenFor = (s: Sale, user: string) => pow.tokenFor(api.port, s, user);
const spentMark = (s: Sale, token: string) => env.redis.get(saleKeys(s.id).tokenUsed(pow.tokenId(token)));

describe('one solution, one token', () => {
  test('a solved challenge is exchanged once: the same payload again is 403 challenge_failed, said to be used', async () => {
    const s = await powSale();
    const payload = await pow.solvedPayload(api.port, s, 'ann');
    assert.equal(outcome(await pow.exchange(api.port, s, 'ann', payload)), '200');
    const again = await pow.exchange(api.port, s, 'ann', payload);
    assert.equal(outcome(again), '403 challenge_failed');
    assert.match(again.body.message, /already used/);
    // Remembered until the challenge expires by Redis's clock (its signed `exp`), plus the margin a
    // master behind after a failover needs, and no longer.
    const { challenge } = JSON.parse(Buffer.from(payload, 'base64').toString()) as { challenge: Challenge };
    const key = saleKeys(s.id).challengeUsed(challenge.signature!);
    assert.equal(await env.redis.get(key), '1');
    assert.equal(await env.redis.pexpiretime(key), Number(challenge.parameters.data!.exp) + TOKEN_MARK_MARGIN_MS);
  });

  test('twenty exchanges of one payload at once earn exactly one token', async () => {
    const s = await powSale();
    const payload = await pow.solvedPayload(api.port, s, 'bob');
    const replies = await Promise.all(Array.from({ length: 20 }, () => pow.exchange(api.port, s, 'bob', payload)));
    assert.deepEqual(countBy(replies, outcome), { 200: 1, '403 challenge_failed': 19 });
    // The one token buys; a fresh challenge still earns another.
    const token = replies.find((r) => r.status === 200)!.body.token as string;
    assert.equal(outcome(await buy(s, 'bob', token)), '202 queued');
    assert.equal(outcome(await pow.exchange(api.port, s, 'bob', await pow.solvedPayload(api.port, s, 'bob'))), '200');
  });

  test('an exchange refused before the sale opens does not use the solution up', async () => {
    const s = await powSale({ startsAt: new Date(Date.now() + 3_600_000).toISOString() });
    const payload = await pow.solvedPayload(api.port, s, 'early');
    assert.equal(outcome(await pow.exchange(api.port, s, 'early', payload)), '403 not_started');
    const { challenge } = JSON.parse(Buffer.from(payload, 'base64').toString()) as { challenge: Challenge };
    assert.equal(await env.redis.exists(saleKeys(s.id).challengeUsed(challenge.signature!)), 0);
  });
});

describe('one token, one purchase', () => {
  test('a token that bought is refused 403 purchase_token_used and changes nothing', async () => {
    const s = await powSale({ perUserLimit: 5 });
    const token = await tokenFor(s, 'ann');
    const first = await buy(s, 'ann', token);
    assert.equal(outcome(first), '202 queued');
    // The mark holds the order that spent it and goes when the token does (plus the clock margin).
    assert.equal(await spentMark(s, token), first.body.orderId);
    const expiresAt = JSON.parse(Buffer.from(token.split('.')[0]!, 'base64url').toString()).e as number;
    assert.equal(await env.redis.pexpiretime(saleKeys(s.id).tokenUsed(pow.tokenId(token))), expiresAt + 10_000);
    const before = await stateSnapshot(env);
    const again = await buy(s, 'ann', token);
    assert.equal(outcome(again), '403 purchase_token_used');
    assert.deepEqual(Object.keys(again.body).sort(), ['error', 'message']);
    assert.deepEqual(await stateSnapshot(env), before);
    // A new token buys again, up to the buyer's limit.
    assert.equal(outcome(await buy(s, 'ann', await tokenFor(s, 'ann'))), '202 queued');
    assert.equal(await buyCount(env.redis, s.id, 'ann'), 2);
  });

  test('ten purchases with one token at once: exactly one reservation', async () => {
    const s = await powSale({ perUserLimit: 10 });
    const token = await tokenFor(s, 'cy');
    const replies = await Promise.all(Array.from({ length: 10 }, () => buy(s, 'cy', token)));
    assert.deepEqual(countBy(replies, outcome), { '202 queued': 1, '403 purchase_token_used': 9 });
    assert.equal(await env.redis.get(saleKeys(s.id).available), '9');
    assert.equal(await env.redis.llen(saleKeys(s.id).winners), 1);
  });

  test('a purchase refused for another reason leaves the token good', async () => {
    const s = await powSale({ stock: 2, maxPerOrder: 2, perUserLimit: 2 });
    const token = await tokenFor(s, 'dee');
    assert.equal(outcome(await buy(s, 'dee', token, 3)), '400 qty_above_max');
    assert.equal(outcome(await buy(s, 'eve', await tokenFor(s, 'eve'))), '202 queued');
    assert.equal(outcome(await buy(s, 'dee', token, 2)), '409 not_enough_stock');
    assert.equal(await spentMark(s, token), null);
    assert.equal(outcome(await buy(s, 'dee', token, 1)), '202 queued');

    const soldOut = await powSale({ stock: 1 });
    assert.equal(outcome(await buy(soldOut, 'fay', await tokenFor(soldOut, 'fay'))), '202 queued');
    const late = await tokenFor(soldOut, 'gus');
    assert.equal(outcome(await buy(soldOut, 'gus', late)), '409 sold_out');
    assert.equal(await spentMark(soldOut, late), null);
  });

  test('a purchase resent after a reconnect (same order id) still finds its reservation; a new one with that token is refused', async () => {
    const s = await powSale({ perUserLimit: 5 });
    const token = await new Challenges(env.redis).check(s.id, 'hal', await tokenFor(s, 'hal'));
    assert.ok(token.kind === 'token');
    const orderId = newOrderId(s.id);
    const args = {
      saleId: s.id,
      userId: 'hal',
      qty: 1,
      orderId,
      now: Date.now(),
      buyCountTtlSeconds: 3600,
      gate: token,
    };
    assert.deepEqual(await purchaseScript(env.redis, args), [1, 9]);
    assert.deepEqual(await purchaseScript(env.redis, args), [1, 9]);
    assert.equal(await env.redis.llen(saleKeys(s.id).winners), 1);
    assert.equal(await env.redis.get(saleKeys(s.id).tokenUsed(token.id)), orderId);
    assert.deepEqual(await purchaseScript(env.redis, { ...args, orderId: newOrderId(s.id) }), [Refusal.TokenUsed, 0]);
    assert.equal(await env.redis.get(saleKeys(s.id).available), '9');
  });
});
