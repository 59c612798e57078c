// A sale with `challenge: pow` against the real API and Redis: a purchase needs a purchase token,
// earned by solving the buyer's own proof-of-work challenge (altcha-lib, solved here as the widget
// would) once the sale is open; every refusal changes nothing.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Challenge } from 'altcha-lib';
import { Challenges, PURCHASE_TOKEN_SECONDS } from '../shared/purchase/challenge.js';
import { saleKeys } from '../shared/redis/keys.js';
import type { Sale } from '../shared/sales/sale.js';
import type { TestEnv } from './support/env.js';
import { apiEnv, type ApiEnv } from './support/api.js';
import { buyCount, newSale } from './support/fixtures.js';
import { http, outcome } from './support/http.js';
import * as pow from './support/pow.js';
import { solve } from './support/pow.js';
import { ADMIN_TOKEN } from './support/tokens.js';

let env: TestEnv;
let api: ApiEnv['api'];
// Many challenges per buyer here: the challenge limits have their own tests (rate-limit.test.ts).
apiEnv((s) => ({ env, api } = s), { challengeRatePerBuyer: 0 });

const powSale = (fields: Record<string, unknown> = {}) =>
  newSale(env, { challenge: 'pow', challengeComplexity: 1000, ...fields });
const challengeFor = (s: Sale, user: string) => pow.challengeFor(api.port, s, user);
const exchange = (s: Sale, user: string, payload: string) => pow.exchange(api.port, s, user, payload);
const buy = (s: Sale, user: string, token?: string) => pow.buy(api.port, s, user, token);
const tokenFor = (s: Sale, user: string) => pow.tokenFor(api.port, s, user);

/** What a refused purchase must leave as it was. */
const redisState = async (s: Sale, users: string[]) => ({
  available: await env.redis.get(saleKeys(s.id).available),
  winners: await env.redis.llen(saleKeys(s.id).winners),
  buys: await Promise.all(users.map((u) => buyCount(env.redis, s.id, u))),
});

