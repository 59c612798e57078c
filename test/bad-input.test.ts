// The bad-input battery: every hostile or malformed request gets its exact 4xx with a
// {error, message} body, and leaves Redis and Postgres byte-for-byte as they were.
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, afterEach, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { startApi } from '../daemons/api.js';
import { duplicateKey } from '../shared/runtime/json-keys.js';
import { saleKeys } from '../shared/redis/keys.js';
import { SALE_ID_PATTERN } from '../shared/runtime/ids.js';
import type { Sale } from '../shared/sales/sale.js';
import { OrderWriter } from '../shared/pipeline/writer.js';
import { testEnv, type TestEnv } from './support/env.js';
import { newSale } from './support/fixtures.js';
import { http, type HttpOptions, type Reply } from './support/http.js';
import { stateSnapshot, type StateSnapshot } from './support/snapshot.js';
import { ADMIN_TOKEN, auth, b64, forgeJwt, JWT_SECRET, token } from './support/tokens.js';

let env: TestEnv;
let api: Awaited<ReturnType<typeof startApi>>;
let sale: Sale;
/** Real orders in every state a lookup can find: pending and paid in Postgres, queued in Redis only. */
const orders = { alice: '', bob: '', carol: '', dave: '' };
let baseline: StateSnapshot;

before(async () => {
  // No clock tolerance: "expired this second" must be refused (tolerance has its own tests in auth.test.ts).
  env = await testEnv({ jwtClockToleranceSeconds: 0 });
  api = await startApi(env.config, env.logger);
  sale = await newSale(env, { stock: 20, perUserLimit: 3, maxPerOrder: 2, paymentWindowSeconds: 3600 });
  const buy = async (user: string, qty: number) => {
    const res = await http(api.port, 'POST', `/api/sales/${sale.id}/purchases`, { body: { qty }, user });
    assert.equal(res.status, 202);
    return res.body.orderId as string;
  };
  orders.alice = await buy('alice', 2);
  orders.bob = await buy('bob', 1);
  orders.carol = await buy('carol', 1);
  const writer = new OrderWriter({
    pool: env.pool,
    redis: env.redis,
    logger: env.logger,
    config: { ...env.config, writerId: 'bad-input' },
  });
  assert.equal(await writer.drainOnce(), 3);
  assert.equal((await http(api.port, 'POST', `/api/orders/${orders.bob}/pay`, { user: 'bob' })).body.status, 'paid');
  orders.dave = await buy('dave', 1); // no writer runs again: this one stays queued
  baseline = await stateSnapshot(env);
  assert.equal(baseline.sales.length, 1);
  assert.equal(baseline.orders.length, 3);
  const k = saleKeys(sale.id);
  for (const key of [
    k.meta,
    k.available,
    k.seq,
    k.queued,
    k.winners,
    k.deadlines,
    k.expiry(orders.alice),
    k.buyCounts,
  ]) {
    assert.ok(baseline.redis[key], `baseline holds ${key}`);
  }
  assert.equal(baseline.redis[k.available]!.value, '15');
});

// Checked after every test, so a request that changes anything is caught by the test that sent it;
// the next test is then judged from where this one left the state, not failed along with it.
afterEach(async () => {
  const expected = baseline;
  baseline = await stateSnapshot(env);
  assert.deepEqual(baseline, expected, 'a refused request changed Redis or Postgres');
});

after(async () => {
  await api.stop();
  await env.close();
});

function assertError(res: Reply, status: number, code: string, what = ''): void {
  const seen = `${what} -> ${res.status} ${JSON.stringify(res.body)}`;
  assert.equal(res.status, status, seen);
  assert.ok(res.body !== null && typeof res.body === 'object', seen);
  assert.deepEqual(Object.keys(res.body).sort(), ['error', 'message'], seen);
  assert.equal(res.body.error, code, seen);
  assert.equal(typeof res.body.message, 'string', seen);
  assert.match(res.body.message, /\w+\s+\w+/, `message should be a sentence: ${seen}`);
}

const purchasePath = (saleId = sale.id) => `/api/sales/${saleId}/purchases`;
const buyRaw = (body: string, headers: Record<string, string> = auth('mallory')) =>
  http(api.port, 'POST', purchasePath(), { body, headers });
const buyJson = (body: unknown, user = 'mallory') =>
  http(api.port, 'POST', purchasePath(), { body: JSON.stringify(body), user });
/** POST /api/sales: a string is sent as it is, anything else as JSON. */
const admin = (body: unknown, headers: Record<string, string> = { authorization: `Bearer ${ADMIN_TOKEN}` }) =>
  http(api.port, 'POST', '/api/sales', { body: typeof body === 'string' ? body : JSON.stringify(body), headers });

/** What a plain request cannot send: no content-type, chunked bodies, a lying content-length. A fresh connection each. */
const send = (method: string, path: string, opts: HttpOptions = {}) =>
  http(api.port, method, path, { ...opts, agent: false });

const nowSeconds = () => Math.floor(Date.now() / 1000);
const HS256 = { alg: 'HS256', typ: 'JWT' };
const claims = (extra: Record<string, unknown> = {}) => ({
  sub: 'mallory',
  iat: nowSeconds(),
  exp: nowSeconds() + 600,
  ...extra,
});

