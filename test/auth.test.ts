// Buyer tokens through the real HTTP app: HS256 with JWT_SECRET, RS256/ES256 from a JWKS served on
// loopback by this file, and the edge cases both modes must refuse with 401.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { CompactSign, exportJWK, exportSPKI, generateKeyPair, type CryptoKey, type JWK } from 'jose';
import type { FastifyInstance } from 'fastify';
import { createVerifier } from '../shared/buyers/jwt.js';
import { VerifiedTokens } from '../shared/buyers/jwt-cache.js';
import { ConfigError, type Config } from '../shared/config/index.js';
import { buildApp } from '../shared/http/app.js';
import { saleKeys } from '../shared/redis/keys.js';
import { Purchaser } from '../shared/purchase/purchaser.js';
import type { Sale } from '../shared/sales/sale.js';
import { exited, spawnCli } from './support/cli.js';
import { testEnv, type TestEnv } from './support/env.js';
import { newSale, runConcurrently, waitFor } from './support/fixtures.js';
import { ADMIN_TOKEN, JWT_SECRET } from './support/tokens.js';

let env: TestEnv;
let sale: Sale;
const apps: FastifyInstance[] = [];

// jose's JWKS cache and cooldown read Date.now(): moving it is how these tests pass 30 s without waiting.
const realNow = Date.now;
let skewMs = 0;
Date.now = () => realNow.call(Date) + skewMs;
const nowSeconds = () => Math.floor(Date.now() / 1000);

/** The identity provider's JWKS endpoint: what it serves, and how often it was asked. */
const idp = { keys: [] as JWK[], hits: 0, failing: false, url: '' };
let idpServer: Server;

interface SigningKey {
  alg: 'RS256' | 'ES256';
  kid: string;
  privateKey: CryptoKey;
  publicKey: CryptoKey;
  jwk: JWK;
}
async function signingKey(alg: 'RS256' | 'ES256', kid: string): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  return { alg, kid, privateKey, publicKey, jwk: { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' } };
}
let rsa1: SigningKey;
let rsa2: SigningKey;
let ec1: SigningKey;

before(async () => {
  env = await testEnv();
  sale = await newSale(env, { stock: 10_000 });
  [rsa1, rsa2, ec1] = await Promise.all([
    signingKey('RS256', 'rsa-1'),
    signingKey('RS256', 'rsa-2'),
    signingKey('ES256', 'ec-1'),
  ]);
  idpServer = createServer((_req, res) => {
    idp.hits++;
    if (idp.failing) return void res.writeHead(500).end();
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: idp.keys }));
  });
  await new Promise<void>((resolve) => idpServer.listen(0, '127.0.0.1', resolve));
  idp.url = `http://127.0.0.1:${(idpServer.address() as { port: number }).port}/.well-known/jwks.json`;
});

after(async () => {
  Date.now = realNow;
  for (const app of apps) await app.close();
  await new Promise((resolve) => idpServer.close(resolve));
  await env.close();
});

/** The real app (routes, error mapping, verifier) with these settings. */
async function appWith(overrides: Partial<Config>): Promise<FastifyInstance> {
  const config = { ...env.config, ...overrides };
  const app = buildApp({
    config,
    pool: env.pool,
    redis: env.redis,
    purchaser: new Purchaser(env.redis, config),
    logger: env.logger,
  });
  apps.push(app);
  await app.ready();
  return app;
}
const jwksConfig = (extra: Partial<Config> = {}): Partial<Config> => ({
  jwtSecret: undefined,
  jwtJwksUrl: idp.url,
  ...extra,
});

/** A fresh JWKS app whose key-set fetches are counted from zero. */
async function jwksApp(extra: Partial<Config> = {}): Promise<FastifyInstance> {
  idp.keys = [rsa1.jwk, ec1.jwk];
  idp.failing = false;
  idp.hits = 0;
  return appWith(jwksConfig(extra));
}

