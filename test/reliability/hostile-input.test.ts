// Hostile input against the real API process, beyond test/bad-input.test.ts (bodies and tokens of
// the purchase route, sale ids, the admin route by example, 431): a property-based fuzzer of order
// ids and tokens on the order routes (expired, wrong key, alg none, other buyers' orders), of
// headers on every route, of the admin route and of arbitrary paths; raw protocol abuse; slow
// clients. Each request gets its 4xx in our {error, message} shape, never a 5xx or a hang, and a
// snapshot of Redis and Postgres before and after shows nothing changed.
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, test } from 'node:test';
import fc from 'fast-check';
import type { HttpError } from '../../shared/runtime/errors.js';
import { saleKeys } from '../../shared/redis/keys.js';
import { ORDER_ID_PATTERN, newOrderId } from '../../shared/runtime/ids.js';
import { parseSaleInput, type Sale } from '../../shared/sales/sale.js';
import { Cluster } from '../support/cluster.js';
import { testEnv, type TestEnv } from '../support/env.js';
import { newSale, runConcurrently, waitFor, written } from '../support/fixtures.js';
import { http, outcome, rawRequest, type RawReply, type Reply } from '../support/http.js';
import { checkSale, FaultLog, scenarioSeed, summarize } from '../support/scenario.js';
import { stateSnapshot, type StateSnapshot } from '../support/snapshot.js';
import { ADMIN_TOKEN, forgeJwt, JWT_SECRET, token } from '../support/tokens.js';

const REQUEST_TIMEOUT_MS = 1500;
let env: TestEnv;
let c: Cluster;
let sale: Sale;
let log: FaultLog;
const seed = scenarioSeed();
/** Real orders in each state a lookup can find: pending (alice, carol), paid (bob), queued in Redis only (dave). */
const owner = new Map<string, string>();
let hostile = 0;
let checks = 0;

before(async () => {
  env = await testEnv();
  log = new FaultLog('hostile-input', seed);
  c = new Cluster(env, log, { REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS) });
  await c.start('api', 'api');
  sale = await newSale(env, { stock: 20, perUserLimit: 3, maxPerOrder: 2, paymentWindowSeconds: 3600 });
  const buy = async (user: string, qty: number) => {
    const r = await http(c.apiPort, 'POST', `/api/sales/${sale.id}/purchases`, { body: { qty }, user });
    assert.equal(r.status, 202, outcome(r));
    owner.set(r.body.orderId, user);
    return r.body.orderId as string;
  };
  await buy('alice', 2);
  const bob = await buy('bob', 1);
  await buy('carol', 1);
  await c.start('writer', 'order-writer');
  await written(env, sale.id, '3 orders written');
  assert.equal(await c.signal('writer', 'SIGTERM', true), 0);
  assert.equal((await http(c.apiPort, 'POST', `/api/orders/${bob}/pay`, { user: 'bob' })).status, 200);
  await buy('dave', 1); // stays queued: no writer runs again
});

after(async () => {
  c.killAll();
  await env.close();
});

const tally: Record<string, number> = {};

/** The answer must be exactly this error, in our shape. */
function assertError(r: Reply, status: number, code: string, what: string): void {
  hostile++;
  tally[`${status} ${code}`] = (tally[`${status} ${code}`] ?? 0) + 1;
  const seen = `${what} -> ${outcome(r)} ${JSON.stringify(r.body)}`;
  assert.equal(r.error, undefined, `no answer: ${seen}`);
  assert.equal(r.status, status, seen);
  assert.deepEqual(Object.keys(r.body ?? {}).sort(), ['error', 'message'], seen);
  assert.equal(r.body.error, code, seen);
  assert.equal(typeof r.body.message, 'string', seen);
}

const now = () => Math.floor(Date.now() / 1000);

