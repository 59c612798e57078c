// Purchase rules (shared/purchase/rules/): a sale's rules judged by the API at each door, here the
// `buyers: verified-email` rule, which reads the buyer's token claims, through the real app.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import type { Config } from '../shared/config/index.js';
import { buildApp } from '../shared/http/app.js';
import { signJwt } from '../shared/buyers/jwt.js';
import { saleKeys } from '../shared/redis/keys.js';
import { Purchaser } from '../shared/purchase/purchaser.js';
import { refusalsAt, RULES } from '../shared/purchase/rules/sale-rules.js';
import type { Sale } from '../shared/sales/sale.js';
import { cli } from './support/cli.js';
import { testEnv, type TestEnv } from './support/env.js';
import { HOUR, newSale, openDraw } from './support/fixtures.js';
import { ADMIN_TOKEN, JWT_SECRET } from './support/tokens.js';

let env: TestEnv;
let jwtApp: FastifyInstance;
let gatewayApp: FastifyInstance;

async function appWith(overrides: Partial<Config>): Promise<FastifyInstance> {
  const config = { ...env.config, ...overrides };
  const app = buildApp({
    config,
    pool: env.pool,
    redis: env.redis,
    purchaser: new Purchaser(env.redis, config),
    logger: env.logger,
  });
  await app.ready();
  return app;
}

before(async () => {
  env = await testEnv();
  jwtApp = await appWith({ authMode: 'jwt', jwtSecret: JWT_SECRET, jwtJwksUrl: undefined });
  gatewayApp = await appWith({ authMode: 'trusted-header' });
});

after(async () => {
  await jwtApp?.close();
  await gatewayApp?.close();
  await env?.close();
});

/** A buyer's token with these claims besides sub. */
const token = (user: string, claims: Record<string, unknown> = {}) =>
  `Bearer ${signJwt(user, JWT_SECRET, 600, claims)}`;
const VERIFIED = { email: 'a@example.com', email_verified: true };

async function ask(
  app: FastifyInstance,
  method: 'POST' | 'GET',
  url: string,
  headers: Record<string, string>,
): Promise<string> {
  const res = await app.inject({ method, url, headers });
  const body = res.body ? res.json() : {};
  return `${res.statusCode} ${body.error ?? body.status ?? body.state ?? ''}`.trim();
}
const buy = (s: Sale, user: string, claims?: Record<string, unknown>) =>
  ask(jwtApp, 'POST', `/api/sales/${s.id}/purchases`, { authorization: token(user, claims) });

/** What a refused buyer must leave as it was. */
const redisState = async (s: Sale) => {
  const k = saleKeys(s.id);
  return {
    available: await env.redis.get(k.available),
    winners: await env.redis.llen(k.winners),
    counts: await env.redis.hgetall(k.buyCounts),
  };
};