/** A compact JWS over exactly this payload text (so `1e400` reaches the server as written). */
async function sign(
  key: SigningKey | string | Uint8Array,
  payload: string | Record<string, unknown>,
  header: Record<string, unknown> = {},
): Promise<string> {
  const text = typeof payload === 'string' ? payload : JSON.stringify(payload);
  const asymmetric = typeof key === 'object' && 'alg' in key;
  const protectedHeader = asymmetric ? { alg: key.alg, kid: key.kid, ...header } : { alg: 'HS256', ...header };
  const secret = asymmetric ? key.privateKey : typeof key === 'string' ? new TextEncoder().encode(key) : key;
  const crit = Array.isArray(header.crit)
    ? Object.fromEntries((header.crit as string[]).map((c) => [c, true]))
    : undefined;
  return new CompactSign(new TextEncoder().encode(text))
    .setProtectedHeader(protectedHeader as { alg: string })
    .sign(secret, { crit });
}

let buyers = 0;
const claims = (extra: Record<string, unknown> = {}) => ({
  sub: `buyer-${++buyers}`,
  iat: nowSeconds(),
  exp: nowSeconds() + 600,
  ...extra,
});

async function buy(
  app: FastifyInstance,
  token: string,
): Promise<{ status: number; body: { error?: string; message?: string; status?: string } }> {
  const res = await app.inject({
    method: 'POST',
    url: `/api/sales/${sale.id}/purchases`,
    headers: { authorization: `Bearer ${token}` },
  });
  return { status: res.statusCode, body: res.json() };
}
async function assertBuys(app: FastifyInstance, token: string, what: string): Promise<void> {
  const res = await buy(app, token);
  assert.equal(res.status, 202, `${what}: ${JSON.stringify(res.body)}`);
  assert.equal(res.body.status, 'queued', what);
}
/** 401 unauthorized, for the reason given (so a refusal for some other cause does not pass), and no stock taken. */
async function assertRefused(app: FastifyInstance, token: string, reason: RegExp, what: string): Promise<void> {
  const available = await env.redis.get(saleKeys(sale.id).available);
  const res = await buy(app, token);
  assert.equal(res.status, 401, `${what}: ${JSON.stringify(res.body)}`);
  assert.deepEqual(Object.keys(res.body).sort(), ['error', 'message'], what);
  assert.equal(res.body.error, 'unauthorized', what);
  assert.match(res.body.message!, reason, what);
  assert.equal(await env.redis.get(saleKeys(sale.id).available), available, `${what}: stock moved`);
}