describe('bad bodies on the purchase route', () => {
  test('malformed JSON is 400 invalid_json', async () => {
    for (const body of [
      '{"qty":',
      '{qty:1}',
      "{'qty':1}",
      '{"qty":1,}',
      '{"qty":NaN}',
      '{"qty":Infinity}',
      '{"qty":01}',
      '{"qty":1} x',
      'undefined',
      '   ',
      '\x00',
    ]) {
      assertError(await buyRaw(body), 400, 'invalid_json', body);
    }
  });

  test('a key twice in one object is 400 invalid_json naming the key, on every route with a body, before anything else is checked', async () => {
    const cases: [string, string][] = [
      ['{"qty":2,"qty":1}', 'qty'],
      ['{"qty":1,"qty":1}', 'qty'],
      ['{"qty":1,"\\u0071ty":1}', 'qty'],
      ['{ "qty" : 1 , "qty" : 1 }', 'qty'],
      ['{"a":{"b":1,"b":2}}', 'b'],
      ['[{"x":1},{"x":1,"x":2}]', 'x'],
      ['{"__proto__":1,"__proto__":2}', '__proto__'],
      ['{"":1,"":2}', ''],
      ['{"s":"{\\"k\\":1,\\"k\\":2}","s":3}', 's'],
    ];
    const routes: [string, (body: string) => Promise<Reply>][] = [
      ['purchase', (body) => buyRaw(body)],
      // Carol's own pending order, and a valid sale definition: either would change state if let through.
      ['pay', (body) => http(api.port, 'POST', `/api/orders/${orders.carol}/pay`, { body, user: 'carol' })],
      ['admin', (body) => admin(body.replace(/^\{/, '{"name":"Twice","stock":10,'))],
    ];
    for (const [route, send] of routes) {
      for (const [body, key] of cases) {
        const res = await send(body);
        assertError(res, 400, 'invalid_json', `${route} ${body}`);
        assert.ok(
          res.body.message.includes(JSON.stringify(key)),
          `${route} ${body}: the message names ${JSON.stringify(key)}: ${res.body.message}`,
        );
      }
    }
    // The same key in two objects, or a key's text as a value, is no duplicate.
    for (const body of ['{"a":{"qty":1},"qty":1}', '[{"qty":1},{"qty":1}]', '{"qty":"qty"}'])
      assert.notEqual((await buyRaw(body)).body.error, 'invalid_json', body);
  });

  test('JSON that is not an object (array, string, number, boolean, null) is 400 bad_request', async () => {
    for (const body of ['[]', '[{"qty":1}]', '"qty"', '1', '0', 'true', 'null'])
      assertError(await buyRaw(body), 400, 'bad_request', body);
  });

  test('a body that is not application/json is 415 unsupported_media_type', async () => {
    for (const type of [
      'text/plain',
      'application/x-www-form-urlencoded',
      'multipart/form-data; boundary=x',
      'application/json-patch+json',
      'application/jsonx',
      'application/xml',
    ]) {
      assertError(
        await buyRaw('{"qty":1}', { ...auth('mallory'), 'content-type': type }),
        415,
        'unsupported_media_type',
        type,
      );
    }
    const untyped = await send('POST', purchasePath(), {
      headers: { ...auth('mallory'), 'content-length': 9 },
      chunks: ['{"qty":1}'],
    });
    assertError(untyped, 415, 'unsupported_media_type', 'no content-type');
  });

  test('qty 0, negative, fractional, string, huge, NaN-ish, boolean or not a number is 400 invalid_qty', async () => {
    const qtys: unknown[] = [
      0,
      -1,
      -1000,
      1.5,
      0.5,
      '1',
      '',
      1e9,
      1001,
      2 ** 53 + 2,
      'NaN',
      'Infinity',
      true,
      false,
      [],
      [1],
      {},
      { n: 1 },
    ];
    for (const qty of qtys) assertError(await buyJson({ qty }), 400, 'invalid_qty', JSON.stringify(qty));
    for (const raw of ['{"qty":-0}', '{"qty":1e400}', '{"qty":-1e400}', '{"qty":1.0000001}'])
      assertError(await buyRaw(raw), 400, 'invalid_qty', raw);
  });

  test("qty above the sale's max per order (2) is 400 qty_above_max", async () => {
    for (const qty of [3, 1000]) assertError(await buyJson({ qty }), 400, 'qty_above_max', String(qty));
  });

  test('unknown fields are 400 bad_request, __proto__ included', async () => {
    for (const body of [
      { qty: 1, foo: 1 },
      { quantity: 1 },
      { qty: 1, saleId: 'other' },
      { qty: 1, userId: 'alice' },
    ]) {
      assertError(await buyJson(body), 400, 'bad_request', JSON.stringify(body));
    }
    for (const raw of ['{"__proto__":{"qty":1}}', '{"qty":1,"constructor":{"prototype":{}}}'])
      assertError(await buyRaw(raw), 400, 'bad_request', raw);
  });

  test('an unknown sale is 404 sale_not_found, to view or to buy', async () => {
    assertError(await http(api.port, 'GET', '/api/sales/no-such-sale'), 404, 'sale_not_found');
    assertError(
      await http(api.port, 'POST', purchasePath('no-such-sale'), { body: { qty: 1 }, user: 'mallory' }),
      404,
      'sale_not_found',
    );
    assertError(await http(api.port, 'POST', purchasePath(`${sale.id}x`), { user: 'mallory' }), 404, 'sale_not_found');
  });
});

describe('oversized bodies', () => {
  /** A JSON body of exactly this many bytes. */
  const padded = (bytes: number) => `{"qty":1,"pad":"${'x'.repeat(bytes - 18)}"}`;

  test('the purchase route takes 1024 bytes: 1024 is parsed, 1025 is 413 payload_too_large', async () => {
    assert.equal(padded(1024).length, 1024);
    assertError(await buyRaw(padded(1024)), 400, 'bad_request', '1024 bytes');
    assertError(await buyRaw(padded(1025)), 413, 'payload_too_large', '1025 bytes');
    assertError(await buyRaw(padded(1024 * 1024)), 413, 'payload_too_large', '1 MiB');
  });

  test('a chunked body over the limit is cut off with 413, and so is a content-length that lies', async () => {
    const chunks = ['{"qty":1,"pad":"', ...Array.from({ length: 10 }, () => 'x'.repeat(500)), '"}'];
    const headers = { ...auth('mallory'), 'content-type': 'application/json' };
    assertError(await send('POST', purchasePath(), { headers, chunks }), 413, 'payload_too_large', 'chunked');
    // Claims a gigabyte and sends nothing: refused on the header, without waiting for the body.
    assertError(
      await send('POST', purchasePath(), { headers: { ...headers, 'content-length': 1e9 }, end: false }),
      413,
      'payload_too_large',
      'content-length 1e9',
    );
  });

  test('the other routes take 16 KiB (pay: 1024 bytes)', async () => {
    const big = JSON.stringify({ name: 'x'.repeat(16 * 1024), stock: 1, price: 500, currency: 'EUR' });
    assertError(await admin(big), 413, 'payload_too_large', 'admin 16 KiB');
    const chunks = ['{"name":"', ...Array.from({ length: 40 }, () => 'x'.repeat(500)), '","stock":1}'];
    const headers = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' };
    assertError(await send('POST', '/api/sales', { headers, chunks }), 413, 'payload_too_large', 'admin chunked');
    assertError(
      await http(api.port, 'POST', `/api/orders/${orders.alice}/pay`, { body: padded(2000), user: 'alice' }),
      413,
      'payload_too_large',
      'pay',
    );
  });
});

describe('malformed and foreign ids', () => {
  const uuid = randomUUID();
  const short = randomBytes(16).toString('base64url');
  const badSaleIds = [
    'a'.repeat(65),
    'a'.repeat(256),
    'a'.repeat(257),
    'a'.repeat(4000),
    '..',
    '.',
    'a..b',
    'a.b',
    '%2e%2e',
    '%00',
    'a%00b',
    'caf%C3%A9',
    '%F0%9F%98%80',
    '%D0%B0',
    'a%20b',
    '%20',
    'a%2Fb',
    '%5C',
    "a'b",
    'a%22b',
    '%3Cscript%3E',
    '%E0%A4%A',
    '%ZZ',
    '%',
  ];

  test('sale ids overlong or with odd characters are 400 invalid_id', async () => {
    for (const id of badSaleIds) {
      assertError(await http(api.port, 'GET', `/api/sales/${id}`), 400, 'invalid_id', `GET ${id.slice(0, 80)}`);
      assertError(
        await http(api.port, 'POST', purchasePath(id), { body: { qty: 1 }, user: 'mallory' }),
        400,
        'invalid_id',
        `buy ${id.slice(0, 80)}`,
      );
    }
    assertError(
      await http(api.port, 'POST', '/api/sales//purchases', { body: { qty: 1 }, user: 'mallory' }),
      400,
      'invalid_id',
      'empty',
    );
  });

  test('order ids malformed or overlong are 400 invalid_id, to view or to pay', async () => {
    const ids = [
      'x',
      'not-an-order',
      sale.id,
      `${sale.id}.`,
      `${sale.id}.not-a-uuid`,
      `${sale.id}.${uuid.toUpperCase()}`,
      `${sale.id}.${uuid}x`,
      `${sale.id}..${uuid}`,
      `${'a'.repeat(65)}.${uuid}`,
      `a%20b.${uuid}`,
      `%00.${uuid}`,
      `${sale.id}.${uuid}%00`,
      'a'.repeat(300),
      '%ZZ',
      `caf%C3%A9.${uuid}`,
      // The short form: 22 base64url characters, the last holding 4 bits (A, Q, g or w).
      `${sale.id}.${'A'.repeat(21)}B`,
      `${sale.id}.${'A'.repeat(21)}`,
      `${sale.id}.${'A'.repeat(23)}`,
      `${sale.id}.${'A'.repeat(20)}+A`,
      `${sale.id}.${'A'.repeat(20)}%2FA`,
      `${sale.id}.${'A'.repeat(20)}.A`,
      `${sale.id}.${short}%00`,
      `${sale.id}..${short}`,
    ];
    for (const id of ids) {
      assertError(await http(api.port, 'GET', `/api/orders/${id}`, { user: 'alice' }), 400, 'invalid_id', `GET ${id}`);
      assertError(
        await http(api.port, 'POST', `/api/orders/${id}/pay`, { user: 'alice' }),
        400,
        'invalid_id',
        `pay ${id}`,
      );
    }
  });

  test('a well-formed order id that does not exist is 404 order_not_found', async () => {
    for (const id of [`${sale.id}.${uuid}`, `no-such-sale.${uuid}`, `${sale.id}.${short}`, `no-such-sale.${short}`]) {
      assertError(await http(api.port, 'GET', `/api/orders/${id}`, { user: 'alice' }), 404, 'order_not_found', id);
      assertError(await http(api.port, 'POST', `/api/orders/${id}/pay`, { user: 'alice' }), 404, 'order_not_found', id);
    }
  });

  test("another user's order is 404 order_not_found in every state, and paying it pays nothing", async () => {
    for (const [owner, id] of Object.entries(orders)) {
      for (const user of ['mallory', ...Object.keys(orders).filter((u) => u !== owner)]) {
        assertError(
          await http(api.port, 'GET', `/api/orders/${id}`, { user }),
          404,
          'order_not_found',
          `${user} views ${owner}'s`,
        );
        assertError(
          await http(api.port, 'POST', `/api/orders/${id}/pay`, { user }),
          404,
          'order_not_found',
          `${user} pays ${owner}'s`,
        );
      }
    }
    // The owners still see them as they were, so the 404s above are not a broken lookup.
    const view = (user: keyof typeof orders) => http(api.port, 'GET', `/api/orders/${orders[user]}`, { user });
    assert.equal((await view('alice')).body.status, 'pending_payment');
    assert.equal((await view('bob')).body.status, 'paid');
    assert.equal((await view('dave')).body.status, 'queued');
  });
});

describe('missing and forged buyer tokens', () => {
  const valid = token('mallory');
  const [h, p, sig] = valid.split('.') as [string, string, string];
  const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  // The last of 43 characters carries 4 bits of the signature and 2 spare ones: flipping a spare bit decodes the same.
  const alias = sig.slice(0, -1) + ALPHABET[ALPHABET.indexOf(sig.at(-1)!) ^ 1];

  const cases: [string, Record<string, string>][] = [
    ['no Authorization', {}],
    ['Basic scheme', { authorization: `Basic ${Buffer.from('mallory:pw').toString('base64')}` }],
    ['Token scheme with a valid JWT', { authorization: `Token ${valid}` }],
    ['bare JWT without a scheme', { authorization: valid }],
    ['Bearer and nothing', { authorization: 'Bearer' }],
    ['Bearer with two tokens', { authorization: `Bearer ${valid} ${valid}` }],
    ['garbage', { authorization: 'Bearer garbage' }],
    ['three empty parts', { authorization: 'Bearer ..' }],
    ['four parts', { authorization: `Bearer ${valid}.${sig}` }],
    ['two parts', { authorization: `Bearer ${h}.${p}` }],
    ['over 4096 characters', { authorization: `Bearer ${h}.${p}${'A'.repeat(4100)}.${sig}` }],
    ['header not JSON', { authorization: `Bearer ${b64('not json')}.${p}.${sig}` }],
    ['payload an array', { authorization: `Bearer ${forgeJwt(HS256, ['mallory'])}` }],
    ['payload not JSON', { authorization: `Bearer ${forgeJwt(HS256, 'mallory')}` }],
    ['signed with the wrong key', { authorization: `Bearer ${token('mallory', 'wrong-secret-0123456789')}` }],
    [
      'signature tampered',
      { authorization: `Bearer ${h}.${p}.${sig.slice(0, 10)}${sig[10] === 'A' ? 'B' : 'A'}${sig.slice(11)}` },
    ],
    ['signature empty', { authorization: `Bearer ${h}.${p}.` }],
    ['signature with a spare bit flipped', { authorization: `Bearer ${h}.${p}.${alias}` }],
    ['signature with a stray character', { authorization: `Bearer ${h}.${p}.${sig}=` }],
    ['payload swapped under the signature', { authorization: `Bearer ${h}.${b64(claims({ sub: 'alice' }))}.${sig}` }],
    ['alg none, unsigned', { authorization: `Bearer ${forgeJwt({ alg: 'none', typ: 'JWT' }, claims(), null)}` }],
    ['alg None, unsigned', { authorization: `Bearer ${forgeJwt({ alg: 'None' }, claims(), null)}` }],
    ['alg none with an HS256 signature', { authorization: `Bearer ${forgeJwt({ alg: 'none' }, claims())}` }],
    ['no alg', { authorization: `Bearer ${forgeJwt({ typ: 'JWT' }, claims())}` }],
    [
      'alg HS512',
      { authorization: `Bearer ${forgeJwt({ alg: 'HS512', typ: 'JWT' }, claims(), JWT_SECRET, 'sha512')}` },
    ],
    [
      'alg HS512 with an HS256 signature',
      { authorization: `Bearer ${forgeJwt({ alg: 'HS512', typ: 'JWT' }, claims())}` },
    ],
    [
      'alg RS256 HMAC-signed with the secret',
      { authorization: `Bearer ${forgeJwt({ alg: 'RS256', typ: 'JWT' }, claims())}` },
    ],
    ['expired', { authorization: `Bearer ${forgeJwt(HS256, claims({ exp: nowSeconds() - 60 }))}` }],
    ['expired this second', { authorization: `Bearer ${forgeJwt(HS256, claims({ exp: nowSeconds() }))}` }],
    ['exp as a string', { authorization: `Bearer ${forgeJwt(HS256, claims({ exp: String(nowSeconds() - 60) }))}` }],
    ['exp null', { authorization: `Bearer ${forgeJwt(HS256, claims({ exp: null }))}` }],
    ['nbf in the future', { authorization: `Bearer ${forgeJwt(HS256, claims({ nbf: nowSeconds() + 600 }))}` }],
    ['nbf as a string', { authorization: `Bearer ${forgeJwt(HS256, claims({ nbf: '0' }))}` }],
    ['sub missing', { authorization: `Bearer ${forgeJwt(HS256, { iat: nowSeconds(), exp: nowSeconds() + 600 })}` }],
    ['sub a number', { authorization: `Bearer ${forgeJwt(HS256, claims({ sub: 42 }))}` }],
    ['sub empty', { authorization: `Bearer ${forgeJwt(HS256, claims({ sub: '' }))}` }],
    ['sub 200 characters', { authorization: `Bearer ${forgeJwt(HS256, claims({ sub: 'm'.repeat(200) }))}` }],
    ['sub with a space', { authorization: `Bearer ${forgeJwt(HS256, claims({ sub: 'mal lory' }))}` }],
    ['sub not ASCII', { authorization: `Bearer ${forgeJwt(HS256, claims({ sub: 'mallöry' }))}` }],
    ['sub an object', { authorization: `Bearer ${forgeJwt(HS256, claims({ sub: { id: 'alice' } }))}` }],
  ];

  test('the purchase route refuses each with 401 unauthorized', async () => {
    assert.ok(
      Buffer.from(alias, 'base64url').equals(Buffer.from(sig, 'base64url')),
      'the alias decodes to the same bytes',
    );
    assert.equal(
      (
        await http(api.port, 'GET', `/api/orders/${orders.alice}`, {
          headers: { authorization: `Bearer ${token('alice')}` },
        })
      ).status,
      200,
    );
    for (const [what, headers] of cases)
      assertError(
        await http(api.port, 'POST', purchasePath(), { body: { qty: 1 }, headers }),
        401,
        'unauthorized',
        what,
      );
  });

  test("the order routes refuse each with 401 unauthorized, even for the owner's order", async () => {
    for (const [what, headers] of cases) {
      assertError(
        await http(api.port, 'GET', `/api/orders/${orders.alice}`, { headers }),
        401,
        'unauthorized',
        `view: ${what}`,
      );
      assertError(
        await http(api.port, 'POST', `/api/orders/${orders.carol}/pay`, { headers }),
        401,
        'unauthorized',
        `pay: ${what}`,
      );
    }
    const forgedAlice = forgeJwt(HS256, claims({ sub: 'alice' }), 'wrong-secret-0123456789');
    assertError(
      await http(api.port, 'POST', `/api/orders/${orders.alice}/pay`, {
        headers: { authorization: `Bearer ${forgedAlice}` },
      }),
      401,
      'unauthorized',
      'forged alice',
    );
  });
});

describe('the admin route', () => {
  const definition = { name: 'Hostile sale', stock: 10, price: 500, currency: 'EUR' };

  test('no token is 401 unauthorized; a buyer JWT or a wrong token is 403 forbidden', async () => {
    assertError(await admin(definition, {}), 401, 'unauthorized', 'no token');
    assertError(await admin(definition, { authorization: `Basic ${ADMIN_TOKEN}` }), 401, 'unauthorized', 'Basic');
    assertError(await admin(definition, { authorization: ADMIN_TOKEN }), 401, 'unauthorized', 'no scheme');
    for (const bad of [
      token('admin'),
      `${ADMIN_TOKEN}x`,
      ADMIN_TOKEN.slice(0, -1),
      ADMIN_TOKEN.toUpperCase(),
      JWT_SECRET,
    ]) {
      assertError(await admin(definition, { authorization: `Bearer ${bad}` }), 403, 'forbidden', bad);
    }
  });

  test('invalid sale definitions are 400 invalid_sale', async () => {
    const day = (d: number) => new Date(Date.UTC(2030, 0, d)).toISOString();
    const definitions: unknown[] = [
      { stock: 10 },
      { name: '', stock: 10 },
      { name: '   ', stock: 10 },
      { name: 'n'.repeat(201), stock: 10 },
      { name: 42, stock: 10 },
      { name: 'x' },
      { name: 'x', stock: 0 },
      { name: 'x', stock: -1 },
      { name: 'x', stock: 1.5 },
      { name: 'x', stock: '10' },
      { name: 'x', stock: 10_000_001 },
      { ...definition, perUserLimit: 0 },
      { ...definition, perUserLimit: 1001 },
      { ...definition, maxPerOrder: 0 },
      { ...definition, maxPerOrder: '2' },
      { ...definition, paymentWindowSeconds: 0 },
      { ...definition, paymentWindowSeconds: 86_401 },
      { ...definition, startsAt: 'tomorrow' },
      { ...definition, startsAt: '' },
      { ...definition, startsAt: 1893456000000 },
      { ...definition, startsAt: '2030-13-01T00:00:00Z' },
      { ...definition, startsAt: '2030-02-30T10:00:00Z' },
      { ...definition, startsAt: '2030-04-31T00:00:00Z' },
      { ...definition, startsAt: '2030-01-01Tnoon' },
      { ...definition, endsAt: 'never' },
      { ...definition, startsAt: day(2), endsAt: day(1) },
      { ...definition, startsAt: day(1), endsAt: day(1) },
      { ...definition, endsAt: new Date(Date.now() - 1000).toISOString() },
      { ...definition, id: '' },
      { ...definition, id: 'a'.repeat(65) },
      { ...definition, id: '../etc' },
      { ...definition, id: 'a b' },
      { ...definition, id: 42 },
      { ...definition, color: 'red' },
      { ...definition, available: 1_000_000 },
      [],
      [definition],
      'sale',
      42,
      true,
    ];
    for (const d of definitions) assertError(await admin(JSON.stringify(d)), 400, 'invalid_sale', JSON.stringify(d));
    // Postgres cannot store NUL, and an unpaired surrogate would be stored as U+FFFD.
    for (const raw of [
      '{"name":"a\\u0000b","stock":10}',
      '{"name":"a\\ud800b","stock":10}',
      '{"name":"x","stock":10,"__proto__":{}}',
      'null',
    ]) {
      assertError(await admin(raw), 400, 'invalid_sale', raw);
    }
  });

  test('dates outside the years 2000-9999 are 400 invalid_sale: an end at or before 1970 would mean "no end" in Redis', async () => {
    const cases: Record<string, unknown>[] = [
      { startsAt: '0025-01-01T00:00:00Z', endsAt: '0026-01-01T00:00:00Z' },
      { startsAt: '1960-01-01T00:00:00Z', endsAt: '1970-01-01T00:00:00Z' },
      { startsAt: '1969-01-01T00:00:00Z', endsAt: '1969-12-31T23:59:59Z' },
      { startsAt: '1999-12-31T23:59:59Z' },
      { startsAt: '2030-01-01T00:00:00+01:00', endsAt: '9999-12-31T23:30:00-01:00' },
      { startsAt: '0000-01-01T00:00:00Z' },
    ];
    for (const c of cases) {
      const res = await admin({ ...definition, ...c });
      assertError(res, 400, 'invalid_sale', JSON.stringify(c));
      assert.match(res.body.message, /^(startsAt|endsAt) must fall in the years 2000 to 9999/, JSON.stringify(c));
    }
  });

  test('maxPerOrder above perUserLimit is 400 invalid_sale: no buyer could ever order that many', async () => {
    for (const c of [{ maxPerOrder: 2 }, { perUserLimit: 3, maxPerOrder: 4 }, { perUserLimit: 1, maxPerOrder: 1000 }]) {
      const res = await admin({ ...definition, ...c });
      assertError(res, 400, 'invalid_sale', JSON.stringify(c));
      assert.match(res.body.message, /maxPerOrder \(\d+\) must not be above perUserLimit \(\d+\)/, JSON.stringify(c));
    }
  });

  test('a sale without a price and currency, or with a malformed one, is 400 invalid_sale naming the field', async () => {
    const { price: _p, ...noPrice } = definition;
    const { currency: _c, ...noCurrency } = definition;
    const cases: [unknown, RegExp][] = [
      [noPrice, /^price is required/],
      [{ ...definition, price: 0 }, /^price must be an integer from 1/],
      [{ ...definition, price: -5 }, /^price must be/],
      [{ ...definition, price: 19.99 }, /^price must be/],
      [{ ...definition, price: '1999' }, /^price must be/],
      [{ ...definition, price: null }, /^price is required/],
      [{ ...definition, price: 1_000_000_000_001 }, /^price must be/],
      [noCurrency, /^currency is required/],
      [{ ...definition, currency: 'eur' }, /^currency /],
      [{ ...definition, currency: 'EURO' }, /^currency /],
      [{ ...definition, currency: 978 }, /^currency /],
      [{ ...definition, currency: 'E1R' }, /^currency /],
      [{ ...definition, currency: '' }, /^currency /],
    ];
    for (const [body, message] of cases) {
      const res = await admin(body);
      assertError(res, 400, 'invalid_sale', JSON.stringify(body));
      assert.match(res.body.message, message, JSON.stringify(body));
    }
  });

  test('a name with a control character or a bidirectional override is 400 invalid_sale', async () => {
    const names = [
      'a\u0001b',
      'tab\there',
      'new\nline',
      'a\u001bb',
      'del\u007f',
      'c1\u0085',
      'c1\u009f',
      'rlo\u202egnp.exe',
      'lre\u202a',
      'pdf\u202c',
      'lri\u2066',
      'pdi\u2069',
      'fsi\u2068',
    ];
    for (const name of names) {
      const raw = JSON.stringify({ ...definition, name });
      const res = await admin(raw);
      assertError(res, 400, 'invalid_sale', raw);
      assert.match(res.body.message, /^name must not contain control characters/, raw);
    }
  });

  test("a date-time without Z or an offset is 400 invalid_sale: it would be read in the server's zone", async () => {
    const cases: Record<string, unknown>[] = [
      { startsAt: '2030-12-01T10:00:00' },
      { startsAt: '2030-12-01T10:00:00.000' },
      { startsAt: '2030-12-01T10:00' },
      { endsAt: '2030-12-01T10:00:00' },
      { startsAt: '2030-12-01T10:00:00+0200' },
      { startsAt: '2030-12-01T10:00:00+02' },
    ];
    for (const c of cases) {
      const res = await admin({ ...definition, ...c });
      assertError(res, 400, 'invalid_sale', JSON.stringify(c));
      assert.match(
        res.body.message,
        /^(startsAt|endsAt) must end with Z or an offset such as \+02:00/,
        JSON.stringify(c),
      );
    }
  });

  test('a duplicate id is 409 sale_exists and leaves the existing sale alone', async () => {
    assertError(
      await admin({
        ...definition,
        id: sale.id,
        name: 'Impostor',
        stock: 1_000_000,
        perUserLimit: 1000,
        maxPerOrder: 1000,
      }),
      409,
      'sale_exists',
      'duplicate',
    );
  });

  test('malformed JSON is 400 invalid_json and a non-JSON content-type 415, before any check', async () => {
    assertError(await admin('{"name":"x","stock":10'), 400, 'invalid_json');
    assertError(
      await admin('{"name":"x","stock":10}', { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'text/plain' }),
      415,
      'unsupported_media_type',
    );
  });
});

describe('errors raised before a request is parsed', () => {
  test('headers over the server limit are 431 headers_too_large in our shape, and the connection is closed', async () => {
    const res = await send('POST', purchasePath(), { headers: { authorization: `Bearer ${'x'.repeat(20_000)}` } });
    assertError(res, 431, 'headers_too_large');
    assert.equal(res.headers.connection, 'close');
  });
});

describe('routes and methods', () => {
  test('unknown routes are 404 not_found', async () => {
    for (const [method, path] of [
      ['GET', '/nope'],
      ['GET', '/index.html'],
      ['GET', '/api'],
      ['GET', '/api/sale/x'],
      ['POST', `/api/sales/${sale.id}/purchase`],
      ['GET', '/api/orders'],
      ['POST', `/api/sales/${sale.id}/purchases/x`],
      ['GET', '/api/sales/x/y/z'],
      ['POST', '/api/dev/token'],
    ] as const) {
      assertError(
        await http(api.port, method, path, { body: method === 'POST' ? {} : undefined, user: 'mallory' }),
        404,
        'not_found',
        `${method} ${path}`,
      );
    }
  });

  test('a known path with the wrong method is 405 method_not_allowed with an Allow header', async () => {
    const cases: [string, string, string][] = [
      ['DELETE', `/api/sales/${sale.id}`, 'GET, HEAD'],
      ['PUT', `/api/sales/${sale.id}`, 'GET, HEAD'],
      ['POST', `/api/sales/${sale.id}`, 'GET, HEAD'],
      ['GET', purchasePath(), 'POST'],
      ['PUT', purchasePath(), 'POST'],
      ['DELETE', purchasePath(), 'POST'],
      ['PATCH', purchasePath(), 'POST'],
      ['OPTIONS', purchasePath(), 'POST'],
      ['PUT', '/api/sales', 'POST, GET, HEAD'],
      ['DELETE', '/api/sales', 'POST, GET, HEAD'],
      ['GET', `/api/sales/${sale.id}/end`, 'POST'],
      ['POST', `/api/orders/${orders.alice}`, 'GET, HEAD'],
      ['DELETE', `/api/orders/${orders.alice}`, 'GET, HEAD'],
      ['GET', `/api/orders/${orders.alice}/pay`, 'POST'],
      ['POST', '/', 'GET, HEAD'],
      ['POST', '/healthz', 'GET, HEAD'],
    ];
    for (const [method, path, allow] of cases) {
      const res = await send(method, path, { headers: auth('alice') });
      assertError(res, 405, 'method_not_allowed', `${method} ${path}`);
      assert.equal(res.headers.allow, allow, `${method} ${path}`);
    }
    const head = await send('HEAD', purchasePath(), { headers: auth('mallory') });
    assert.equal(head.status, 405);
    assert.equal(head.headers.allow, 'POST');
  });
});

describe('property: arbitrary input to the purchase route is a 4xx with {error, message}, never a 5xx', () => {
  const MAX_QTY = 1000;
  /** What the purchase route must answer for a parsed body, or null when it is a valid purchase. */
  function expectedFor(text: string): [number, string] | null {
    if (Buffer.byteLength(text) > 1024) return [413, 'payload_too_large'];
    if (text === '') return null;
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      return [400, 'invalid_json'];
    }
    if (duplicateKey(text) !== undefined) return [400, 'invalid_json'];
    if (body === null || typeof body !== 'object' || Array.isArray(body)) return [400, 'bad_request'];
    if (Object.keys(body).some((k) => k !== 'qty')) return [400, 'bad_request'];
    const qty = (body as { qty?: unknown }).qty ?? 1;
    if (typeof qty !== 'number' || !Number.isInteger(qty) || qty < 1 || qty > MAX_QTY) return [400, 'invalid_qty'];
    if (qty > sale.maxPerOrder) return [400, 'qty_above_max'];
    return null;
  }

  const checkBody = async (text: string) => {
    const expected = expectedFor(text);
    fc.pre(expected !== null);
    assertError(await buyRaw(text, auth('fuzzer')), expected![0], expected![1], JSON.stringify(text));
  };

  test('arbitrary JSON bodies', async () => {
    const bodies = fc.oneof(
      fc.jsonValue({ maxDepth: 3 }),
      fc.record({ qty: fc.jsonValue({ maxDepth: 2 }) }),
      fc.dictionary(fc.oneof(fc.constant('qty'), fc.string()), fc.jsonValue({ maxDepth: 1 })),
    );
    await fc.assert(
      fc.asyncProperty(bodies, (b) => checkBody(JSON.stringify(b))),
      { numRuns: 300 },
    );
  });

  test('arbitrary strings as qty, and arbitrary numbers', async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ unit: 'grapheme', maxLength: 30 }), (qty) => checkBody(JSON.stringify({ qty }))),
      { numRuns: 200 },
    );
    const numbers = fc.oneof(fc.double(), fc.integer(), fc.integer({ min: 3, max: 5000 }), fc.integer({ max: 0 }));
    await fc.assert(
      fc.asyncProperty(numbers, (qty) => checkBody(JSON.stringify({ qty }))),
      { numRuns: 200 },
    );
  });

  test('arbitrary raw text and mangled JSON as the body', async () => {
    const mangled = fc
      .tuple(fc.json({ maxDepth: 2 }), fc.nat(), fc.string({ maxLength: 3 }))
      .map(([j, i, s]) => j.slice(0, i % (j.length + 1)) + s + j.slice(i % (j.length + 1)));
    const texts = fc.oneof(
      fc.string({ unit: 'grapheme', maxLength: 60 }),
      fc.json({ maxDepth: 3 }),
      mangled,
      fc.string({ unit: 'grapheme', minLength: 1000, maxLength: 1100 }),
    );
    await fc.assert(fc.asyncProperty(texts, checkBody), { numRuns: 300 });
  });

  test('arbitrary Authorization headers and forged JWTs are 401 unauthorized', async () => {
    const printable = fc.string({
      unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)),
      maxLength: 300,
    });
    const headers = fc.oneof(
      printable,
      printable.map((s) => `Bearer ${s}`),
    );
    const jwts = fc
      .record({
        header: fc.oneof(
          fc.constant<unknown>(HS256),
          fc.record({ alg: fc.oneof(fc.constantFrom('HS256', 'none', 'HS512', 'RS256', 'ES256'), fc.string()) }),
          fc.jsonValue({ maxDepth: 2 }),
        ),
        payload: fc.oneof(
          fc.constant<unknown>(claims()),
          fc.record({ sub: fc.jsonValue({ maxDepth: 1 }), exp: fc.jsonValue({ maxDepth: 0 }) }),
          fc.jsonValue({ maxDepth: 2 }),
        ),
        key: fc.oneof(
          fc.constant<string | null>(null),
          fc.string({ minLength: 1 }).filter((k) => k !== JWT_SECRET),
        ),
      })
      .map(({ header, payload, key }) => `Bearer ${forgeJwt(header, payload, key)}`);
    const check = async (authorization: string) => {
      assertError(
        await http(api.port, 'POST', purchasePath(), { body: { qty: 1 }, headers: { authorization } }),
        401,
        'unauthorized',
        authorization,
      );
    };
    await fc.assert(fc.asyncProperty(fc.oneof(headers, jwts), check), { numRuns: 400 });
  });

  test('arbitrary sale ids in the path', async () => {
    const ids = fc.oneof(
      fc.string({ unit: 'grapheme', maxLength: 80 }),
      fc.string({ unit: 'grapheme-ascii', minLength: 60, maxLength: 300 }),
      fc.stringMatching(/^[A-Za-z0-9_-]{1,70}$/),
    );
    await fc.assert(
      fc.asyncProperty(ids, async (id) => {
        fc.pre(id !== sale.id);
        const expected: [number, string] = SALE_ID_PATTERN.test(id) ? [404, 'sale_not_found'] : [400, 'invalid_id'];
        const path = `/api/sales/${encodeURIComponent(id)}`;
        assertError(await http(api.port, 'GET', path), expected[0], expected[1], `GET ${JSON.stringify(id)}`);
        assertError(
          await http(api.port, 'POST', `${path}/purchases`, { body: { qty: 1 }, user: 'fuzzer' }),
          expected[0],
          expected[1],
          `buy ${JSON.stringify(id)}`,
        );
      }),
      { numRuns: 300 },
    );
  });
});