describe('buyers: verified-email', () => {
  test('a sale sells only to buyers whose token says email_verified: true; a refusal changes nothing', async () => {
    const s = await newSale(env, { buyers: 'verified-email', stock: 5 });
    assert.equal(s.buyers, 'verified-email');
    const before = await redisState(s);
    for (const claims of [
      {},
      { email: 'b@example.com' },
      { email_verified: false },
      { email_verified: 'true' },
      { email_verified: 1 },
    ]) {
      assert.equal(await buy(s, 'bob', claims), '403 email_not_verified', JSON.stringify(claims));
    }
    assert.deepEqual(await redisState(s), before);
    assert.equal(await buy(s, 'ann', VERIFIED), '202 queued');
    assert.equal(await env.redis.get(saleKeys(s.id).available), '4');
    const view = await jwtApp.inject({ method: 'GET', url: `/api/sales/${s.id}` });
    assert.equal(view.json().buyers, 'verified-email');
  });

  test('`flashsale token --email-verified` prints a token such a sale sells to; without the flag it refuses it', async () => {
    const s = await newSale(env, { buyers: 'verified-email' });
    const tokenOf = async (...flags: string[]) => {
      const r = await cli(env, ['token', 'gus', '--jwt-secret', JWT_SECRET, ...flags]);
      assert.equal(r.code, 0, r.out);
      return `Bearer ${r.stdout.trim()}`;
    };
    const purchase = (authorization: string) => ask(jwtApp, 'POST', `/api/sales/${s.id}/purchases`, { authorization });
    assert.equal(await purchase(await tokenOf()), '403 email_not_verified');
    assert.equal(await purchase(await tokenOf('--email-verified')), '202 queued');
  });

  test('in development, POST /api/dev/token with emailVerified: true gives a token such a sale sells to; a value not true or false is 400', async () => {
    const devApp = await appWith({ authMode: 'jwt', jwtSecret: JWT_SECRET, jwtJwksUrl: undefined, development: true });
    try {
      const s = await newSale(env, { buyers: 'verified-email' });
      const devToken = async (body: Record<string, unknown>) => {
        const res = await devApp.inject({ method: 'POST', url: '/api/dev/token', payload: body });
        return { status: res.statusCode, body: res.json() };
      };
      const purchase = async (body: Record<string, unknown>) =>
        ask(devApp, 'POST', `/api/sales/${s.id}/purchases`, {
          authorization: `Bearer ${(await devToken(body)).body.token}`,
        });
      assert.equal(await purchase({ userId: 'hal' }), '403 email_not_verified');
      assert.equal(await purchase({ userId: 'hal', emailVerified: false }), '403 email_not_verified');
      assert.equal(await purchase({ userId: 'hal', emailVerified: true }), '202 queued');
      for (const emailVerified of ['true', 1, 'yes']) {
        const bad = await devToken({ userId: 'ivy', emailVerified });
        assert.equal(bad.status, 400, JSON.stringify(emailVerified));
        assert.deepEqual(bad.body, { error: 'bad_request', message: 'emailVerified must be true or false.' });
      }
    } finally {
      await devApp.close();
    }
  });

  test('a sale for anyone sells to a buyer without the claim', async () => {
    const s = await newSale(env);
    assert.equal(s.buyers, 'anyone');
    assert.equal(await buy(s, 'cy'), '202 queued');
  });

  test('a buyer without a verified email takes no place in a waiting room and makes no entry in a draw', async () => {
    const room = await newSale(env, {
      buyers: 'verified-email',
      admission: 'queue',
      startsAt: new Date(Date.now() + HOUR).toISOString(),
    });
    const join = (user: string, claims?: Record<string, unknown>) =>
      ask(jwtApp, 'POST', `/api/sales/${room.id}/queue`, { authorization: token(user, claims) });
    assert.equal(await join('dan'), '403 email_not_verified');
    assert.equal(await env.redis.exists(saleKeys(room.id).queue), 0, 'nobody has joined');
    assert.match(await join('eve', VERIFIED), /^20[01] /);
    assert.equal((await env.redis.zscore(saleKeys(room.id).queue, 'eve')) !== null, true);

    const draw = await newSale(env, { buyers: 'verified-email', ...openDraw() });
    const enter = (user: string, claims?: Record<string, unknown>) =>
      ask(jwtApp, 'POST', `/api/sales/${draw.id}/entries`, { authorization: token(user, claims) });
    assert.equal(await enter('dan'), '403 email_not_verified');
    assert.match(await enter('eve', VERIFIED), /^20[01] /);
    const { rows } = await env.pool.query('select buyer from draw_entries where sale_id = $1', [draw.id]);
    assert.deepEqual(
      rows.map((r) => r.buyer),
      ['eve'],
    );
  });

  test('the waiting room and the draw judge the sale Postgres holds: with its Redis copy gone, an unverified buyer is still refused', async () => {
    // Redis can lose a sale that Postgres keeps (an OS crash under appendfsync everysec, a failover);
    // joining and entering read the sale from Postgres, and so do their rules.
    const draw = await newSale(env, { buyers: 'verified-email', ...openDraw() });
    const room = await newSale(env, {
      buyers: 'verified-email',
      admission: 'queue',
      startsAt: new Date(Date.now() + HOUR).toISOString(),
    });
    await env.redis.del(saleKeys(draw.id).meta, saleKeys(room.id).meta);
    assert.equal(
      await ask(jwtApp, 'POST', `/api/sales/${draw.id}/entries`, { authorization: token('mallory') }),
      '403 email_not_verified',
    );
    assert.equal(
      (await env.pool.query('select 1 from draw_entries where sale_id = $1', [draw.id])).rowCount,
      0,
      'no entry',
    );
    assert.equal(
      await ask(jwtApp, 'POST', `/api/sales/${room.id}/queue`, { authorization: token('mallory') }),
      '403 email_not_verified',
    );
    assert.equal(await env.redis.exists(saleKeys(room.id).queue), 0, 'no place');
  });

  test('behind a gateway the API has no claims: such a sale sells to nobody through it', async () => {
    const s = await newSale(env, { buyers: 'verified-email' });
    const before = await redisState(s);
    assert.equal(
      await ask(gatewayApp, 'POST', `/api/sales/${s.id}/purchases`, { 'x-user-id': 'fay' }),
      '403 email_not_verified',
    );
    assert.deepEqual(await redisState(s), before);
  });

  test('a sale definition with another value is refused', async () => {
    const res = await jwtApp.inject({
      method: 'POST',
      url: '/api/sales',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      payload: { name: 'x', stock: 1, price: 500, currency: 'EUR', buyers: 'verified-phone' },
    });
    assert.equal(res.statusCode, 400);
    assert.equal(res.json().error, 'invalid_sale');
  });

  test('each door documents the refusals of its rules', () => {
    assert.ok(RULES.length >= 4);
    assert.deepEqual(refusalsAt('join'), ['email_not_verified']);
    assert.ok(refusalsAt('purchase').includes('purchase_token_required'));
  });
});