describe('RS256 and ES256 tokens from a JWKS', () => {
  test('RS256 and ES256 tokens buy; the key set is fetched once', async () => {
    const app = await jwksApp();
    await assertBuys(app, await sign(rsa1, claims()), 'RS256');
    await assertBuys(app, await sign(ec1, claims()), 'ES256');
    for (let i = 0; i < 5; i++) await assertBuys(app, await sign(i % 2 ? rsa1 : ec1, claims()), `again ${i}`);
    assert.equal(idp.hits, 1);
  });

  test('a kid the key set does not have is refused, and so is a key the JWKS does not publish', async () => {
    const app = await jwksApp();
    await assertRefused(app, await sign({ ...rsa1, kid: 'no-such-kid' }, claims()), /kid/, 'unknown kid');
    // rsa-2 signs, but under rsa-1's kid: the published rsa-1 key does not verify it.
    await assertRefused(
      app,
      await sign({ ...rsa2, kid: 'rsa-1' }, claims()),
      /signature is invalid/,
      'foreign key, known kid',
    );
    await assertRefused(app, await sign({ ...ec1, kid: 'rsa-1' }, claims()), /kid/, 'ES256 under an RSA kid');
  });

  test('algorithm confusion: HS256 tokens, signed with anything (the RSA public key included), are refused', async () => {
    const app = await jwksApp();
    const pem = await exportSPKI(rsa1.publicKey);
    const jwkText = JSON.stringify(rsa1.jwk);
    for (const [what, secret] of [
      ['the public key PEM', pem],
      ['the public JWK', jwkText],
      ['the modulus', rsa1.jwk.n!],
      ['JWT_SECRET', JWT_SECRET],
    ] as const) {
      await assertRefused(app, await sign(secret, claims(), { kid: 'rsa-1' }), /RS256 or ES256/, `HS256 with ${what}`);
    }
    await assertRefused(
      app,
      await sign(new TextEncoder().encode(pem), claims(), { alg: 'HS512', kid: 'rsa-1' }),
      /RS256 or ES256/,
      'HS512',
    );
    const unsigned = `${Buffer.from(JSON.stringify({ alg: 'none', kid: 'rsa-1' })).toString('base64url')}.${Buffer.from(JSON.stringify(claims())).toString('base64url')}.`;
    await assertRefused(app, unsigned, /RS256 or ES256/, 'alg none');
    // PS256 and ES384 are real asymmetric algorithms, but not the ones this configuration allows.
    const ps = await generateKeyPair('PS256');
    await assertRefused(
      app,
      await sign({ ...rsa1, alg: 'PS256' as 'RS256', privateKey: ps.privateKey }, claims()),
      /RS256 or ES256/,
      'PS256',
    );
  });

  test('unknown kids refetch the key set at most once per cooldown (30 s), however many arrive', async () => {
    const app = await jwksApp();
    await assertBuys(app, await sign(rsa1, claims()), 'warm');
    assert.equal(idp.hits, 1);
    const burst = () =>
      runConcurrently(100, 100, async () => buy(app, await sign({ ...rsa1, kid: randomUUID() }, claims())));
    // Just fetched: 100 unknown kids cost the identity provider nothing.
    for (const r of await burst()) assert.equal(r.status, 401);
    assert.equal(idp.hits, 1);
    // Past the cooldown: the whole burst shares one refetch, after which the cooldown holds again.
    skewMs += 31_000;
    for (const r of await burst()) assert.equal(r.status, 401);
    assert.equal(idp.hits, 2);
    for (const r of await burst()) assert.equal(r.status, 401);
    assert.equal(idp.hits, 2);
  });

  test('key rotation: a token under the new kid buys once the key set is refetched; the withdrawn key is then refused', async () => {
    const app = await jwksApp();
    await assertBuys(app, await sign(rsa1, claims()), 'old key');
    idp.keys = [rsa2.jwk, ec1.jwk];
    // Within the cooldown of the last fetch the new kid is not looked up yet.
    await assertRefused(app, await sign(rsa2, claims()), /kid/, 'new kid within the cooldown');
    assert.equal(idp.hits, 1);
    skewMs += 31_000;
    await assertBuys(app, await sign(rsa2, claims()), 'new kid after the cooldown');
    assert.equal(idp.hits, 2);
    await assertRefused(app, await sign(rsa1, claims()), /kid/, 'withdrawn key');
    await assertBuys(app, await sign(ec1, claims()), 'the key that stayed');
  });

  test('keys are refreshed in the background every 10 minutes; an identity provider outage keeps the keys fetched', async () => {
    const app = await jwksApp();
    await assertBuys(app, await sign(rsa1, claims()), 'warm');
    idp.failing = true;
    skewMs += 11 * 60_000;
    await assertBuys(app, await sign(rsa1, claims()), 'during the outage, refresh due');
    await waitFor('the background refresh', async () => idp.hits === 2);
    await assertBuys(app, await sign(ec1, claims()), 'during the outage');
    // Back, without rsa-1: the next refresh drops it.
    idp.failing = false;
    idp.keys = [ec1.jwk];
    skewMs += 11 * 60_000;
    await assertBuys(app, await sign(rsa1, claims()), 'refresh due: this request does not wait for it');
    await waitFor('the background refresh', async () => idp.hits === 3);
    await assertRefused(app, await sign(rsa1, claims()), /kid/, 'withdrawn at the refresh');
    await assertBuys(app, await sign(ec1, claims()), 'kept');
  });

  test('an identity provider that cannot be reached before any key is known is 503 unavailable, not a 401 blaming the token', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const { port } = closed.address() as { port: number };
    await new Promise((resolve) => closed.close(resolve));
    const app = await appWith(jwksConfig({ jwtJwksUrl: `http://127.0.0.1:${port}/jwks.json` }));
    const available = await env.redis.get(saleKeys(sale.id).available);
    const res = await buy(app, await sign(rsa1, claims()));
    assert.equal(res.status, 503, JSON.stringify(res.body));
    assert.equal(res.body.error, 'unavailable');
    assert.equal(await env.redis.get(saleKeys(sale.id).available), available);
  });
});