type Token = { header: string | undefined; user: string | null; label: string };
const BUYERS = ['alice', 'bob', 'carol', 'dave', 'mallory'];
/** Authorization headers of every kind; `user` is whom the API must take it for, null when it must refuse it. */
const tokens: fc.Arbitrary<Token> = fc.oneof(
  // As likely as all the forged kinds together, so the ids behind the auth check get fuzzed too.
  {
    arbitrary: fc.constantFrom(...BUYERS).map((u) => ({ header: `Bearer ${token(u)}`, user: u, label: `valid ${u}` })),
    weight: 6,
  },
  // Expired beyond the default JWT_CLOCK_TOLERANCE_SECONDS (5 s), which accepts a token a few seconds late.
  fc.tuple(fc.constantFrom(...BUYERS), fc.integer({ min: 6, max: 10 ** 7 })).map(([u, ago]) => ({
    header: `Bearer ${forgeJwt({ alg: 'HS256', typ: 'JWT' }, { sub: u, exp: now() - ago }, JWT_SECRET)}`,
    user: null,
    label: `expired ${u}`,
  })),
  fc
    .tuple(
      fc.constantFrom(...BUYERS),
      fc.string({ minLength: 1 }).filter((k) => k !== JWT_SECRET),
    )
    .map(([u, key]) => ({
      header: `Bearer ${forgeJwt({ alg: 'HS256', typ: 'JWT' }, { sub: u, exp: now() + 600 }, key)}`,
      user: null,
      label: `wrong key ${u}`,
    })),
  fc.tuple(fc.constantFrom(...BUYERS), fc.constantFrom('none', 'None', 'NONE', '')).map(([u, alg]) => ({
    header: `Bearer ${forgeJwt({ alg, typ: 'JWT' }, { sub: u, exp: now() + 600 }, null)}`,
    user: null,
    label: `alg ${JSON.stringify(alg)} ${u}`,
  })),
  fc.constantFrom(...BUYERS).map((u) => ({
    header: `Bearer ${forgeJwt({ alg: 'HS256', typ: 'JWT' }, { sub: u, nbf: now() + 600, exp: now() + 900 }, JWT_SECRET)}`,
    user: null,
    label: `not yet valid ${u}`,
  })),
  fc
    .string({ unit: fc.integer({ min: 0x21, max: 0x7e }).map((n) => String.fromCharCode(n)), maxLength: 200 })
    .map((s) => ({ header: `Bearer ${s}`, user: null, label: 'garbage' })),
  fc.constant<Token>({ header: undefined, user: null, label: 'none' }),
);

/** Order ids: malformed, well-formed but unknown, real ones of any owner, and real ones bent slightly. */
function orderIds(): fc.Arbitrary<string> {
  const real = [...owner.keys()];
  const bend = (id: string, i: number, how: number): string => {
    // A character of the random part (22 base64url characters, or a uuid's 36 for older ids).
    const at = id.length - 1 - (i % (id.length - 1 - id.indexOf('.')));
    const ch = id[at]!;
    switch (how) {
      case 0:
        return id.slice(0, at) + ch.toUpperCase() + id.slice(at + 1);
      case 1:
        return id.slice(0, at) + (ch === 'a' ? 'b' : ch === '-' ? '-' : 'a') + id.slice(at + 1);
      case 2:
        return id.slice(0, at);
      case 3:
        return `${id}${ch}`;
      default:
        return `other-sale${id.slice(id.indexOf('.'))}`;
    }
  };
  return fc.oneof(
    fc.constantFrom(...real),
    fc.tuple(fc.constantFrom(...real), fc.nat(), fc.nat(4)).map(([id, i, how]) => bend(id, i, how)),
    fc.constantFrom(sale.id, 'no-such-sale').map((s) => newOrderId(s)),
    fc.string({ unit: 'grapheme', minLength: 1, maxLength: 60 }),
    fc.stringMatching(/^[A-Za-z0-9_.-]{1,120}$/),
  );
}