describe('proof-of-work sales', () => {
  test('a buyer solves their challenge, gets a purchase token and buys with it; without one nothing is taken', async () => {
    const s = await powSale();
    const before = await redisState(s, ['ann']);
    assert.equal(outcome(await buy(s, 'ann')), '403 purchase_token_required');
    assert.deepEqual(await redisState(s, ['ann']), before);

    const c = await challengeFor(s, 'ann');
    assert.equal(c.status, 200, outcome(c));
    const t = await exchange(s, 'ann', await solve(c.body as Challenge));
    assert.equal(t.status, 200, outcome(t));
    const expiresIn = Date.parse(t.body.expiresAt) - Date.now();
    assert.ok(expiresIn > 0 && expiresIn <= PURCHASE_TOKEN_SECONDS * 1000, `token lasts ${expiresIn} ms`);
    assert.equal(outcome(await buy(s, 'ann', t.body.token)), '202 queued');
    assert.equal(await env.redis.get(saleKeys(s.id).available), '9');
    // The per-buyer limit still holds with a valid token.
    assert.equal(outcome(await buy(s, 'ann', t.body.token)), '409 limit_reached');

    const view = await http(api.port, 'GET', `/api/sales/${s.id}`);
    assert.equal(view.body.challenge, 'pow');
    assert.equal(view.body.challengeComplexity, 1000);
  });

  test('a token or a solution is good only for its own buyer and sale, untampered and in time', async () => {
    const s = await powSale();
    const other = await powSale();
    const annToken = await tokenFor(s, 'ann');
    const before = await redisState(s, ['ann', 'bob']);
    assert.equal(outcome(await buy(s, 'bob', annToken)), '403 invalid_purchase_token');
    assert.equal(outcome(await buy(other, 'ann', annToken)), '403 invalid_purchase_token');
    const [body, mac] = annToken.split('.');
    const forged = Buffer.from(JSON.stringify({ s: s.id, u: 'bob', e: Date.now() + 60_000 })).toString('base64url');
    assert.equal(outcome(await buy(s, 'bob', `${forged}.${mac}`)), '403 invalid_purchase_token');
    assert.equal(outcome(await buy(s, 'ann', `${body}.${mac!.slice(0, -2)}AA`)), '403 invalid_purchase_token');
    assert.equal(outcome(await buy(s, 'ann', 'not-a-token')), '403 invalid_purchase_token');
    assert.deepEqual(await redisState(s, ['ann', 'bob']), before);
    // The check reads the expiry the token carries; the script that spends it judges it, by Redis's clock (test/clock.test.ts).
    const checked = await new Challenges(env.redis).check(
      s.id,
      'ann',
      annToken,
      Date.now() + (PURCHASE_TOKEN_SECONDS + 1) * 1000,
    );
    assert.equal(
      checked.kind === 'token' && checked.expiresAt,
      JSON.parse(Buffer.from(body!, 'base64url').toString()).e,
    );

    // Ann's solved challenge does not earn Bob a token, nor a token for another sale.
    const c = await challengeFor(s, 'ann');
    const payload = await solve(c.body as Challenge);
    assert.equal(outcome(await exchange(s, 'bob', payload)), '403 challenge_failed');
    assert.equal(outcome(await exchange(other, 'ann', payload)), '403 challenge_failed');
    // A wrong answer, a tampered challenge and garbage are refused.
    const solved = JSON.parse(Buffer.from(payload, 'base64').toString()) as {
      challenge: Challenge;
      solution: { derivedKey: string };
    };
    const key = solved.solution.derivedKey;
    const wrong = {
      ...solved,
      solution: { ...solved.solution, derivedKey: `${key.slice(0, -1)}${key.endsWith('0') ? '1' : '0'}` },
    };
    assert.equal(
      outcome(await exchange(s, 'ann', Buffer.from(JSON.stringify(wrong)).toString('base64'))),
      '403 challenge_failed',
    );
    const easier = {
      ...solved,
      challenge: { ...solved.challenge, parameters: { ...solved.challenge.parameters, keyPrefix: '0' } },
    };
    assert.equal(
      outcome(await exchange(s, 'ann', Buffer.from(JSON.stringify(easier)).toString('base64'))),
      '403 challenge_failed',
    );
    assert.equal(outcome(await exchange(s, 'ann', 'bm90IGpzb24')), '403 challenge_failed');
    assert.equal(
      outcome(
        await http(api.port, 'POST', `/api/sales/${s.id}/purchase-token`, {
          user: 'ann',
          body: { payload: 'x', extra: 1 },
        }),
      ),
      '400 bad_request',
    );
    assert.equal(
      outcome(await http(api.port, 'POST', `/api/sales/${s.id}/purchase-token`, { body: { payload } })),
      '401 unauthorized',
    );
    // The honest exchange still works.
    assert.equal(outcome(await exchange(s, 'ann', payload)), '200');
  });

  test('the challenge may be solved before the sale opens, the token only earned once it is', async () => {
    const s = await powSale({ startsAt: new Date(Date.now() + 3_600_000).toISOString() });
    const c = await challengeFor(s, 'early');
    assert.equal(c.status, 200, outcome(c));
    assert.equal(outcome(await exchange(s, 'early', await solve(c.body as Challenge))), '403 not_started');
  });

  test('a sale without a challenge sells without a token, has no challenge to give, and refuses a bad token', async () => {
    const s = await newSale(env);
    assert.equal(s.challenge, 'none');
    assert.equal(outcome(await challengeFor(s, 'cy')), '409 no_challenge');
    assert.equal(outcome(await buy(s, 'cy', 'garbage')), '403 invalid_purchase_token');
    assert.equal(outcome(await buy(s, 'cy')), '202 queued');
    assert.equal(outcome(await challengeFor({ ...s, id: 'no-such-sale' }, 'cy')), '404 sale_not_found');
  });

  test('a sale definition with a bad challenge or complexity is refused', async () => {
    const create = (fields: Record<string, unknown>) =>
      http(api.port, 'POST', '/api/sales', {
        body: { name: 'x', stock: 1, price: 500, currency: 'EUR', ...fields },
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      });
    assert.equal(outcome(await create({ challenge: 'captcha' })), '400 invalid_sale');
    assert.equal(outcome(await create({ challenge: 'pow', challengeComplexity: 10 })), '400 invalid_sale');
    const made = await create({ challenge: 'pow', challengeComplexity: 20_000 });
    assert.equal(made.status, 201, outcome(made));
    assert.deepEqual([made.body.challenge, made.body.challengeComplexity], ['pow', 20_000]);
  });
});