describe('verified-token cache (JWKS mode)', () => {
  // Every RS256/ES256 signature check jose makes goes through WebCrypto's verify: counted here.
  const realVerify = crypto.subtle.verify;
  let signatureChecks = 0;
  before(() => {
    crypto.subtle.verify = function (this: SubtleCrypto, ...args: Parameters<SubtleCrypto['verify']>) {
      signatureChecks++;
      return realVerify.apply(this, args);
    };
  });
  after(() => {
    crypto.subtle.verify = realVerify;
  });

  /** A JWKS verifier over a fresh served set, with its own cache; its first fetch done. */
  async function verifierWith(cache: VerifiedTokens, extra: Partial<Config> = {}) {
    idp.keys = [rsa1.jwk, ec1.jwk];
    idp.failing = false;
    idp.hits = 0;
    const verify = createVerifier({ ...env.config, ...jwksConfig(extra) }, { verifiedTokens: cache });
    await waitFor('the first key-set fetch', async () => idp.hits === 1);
    return verify;
  }
  const refused = (promise: Promise<unknown>, reason: RegExp) =>
    assert.rejects(
      promise,
      (err: { code?: string; message?: string }) => err.code === 'unauthorized' && reason.test(err.message ?? ''),
    );

  test('a repeat of a verified token is answered without checking its signature again', async () => {
    const cache = new VerifiedTokens();
    const verify = await verifierWith(cache);
    for (const key of [rsa1, ec1]) {
      const c = claims();
      const token = await sign(key, c);
      const before = signatureChecks;
      assert.equal((await verify(token)).id, c.sub);
      assert.equal(signatureChecks, before + 1, `${key.alg}: first verification`);
      for (let i = 0; i < 5; i++) assert.equal((await verify(token)).id, c.sub);
      assert.equal(signatureChecks, before + 1, `${key.alg}: repeats`);
      // A rule that reads a claim sees the token's, from the cache too.
      assert.deepEqual({ ...(await verify(token)).claims }, c, `${key.alg}: the claims`);
    }
    assert.equal(cache.hits, 12);
    assert.equal(cache.size, 2);
  });

  test("the API's default verifier caches too", async () => {
    idp.keys = [rsa1.jwk, ec1.jwk];
    const verify = createVerifier({ ...env.config, ...jwksConfig() });
    const c = claims();
    const token = await sign(rsa1, c);
    assert.equal((await verify(token)).id, c.sub);
    const before = signatureChecks;
    assert.equal((await verify(token)).id, c.sub);
    assert.equal(signatureChecks, before);
  });

  test('a cached token whose kid leaves the key set is refused once the set is refreshed; so is one whose key is replaced', async () => {
    const cache = new VerifiedTokens();
    const verify = await verifierWith(cache);
    const long = () => claims({ exp: nowSeconds() + 3600 });
    const [c1, c2] = [long(), long()];
    const [t1, t2] = [await sign(rsa1, c1), await sign(ec1, c2)];
    assert.equal((await verify(t1)).id, c1.sub);
    assert.equal((await verify(t2)).id, c2.sub);
    idp.keys = [ec1.jwk];
    skewMs += 11 * 60_000;
    // The refresh is due: this request starts it and is answered from the keys and cache it has.
    assert.equal((await verify(t1)).id, c1.sub);
    await waitFor('the background refresh', async () => idp.hits === 2);
    await refused(verify(t1), /kid/);
    // The whole cache went with the old set: the token of the key that stayed is checked again.
    const before = signatureChecks;
    assert.equal((await verify(t2)).id, c2.sub);
    assert.equal(signatureChecks, before + 1);
    // The same kid with another key: what the old key signed is refused, cached or not.
    idp.keys = [{ ...rsa2.jwk, kid: 'ec-1', alg: 'RS256' }];
    skewMs += 11 * 60_000;
    await verify(t2).catch(() => undefined);
    await waitFor('the background refresh', async () => idp.hits === 3);
    await refused(verify(t2), /kid|signature/);
  });

  test('a cached token is refused once expired', async () => {
    const cache = new VerifiedTokens();
    const verify = await verifierWith(cache, { jwtClockToleranceSeconds: 0 });
    const c = claims({ exp: nowSeconds() + 60 });
    const token = await sign(rsa1, c);
    assert.equal((await verify(token)).id, c.sub);
    assert.equal((await verify(token)).id, c.sub);
    assert.equal(cache.hits, 1);
    skewMs += 61_000;
    await refused(verify(token), /expired/);
    assert.equal(cache.hits, 1);
    assert.equal(cache.size, 0);
  });

  test('a forged token for a cached sub is refused: its hash differs', async () => {
    const cache = new VerifiedTokens();
    const verify = await verifierWith(cache);
    const c = claims();
    const token = await sign(rsa1, c);
    assert.equal((await verify(token)).id, c.sub);
    // The same header and payload, signed by a key the set does not hold.
    const forged = await sign({ ...rsa2, kid: 'rsa-1' }, c);
    assert.equal(forged.slice(0, forged.lastIndexOf('.')), token.slice(0, token.lastIndexOf('.')));
    await refused(verify(forged), /signature is invalid/);
    await refused(
      verify(`${token.slice(0, token.lastIndexOf('.'))}.${forged.slice(forged.lastIndexOf('.') + 1)}`),
      /signature is invalid/,
    );
    assert.equal(cache.size, 1);
    assert.equal(cache.hits, 0);
  });

  test('the cache never holds more than its bound (the oldest goes); tokens without exp and failures are not kept', async () => {
    const cache = new VerifiedTokens(3);
    const verify = await verifierWith(cache, { jwtRequireExp: false });
    const tokens: [string, string][] = [];
    for (let i = 0; i < 6; i++) {
      const c = claims();
      tokens.push([await sign(i % 2 ? ec1 : rsa1, c), c.sub]);
      assert.equal((await verify(tokens[i]![0])).id, c.sub);
      assert.ok(cache.size <= 3, `size ${cache.size} after ${i + 1}`);
    }
    assert.equal(cache.size, 3);
    const before = signatureChecks;
    assert.equal((await verify(tokens[5]![0])).id, tokens[5]![1]);
    assert.equal(signatureChecks, before, 'the newest is kept');
    assert.equal((await verify(tokens[0]![0])).id, tokens[0]![1]);
    assert.equal(signatureChecks, before + 1, 'the oldest was evicted');
    const noExp = await sign(rsa1, claims({ exp: undefined }));
    await verify(noExp);
    await verify(noExp);
    assert.equal(signatureChecks, before + 3, 'a token without exp is checked every time');
    await refused(verify(await sign({ ...rsa2, kid: 'rsa-1' }, claims())), /signature is invalid/);
    assert.equal(cache.size, 3);
    assert.throws(() => new VerifiedTokens(0), RangeError);
  });
});