describe('property: duplicateKey finds exactly the keys JSON.parse would silently merge', () => {
  type Node = { obj: [string, boolean, Node][] } | { arr: Node[] } | { leaf: unknown };
  // Few distinct keys, so duplicates are common; values that look like JSON, so strings must be skipped whole.
  const key = fc.oneof(
    fc.constantFrom('qty', 'a', '', '"', '\\', 'é', '\u2028', '{"x":1,"x":2}', '__proto__'),
    fc.string({ maxLength: 3 }),
  );
  const leaf = fc.oneof(
    fc.jsonValue({ maxDepth: 0 }),
    fc.constantFrom('{"qty":1,"qty":2}', '"', '\\', ',"qty":', '}', ']', '\\u0022'),
  );
  const { node } = fc.letrec<{ node: Node; obj: Node; arr: Node }>((tie) => ({
    node: fc.oneof(
      { depthSize: 'small' },
      leaf.map((v) => ({ leaf: v })),
      tie('obj'),
      tie('arr'),
    ),
    obj: fc.array(fc.tuple(key, fc.boolean(), tie('node')), { maxLength: 5 }).map((obj) => ({ obj })),
    arr: fc.array(tie('node'), { maxLength: 4 }).map((arr) => ({ arr })),
  }));
  /** Every UTF-16 unit as \uXXXX: the same key to JSON.parse, other text to a naive scanner. */
  const escaped = (k: string) =>
    `"${[...Array(k.length).keys()].map((i) => `\\u${k.charCodeAt(i).toString(16).padStart(4, '0')}`).join('')}"`;
  /** The text, the first key that repeats in its object (text order), and how many keys were written. */
  function write(n: Node, ws: string, out: { dup?: string; keys: number }): string {
    if ('leaf' in n) return JSON.stringify(n.leaf);
    if ('arr' in n) return `[${ws}${n.arr.map((item) => write(item, ws, out)).join(`${ws},${ws}`)}${ws}]`;
    const seen = new Set<string>();
    return `{${ws}${n.obj
      .map(([k, esc, v]) => {
        if (seen.has(k)) out.dup ??= k;
        seen.add(k);
        out.keys++;
        return `${esc ? escaped(k) : JSON.stringify(k)}${ws}:${ws}${write(v, ws, out)}`;
      })
      .join(`${ws},${ws}`)}${ws}}`;
  }
  const keysIn = (v: unknown): number =>
    Array.isArray(v)
      ? v.reduce((n: number, x) => n + keysIn(x), 0)
      : v !== null && typeof v === 'object'
        ? Object.entries(v).reduce((n, [, x]) => n + 1 + keysIn(x), 0)
        : 0;

  test('on generated JSON with and without duplicate keys, escaped keys and JSON-like strings', () => {
    fc.assert(
      fc.property(node, fc.constantFrom('', ' ', '\n\t '), (n, ws) => {
        const out: { dup?: string; keys: number } = { keys: 0 };
        const text = write(n, ws, out);
        const found = duplicateKey(text);
        assert.equal(found, out.dup, text);
        // JSON.parse keeps one key of each repeated pair: it lost keys exactly when one was found.
        assert.equal(found === undefined, keysIn(JSON.parse(text)) === out.keys, text);
      }),
      { numRuns: 2000 },
    );
    fc.assert(
      fc.property(fc.json({ maxDepth: 4 }), (text) => duplicateKey(text) === undefined),
      { numRuns: 500 },
    );
  });
});
