// The admission-mode seam (shared/admission/mode.ts): a third mode, invitation only, made in a test
// fixture (test/fixtures/admission-mode/) and registered with one line, works end to end through
// the real app and purchase.lua's generic gate, and nothing in shared/ names it.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { registerMode } from '../shared/admission/modes.js';
import { buildApp } from '../shared/http/app.js';
import { signJwt } from '../shared/buyers/jwt.js';
import { saleKeys } from '../shared/redis/keys.js';
import { Purchaser } from '../shared/purchase/purchaser.js';
import { purchaseScript } from '../shared/sales/scripts.js';
import type { Sale } from '../shared/sales/sale.js';
import { testEnv, type TestEnv } from './support/env.js';
import { newSale } from './support/fixtures.js';
import { ADMIN_TOKEN, JWT_SECRET } from './support/tokens.js';
import { inviteMode } from './fixtures/admission-mode/mode.js';

registerMode(inviteMode);

let env: TestEnv;
let app: FastifyInstance;

before(async () => {
  env = await testEnv();
  const config = { ...env.config, authMode: 'jwt' as const, jwtSecret: JWT_SECRET, jwtJwksUrl: undefined };
  app = buildApp({
    config,
    pool: env.pool,
    redis: env.redis,
    purchaser: new Purchaser(env.redis, config),
    logger: env.logger,
  });
  await app.ready();
});

after(async () => {
  await app?.close();
  await env?.close();
});

const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
const buyer = (user: string) => ({ authorization: `Bearer ${signJwt(user, JWT_SECRET, 600)}` });

async function buy(s: Sale, user: string): Promise<string> {
  const res = await app.inject({ method: 'POST', url: `/api/sales/${s.id}/purchases`, headers: buyer(user) });
  return `${res.statusCode} ${res.json().error ?? res.json().status}`;
}

/** What a refused buyer must leave as it was. */
const redisState = async (s: Sale) => {
  const k = saleKeys(s.id);
  return {
    available: await env.redis.get(k.available),
    winners: await env.redis.llen(k.winners),
    counts: await env.redis.hgetall(k.buyCounts),
    seq: await env.redis.get(k.seq),
  };
};