/** The claim rules, the same in both modes. */
const MODES = [
  { name: 'HS256', key: (): SigningKey | string => JWT_SECRET, config: (extra: Partial<Config>) => appWith(extra) },
  { name: 'RS256', key: (): SigningKey | string => rsa1, config: (extra: Partial<Config>) => jwksApp(extra) },
  { name: 'ES256', key: (): SigningKey | string => ec1, config: (extra: Partial<Config>) => jwksApp(extra) },
];

for (const mode of MODES) {
  describe(`claims of ${mode.name} tokens`, () => {
    const rules = {
      jwtIssuer: 'https://idp.example.test/',
      jwtAudience: 'flashsale',
      jwtClockToleranceSeconds: 5,
      jwtRequireExp: true,
    };
    const good = (extra: Record<string, unknown> = {}) =>
      claims({ iss: rules.jwtIssuer, aud: rules.jwtAudience, ...extra });
    const tok = (payload: string | Record<string, unknown>, header?: Record<string, unknown>) =>
      sign(mode.key(), payload, header);

    test('issuer and audience are checked when set', async () => {
      const app = await mode.config(rules);
      await assertBuys(app, await tok(good()), 'iss and aud as configured');
      await assertBuys(app, await tok(good({ aud: ['other', 'flashsale'] })), 'aud an array that includes ours');
      await assertRefused(app, await tok(good({ iss: 'https://evil.example.test/' })), /issuer/, 'other issuer');
      await assertRefused(app, await tok(good({ iss: undefined })), /issuer/, 'no issuer');
      await assertRefused(app, await tok(good({ aud: 'other' })), /audience/, 'other audience');
      await assertRefused(app, await tok(good({ aud: ['other'] })), /audience/, 'other audiences');
      await assertRefused(app, await tok(good({ aud: undefined })), /audience/, 'no audience');
    });

    test('clock tolerance (5 s) on exp and nbf: a few seconds late passes, beyond it is refused', async () => {
      const app = await mode.config(rules);
      await assertBuys(app, await tok(good({ exp: nowSeconds() - 2 })), 'expired 2 s ago');
      await assertBuys(app, await tok(good({ nbf: nowSeconds() + 2 })), 'valid in 2 s');
      await assertRefused(app, await tok(good({ exp: nowSeconds() - 30 })), /expired/, 'expired 30 s ago');
      await assertRefused(app, await tok(good({ nbf: nowSeconds() + 30 })), /not valid yet/, 'valid in 30 s');
    });

    test('a token without exp is refused with JWT_REQUIRE_EXP, accepted without it', async () => {
      await assertRefused(await mode.config(rules), await tok(good({ exp: undefined })), /no exp/, 'no exp, required');
      await assertBuys(
        await mode.config({ ...rules, jwtRequireExp: false }),
        await tok(good({ exp: undefined })),
        'no exp, not required',
      );
    });

    test('exp and nbf that are not finite numbers (1e400 parses to Infinity) are refused', async () => {
      const app = await mode.config(rules);
      const { sub } = claims();
      const raw = (timeClaims: string) =>
        tok(`{"sub":"${sub}","iss":"${rules.jwtIssuer}","aud":"flashsale",${timeClaims}}`);
      await assertRefused(app, await raw('"exp":1e400'), /exp must be a finite number/, 'exp 1e400');
      await assertRefused(
        app,
        await raw(`"exp":${nowSeconds() + 600},"nbf":-1e400`),
        /nbf must be a finite number/,
        'nbf -1e400',
      );
      await assertRefused(
        app,
        await raw(`"exp":${nowSeconds() + 600},"iat":1e400`),
        /iat must be a finite number/,
        'iat 1e400',
      );
      await assertRefused(app, await raw('"exp":"9999999999"'), /exp must be a finite number/, 'exp a string');
    });

    test('an unknown critical header extension (crit) is refused', async () => {
      const app = await mode.config(rules);
      await assertRefused(
        app,
        await tok(good(), { crit: ['x-tenant-binding'], 'x-tenant-binding': 'acme' }),
        /crit|not recognized/,
        'unknown crit',
      );
    });

    test('the sub must still be a valid user id', async () => {
      const app = await mode.config(rules);
      for (const sub of ['', 'mal lory', 'x'.repeat(129), 42, null]) {
        await assertRefused(app, await tok(good({ sub })), /user id/, `sub ${JSON.stringify(sub)}`);
      }
    });
  });
}