describe('fuzzed requests change nothing', () => {
  let baseline: StateSnapshot;
  before(async () => {
    baseline = await stateSnapshot(env);
  });
  // After each test: nothing it sent changed a byte of Redis or a row of Postgres.
  afterEach(async () => {
    checks++;
    assert.deepEqual(await stateSnapshot(env), baseline, 'a hostile request changed Redis or Postgres');
  });

  test('order ids x tokens on GET /api/orders/:id and POST /api/orders/:id/pay: 401, 400 invalid_id or 404 order_not_found, exactly as predicted', async () => {
    const prop = fc.asyncProperty(orderIds(), tokens, fc.boolean(), async (id, tok, pay) => {
      const path = `/api/orders/${encodeURIComponent(id)}${pay ? '/pay' : ''}`;
      // The router refuses an overlong parameter before any handler (and so before auth).
      let expected: [number, string];
      if (id.length > 256) expected = [400, 'invalid_id'];
      else if (tok.user === null) expected = [401, 'unauthorized'];
      else if (!ORDER_ID_PATTERN.test(id)) expected = [400, 'invalid_id'];
      else if (owner.get(id) === tok.user)
        return fc.pre(false); // the owner's own order is not hostile
      else expected = [404, 'order_not_found'];
      const r = await http(c.apiPort, pay ? 'POST' : 'GET', path, {
        headers: tok.header ? { authorization: tok.header } : {},
        timeoutMs: 5000,
      });
      assertError(r, expected[0], expected[1], `${pay ? 'pay' : 'view'} ${JSON.stringify(id)} as ${tok.label}`);
    });
    await fc.assert(prop, { seed, numRuns: 400 });
  });

  test('arbitrary extra headers on every route leave each answer exactly what it was', async () => {
    const expired = `Bearer ${forgeJwt({ alg: 'HS256' }, { sub: 'alice', exp: now() - 5 }, JWT_SECRET)}`;
    const [alice, carol] = [...owner].filter(([, u]) => u === 'alice' || u === 'carol').map(([id]) => id);
    const routes: [string, string, unknown, string | undefined, number, string][] = [
      ['GET', '/api/sales/no-such-sale', undefined, undefined, 404, 'sale_not_found'],
      ['GET', '/api/sales/bad%20id', undefined, undefined, 400, 'invalid_id'],
      ['POST', `/api/sales/${sale.id}/purchases`, { qty: 3 }, 'mallory', 400, 'qty_above_max'],
      ['POST', `/api/sales/${sale.id}/purchases`, { qty: 1 }, undefined, 401, 'unauthorized'],
      ['GET', `/api/orders/${alice}`, undefined, 'mallory', 404, 'order_not_found'],
      ['POST', `/api/orders/${carol}/pay`, undefined, 'alice', 404, 'order_not_found'],
      ['POST', `/api/orders/${alice}/pay`, undefined, expired, 401, 'unauthorized'],
      ['POST', '/api/sales', { name: 'x', stock: 1 }, 'mallory', 403, 'forbidden'],
      ['POST', '/api/sales', { name: 'x', stock: 1 }, undefined, 401, 'unauthorized'],
      ['GET', '/nope', undefined, undefined, 404, 'not_found'],
      ['DELETE', `/api/sales/${sale.id}`, undefined, undefined, 405, 'method_not_allowed'],
    ];
    const printable = fc
      .string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((n) => String.fromCharCode(n)), maxLength: 200 })
      .map((s) => s.trim());
    const names = fc.oneof(
      fc.constantFrom(
        'x-user-id',
        'x-forwarded-for',
        'x-real-ip',
        'x-forwarded-proto',
        'x-http-method-override',
        'x-original-url',
        'x-rewrite-url',
        'cookie',
        'accept',
        'accept-encoding',
        'accept-language',
        'user-agent',
        'origin',
        'referer',
        'if-none-match',
        'range',
        'forwarded',
        'x-admin',
      ),
      fc.stringMatching(/^x-[a-z0-9-]{1,30}$/),
    );
    const headers = fc.dictionary(
      names,
      fc.oneof(
        printable,
        fc.constantFrom('alice', ADMIN_TOKEN, `Bearer ${ADMIN_TOKEN}`, 'DELETE', 'GET', '/api/sales'),
      ),
      { maxKeys: 8 },
    );
    const prop = fc.asyncProperty(fc.nat(routes.length - 1), headers, async (i, extra) => {
      const [method, path, body, user, status, code] = routes[i]!;
      const auth: Record<string, string> =
        user === undefined ? {} : { authorization: user.startsWith('Bearer ') ? user : `Bearer ${token(user)}` };
      const r = await http(c.apiPort, method, path, { body, headers: { ...extra, ...auth }, timeoutMs: 5000 });
      assertError(r, status, code, `${method} ${path} with ${JSON.stringify(extra)}`);
    });
    await fc.assert(prop, { seed, numRuns: 400 });
  });

  test("the admin route: any token but the admin's is 401 or 403 whatever the body; the admin's with an invalid sale is 400 invalid_sale", async () => {
    const auths = fc.oneof(
      tokens.map((t) => t.header),
      fc.constantFrom(
        `Bearer ${ADMIN_TOKEN}x`,
        `Bearer ${ADMIN_TOKEN.toUpperCase()}`,
        `bearer ${ADMIN_TOKEN}`,
        ADMIN_TOKEN,
        `Bearer  ${ADMIN_TOKEN}`,
        `Basic ${ADMIN_TOKEN}`,
      ),
      fc.constant(`Bearer ${ADMIN_TOKEN}`),
    );
    const bodies = fc.oneof(
      fc.jsonValue({ maxDepth: 2 }),
      fc.record({ name: fc.jsonValue({ maxDepth: 1 }), stock: fc.jsonValue({ maxDepth: 0 }) }, { requiredKeys: [] }),
      fc.record(
        {
          id: fc.string(),
          name: fc.string(),
          stock: fc.integer(),
          paymentWindowSeconds: fc.integer(),
          startsAt: fc.string(),
        },
        { requiredKeys: [] },
      ),
    );
    const prop = fc.asyncProperty(auths, bodies, async (authorization, body) => {
      let expected: [number, string];
      if (authorization === undefined || !/^Bearer [^\s]+$/.test(authorization)) expected = [401, 'unauthorized'];
      else if (authorization !== `Bearer ${ADMIN_TOKEN}`) expected = [403, 'forbidden'];
      else {
        try {
          parseSaleInput(body);
          return fc.pre(false); // a valid sale: creating it is what the admin route is for
        } catch (err) {
          expected = [(err as HttpError).status, (err as HttpError).code];
        }
      }
      const r = await http(c.apiPort, 'POST', '/api/sales', {
        body: JSON.stringify(body),
        headers: authorization ? { authorization } : {},
        timeoutMs: 5000,
      });
      assertError(r, expected[0], expected[1], `admin ${authorization?.slice(0, 30)} ${JSON.stringify(body)}`);
    });
    await fc.assert(prop, { seed, numRuns: 300 });
  });

  test('arbitrary methods on arbitrary paths: a 4xx in our shape (2xx only for reads), never a 5xx', async () => {
    const segment = fc.oneof(
      fc.constantFrom(
        'api',
        'sales',
        'orders',
        'pay',
        'purchases',
        'dev',
        'token',
        'healthz',
        'metrics',
        '..',
        '.',
        '',
        sale.id,
        ...owner.keys(),
      ),
      fc.string({ unit: 'grapheme', maxLength: 12 }).map(encodeURIComponent),
    );
    const paths = fc.array(segment, { minLength: 1, maxLength: 5 }).map((s) => `/${s.join('/')}`);
    const methods = fc.constantFrom('GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS');
    const bodies = fc.option(fc.json({ maxDepth: 2 }), { nil: undefined });
    const prop = fc.asyncProperty(
      methods,
      paths,
      bodies,
      fc.option(tokens, { nil: undefined }),
      async (method, path, body, tok) => {
        // A buyer buying, or paying their own order, is not hostile.
        const own = [...owner].filter(([, u]) => u === tok?.user).map(([id]) => `/api/orders/${id}/pay`);
        fc.pre(!(tok?.user && method === 'POST' && (path === `/api/sales/${sale.id}/purchases` || own.includes(path))));
        const withBody = body !== undefined && method !== 'GET' && method !== 'HEAD';
        const r = await http(c.apiPort, method, path, {
          body: withBody ? body : undefined,
          headers: tok?.header ? { authorization: tok.header } : {},
          timeoutMs: 5000,
        });
        hostile++;
        const seen = `${method} ${path} as ${tok?.label} -> ${outcome(r)}`;
        assert.equal(r.error, undefined, seen);
        assert.ok(r.status < 500, seen);
        if (r.status < 400) assert.ok(method === 'GET' || method === 'HEAD', seen);
        else if (method !== 'HEAD') assert.deepEqual(Object.keys(r.body).sort(), ['error', 'message'], seen);
        // Any method on any path, token or not, must not buy or pay: the snapshot after the test says so.
      },
    );
    await fc.assert(prop, { seed, numRuns: 400 });
  });

  test('raw protocol abuse (garbage, smuggling, bad chunking, bad header bytes) is 400 in our shape and the connection is closed', async () => {
    const rawCases: [string, string][] = [
      ['garbage request line', 'GARBAGE\r\n\r\n'],
      ['unknown method', 'BREW /api/sales HTTP/1.1\r\nHost: x\r\n\r\n'],
      ['HTTP/9.9', 'GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n'],
      ['space before the colon', 'GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n'],
      ['NUL in a header', 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n'],
      [
        'content-length and transfer-encoding together',
        `POST /api/sales/${sale.id}/purchases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
      ],
      [
        'two different content-lengths',
        `POST /api/sales/${sale.id}/purchases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 9\r\nContent-Length: 10\r\n\r\n{"qty":1}`,
      ],
      [
        'content-length not a number',
        `POST /api/sales/${sale.id}/purchases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: nine\r\n\r\n{"qty":1}`,
      ],
      [
        'bad chunk size',
        `POST /api/sales/${sale.id}/purchases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{"qty":1}\r\n0\r\n\r\n`,
      ],
      [
        'transfer-encoding not chunked last',
        `POST /api/sales/${sale.id}/purchases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked, identity\r\n\r\n9\r\n{"qty":1}\r\n0\r\n\r\n`,
      ],
      ['obsolete line folding', 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n'],
    ];
    for (const [what, raw] of rawCases) {
      const r = await rawRequest(c.apiPort, raw, { timeoutMs: 5000 });
      hostile++;
      assert.match(r.head, /^HTTP\/1\.1 400 /, `${what}: ${r.head}`);
      assert.deepEqual(Object.keys(r.body).sort(), ['error', 'message'], what);
      assert.equal(r.body.error, 'bad_request', what);
      assert.ok(r.closed, `${what}: connection closed`);
    }
    // And the server still serves everyone else.
    assert.equal((await http(c.apiPort, 'GET', '/healthz')).status, 200);
  });
});

/** A client that sends its headers and then part of a body (or headers, a line at a time) and never finishes. */
async function slowClient(kind: 'stall' | 'trickle' | 'slowloris', user: string): Promise<RawReply & { kind: string }> {
  const headers = `POST /api/sales/${sale.id}/purchases HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token(user)}\r\nContent-Type: application/json\r\n`;
  const [text, trickle] =
    kind === 'stall'
      ? [`${headers}Content-Length: 9\r\n\r\n{"qty"`, undefined]
      : kind === 'trickle'
        ? [`${headers}Content-Length: 500\r\n\r\n`, ['{', '"', 'q', 't', 'y', '"', ':']]
        : [headers, Array.from({ length: 1000 }, (_, i) => `X-Slow-${i}: ${i}\r\n`)];
  return { ...(await rawRequest(c.apiPort, text, { trickle })), kind };
}

describe('slow clients', () => {
  test(`60 clients that stall or trickle their body or headers each get 408 within REQUEST_TIMEOUT_MS (${REQUEST_TIMEOUT_MS} ms) and a little, while 100 other buyers are served first; the slow ones bought nothing`, async () => {
    const other = await newSale(env, { stock: 100, paymentWindowSeconds: 3600 });
    const before = await stateSnapshot(env, (k) => k.includes(`{sale:${other.id}}`));
    const kinds = ['stall', 'trickle', 'slowloris'] as const;
    const slow = Array.from({ length: 60 }, (_, i) => slowClient(kinds[i % 3]!, `slow-${i}`));
    let slowAnswered = 0;
    for (const s of slow) void s.then(() => slowAnswered++);
    const prompt = await runConcurrently(100, 20, (i) =>
      http(c.apiPort, 'POST', `/api/sales/${other.id}/purchases`, {
        body: { qty: 1 },
        user: `prompt-${i}`,
        timeoutMs: 5000,
      }),
    );
    const answeredWhileSlowOpen = slowAnswered;
    const results = await Promise.all(slow);
    hostile += slow.length;
    checks++;
    log.note(
      `slow clients answered after ${Math.min(...results.map((r) => r.ms))}..${Math.max(...results.map((r) => r.ms))} ms`,
    );

    assert.deepEqual(
      prompt.map(outcome),
      prompt.map(() => '202 queued'),
      'every other buyer was served',
    );
    assert.equal(answeredWhileSlowOpen, 0, 'and all of them before any slow client was cut off');
    for (const r of results) {
      assert.match(r.head, /^HTTP\/1\.1 408 /, `${r.kind}: ${r.head}`);
      assert.equal(r.body.error, 'request_timeout', r.kind);
      assert.ok(r.closed, r.kind);
      // Node checks timeouts once a second; a hang would show as tens of seconds here.
      assert.ok(r.ms >= REQUEST_TIMEOUT_MS && r.ms < REQUEST_TIMEOUT_MS + 2500, `${r.kind} answered after ${r.ms} ms`);
    }
    assert.deepEqual(
      await stateSnapshot(env, (k) => k.includes(`{sale:${other.id}}`)),
      before,
      'no slow client bought anything',
    );
    assert.equal(await env.redis.get(saleKeys(other.id).seq), '100', 'exactly the 100 other buyers bought');
    for (const r of prompt) owner.set(r.body.orderId, 'prompt');
  });
});

test('after all of it: every accepted order is written, and every invariant holds', async () => {
  await c.start('writer', 'order-writer');
  await waitFor(
    'every accepted order written',
    async () =>
      (await env.pool.query('select 1 from orders where id = any($1::text[])', [[...owner.keys()]])).rowCount ===
      owner.size,
  );
  const report = await checkSale(env, undefined, [...owner.keys()]);
  log.note(`answers to hostile requests by error: ${JSON.stringify(tally)}`);
  summarize({
    scenario: 'hostile-input',
    seed,
    buyers: owner.size,
    orders: owner.size,
    faults: hostile,
    faultKinds:
      'fuzzed order ids x tokens, headers on every route, admin bodies x tokens, arbitrary paths; raw protocol abuse; 60 slow clients',
    checks: checks + report.checks,
    violations: report.violations.length,
  });
  assert.deepEqual(report.violations, []);
});