describe('admission mode from a fixture: invitation only', () => {
  test('the API takes a sale of the registered mode, and its input refuses a mode nobody registered', async () => {
    const made = await app.inject({
      method: 'POST',
      url: '/api/sales',
      headers: admin,
      payload: { name: 'Drop', stock: 2, price: 500, currency: 'EUR', admission: 'invite' },
    });
    assert.equal(made.statusCode, 201, made.body);
    assert.equal(made.json().admission, 'invite');
    // Not seeded: no seed to commit to.
    assert.equal(made.json().seedSha256, null);
    const row = await env.pool.query('select admission, seed from sales where id = $1', [made.json().id]);
    assert.deepEqual(row.rows[0], { admission: 'invite', seed: null });
    assert.equal(await env.redis.hget(saleKeys(made.json().id).meta, 'gate'), 'member');

    const refused = await app.inject({
      method: 'POST',
      url: '/api/sales',
      headers: admin,
      payload: { name: 'Drop', stock: 2, price: 500, currency: 'EUR', admission: 'lottery' },
    });
    assert.equal(refused.statusCode, 400);
    assert.equal(refused.json().error, 'invalid_sale');
    assert.match(refused.json().message, /admission must be one of first-come, queue, draw, invite/);
  });

  test('it sells to invited buyers alone; an uninvited buyer is refused not_admitted and changes nothing', async () => {
    const s = await newSale(env, { admission: 'invite', stock: 3 });
    const invite = await app.inject({
      method: 'PUT',
      url: `/api/sales/${s.id}/invitations`,
      headers: admin,
      payload: { buyers: ['ann', 'cat'] },
    });
    assert.equal(invite.statusCode, 200, invite.body);
    assert.deepEqual(invite.json(), { invited: 2 });

    const before = await redisState(s);
    assert.equal(await buy(s, 'bob'), '403 not_admitted');
    assert.deepEqual(await redisState(s), before);

    assert.equal(await buy(s, 'ann'), '202 queued');
    assert.equal(await env.redis.get(saleKeys(s.id).available), '2');
    assert.equal(await env.redis.hget(saleKeys(s.id).buyCounts, 'ann'), '1');
    assert.equal(await env.redis.hget(saleKeys(s.id).buyCounts, 'bob'), null);

    // The mode's figures in the live view, under its own key; the other modes' are null.
    const live = await app.inject({ method: 'GET', url: `/api/sales/${s.id}/live`, headers: admin });
    assert.equal(live.statusCode, 200, live.body);
    assert.deepEqual(live.json().invitations, { invited: 2 });
    assert.equal(live.json().room, null);
    assert.equal(live.json().draw, null);
  });

  test('purchase.lua itself requires the gate the meta names: without it, or off the list, -16', async () => {
    const s = await newSale(env, { admission: 'invite', stock: 3 });
    await env.redis.sadd(saleKeys(s.id).modeList('invite'), 'ann');
    const args = { saleId: s.id, qty: 1, buyCountTtlSeconds: 60 };
    const before = await redisState(s);
    assert.deepEqual(await purchaseScript(env.redis, { ...args, userId: 'ann', orderId: 'o-none' }), [-16, 0]);
    assert.deepEqual(
      await purchaseScript(env.redis, {
        ...args,
        userId: 'ann',
        orderId: 'o-pass',
        gate: { kind: 'pass', expiresAt: Date.now() + 60_000 },
      }),
      [-16, 0],
    );
    assert.deepEqual(
      await purchaseScript(env.redis, {
        ...args,
        userId: 'bob',
        orderId: 'o-bob',
        gate: { kind: 'member', mode: 'invite' },
      }),
      [-16, 0],
    );
    assert.deepEqual(await redisState(s), before);
    assert.deepEqual(
      await purchaseScript(env.redis, {
        ...args,
        userId: 'ann',
        orderId: 'o-ann',
        gate: { kind: 'member', mode: 'invite' },
      }),
      [1, 2],
    );
  });

  test('purchase.lua judges a sale an older release loaded (no gate in its meta) by its admission, and one it does not know sells to nobody', async () => {
    const s = await newSale(env, { stock: 3 });
    const meta = saleKeys(s.id).meta;
    assert.equal(await env.redis.hget(meta, 'gate'), 'none');
    await env.redis.hdel(meta, 'gate');
    let n = 0;
    const attempt = () =>
      purchaseScript(env.redis, {
        saleId: s.id,
        userId: 'ann',
        qty: 1,
        orderId: `o-old-${++n}`,
        buyCountTtlSeconds: 60,
      });
    const before = await redisState(s);
    for (const [fields, code] of [
      [{ admission: 'queue' }, -11],
      [{ admission: 'draw' }, -10],
      [{ admission: 'lottery' }, -16],
      [{ admission: 'first-come', challenge: 'pow' }, -8],
    ] as const) {
      await env.redis.hset(meta, fields);
      assert.deepEqual(await attempt(), [code, 0], JSON.stringify(fields));
    }
    assert.deepEqual(await redisState(s), before);
    await env.redis.hset(meta, { challenge: 'none' });
    assert.deepEqual(await attempt(), [1, 2]);
  });

  test("the invitation route is the mode's own: admin only, and only on a sale of the mode", async () => {
    const s = await newSale(env, { admission: 'invite' });
    const other = await newSale(env);
    const put = (id: string, headers: Record<string, string>) =>
      app.inject({ method: 'PUT', url: `/api/sales/${id}/invitations`, headers, payload: { buyers: ['ann'] } });
    assert.equal((await put(s.id, buyer('ann'))).statusCode, 403);
    const wrong = await put(other.id, admin);
    assert.equal(wrong.statusCode, 400);
    assert.equal(wrong.json().error, 'bad_request');
    assert.equal(await env.redis.exists(saleKeys(other.id).modeList('invite')), 0);
  });

  test("nothing in shared/ or daemons/ names the mode, and only the built-in modes' own files name theirs", () => {
    const root = new URL('..', import.meta.url).pathname;
    const files: string[] = [];
    const walk = (dir: string) => {
      for (const e of readdirSync(join(root, dir), { withFileTypes: true })) {
        if (e.isDirectory()) walk(join(dir, e.name));
        else files.push(join(dir, e.name));
      }
    };
    walk('shared');
    walk('daemons');
    const text = (f: string) => readFileSync(join(root, f), 'utf8');
    assert.deepEqual(
      files.filter((f) => /'invite'|"invite"/.test(text(f))),
      [],
    );
    // A branch on a built-in mode's name lives in that mode's own files (its folder, its routes, its
    // rule, its part of the buyer's page): the generic page asks the part (public/mode.js) instead.
    const OWN = [
      'shared/admission/room/',
      'shared/admission/draw/',
      'shared/http/routes/admission/',
      'shared/purchase/rules/admission-pass.ts',
      'shared/purchase/rules/draw-only.ts',
      'shared/http/public/queue.js',
      'shared/http/public/draw.js',
    ];
    const branching = files.filter(
      (f) => /admission [!=]== '(queue|draw)'/.test(text(f)) && !OWN.some((own) => f.startsWith(own)),
    );
    assert.deepEqual(branching, []);
    assert.ok(
      files.includes('shared/http/public/buy.js') && files.includes('shared/sales/definition.ts'),
      'the walk reached the page and the definition',
    );
    // A mode's settings are its folder's (admission/<mode>/fields.ts): the sale's definition, its input and its scripts only take them.
    const settings = files.filter(
      (f) => /only: '(queue|draw)'|admission: '(queue|draw)'/.test(text(f)) && !OWN.some((own) => f.startsWith(own)),
    );
    assert.deepEqual(settings, []);
    assert.match(text('shared/admission/room/fields.ts'), /only: 'queue'/);
    assert.match(text('shared/admission/draw/fields.ts'), /only: 'draw'/);
  });
});