describe('settings', () => {
  test('JWT_SECRET and JWT_JWKS_URL both set is a ConfigError naming both, from the verifier and from the app', async () => {
    const both = { ...env.config, jwtSecret: JWT_SECRET, jwtJwksUrl: idp.url };
    assert.throws(
      () => createVerifier(both),
      (err: unknown) =>
        err instanceof ConfigError && /JWT_SECRET/.test(err.message) && /JWT_JWKS_URL/.test(err.message),
    );
    assert.throws(
      () =>
        buildApp({
          config: both,
          pool: env.pool,
          redis: env.redis,
          purchaser: new Purchaser(env.redis, both),
          logger: env.logger,
        }),
      ConfigError,
    );
  });

  test('flashsale api with both set exits 2', async () => {
    const child = spawnCli(env, ['api', '--port', '0'], { JWT_SECRET, JWT_JWKS_URL: idp.url, ADMIN_TOKEN });
    assert.equal(await exited(child), 2);
  });

  test('a JWKS URL that is not https (except on loopback) or not a URL is a ConfigError', () => {
    for (const url of [
      'http://idp.example.com/jwks.json',
      'ftp://127.0.0.1/jwks.json',
      'not a url',
      'file:///etc/jwks.json',
    ]) {
      assert.throws(
        () => createVerifier({ ...env.config, jwtSecret: undefined, jwtJwksUrl: url }),
        (err: unknown) => err instanceof ConfigError && /JWT_JWKS_URL/.test(err.message),
        url,
      );
    }
  });

  test('trusted-header mode builds no verifier: neither setting is needed', async () => {
    const app = await appWith({ authMode: 'trusted-header', jwtSecret: undefined, jwtJwksUrl: undefined });
    const res = await app.inject({
      method: 'POST',
      url: `/api/sales/${sale.id}/purchases`,
      headers: { 'x-user-id': `buyer-${++buyers}` },
    });
    assert.equal(res.statusCode, 202);
  });
});
