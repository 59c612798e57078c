// What one buyer-token verification costs the purchase path: the API's real verifier
// (createVerifier) for HS256 with JWT_SECRET, RS256 and ES256 from a JWKS served on loopback, and
// jose's own HS256 (jwtVerify) as the reference for the hand-written HS256 path. RS256 and ES256
// twice: a token's first verification (a cache that never keeps one, so every call checks the
// signature) and a repeat of the same token, answered by the verified-token cache. One process, rounds
// interleaved, median of the rounds; "in flight" keeps that many verifications awaiting at once, as a
// crowd of requests does (jose's RS256/ES256 run on libuv's thread pool). CPU is the process's
// (every thread) per verification.
//
//   npm run bench:jwt [-- --rounds 3 --seconds 1 --in-flight 64]
// Results: stdout (markdown), bench/results/jwt.json.
import { createSecretKey } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import { CompactSign, exportJWK, generateKeyPair, jwtVerify } from 'jose';
import { createVerifier, signJwt, type Verifier } from '../shared/buyers/jwt.js';
import { VerifiedTokens } from '../shared/buyers/jwt-cache.js';
import { loadConfig } from '../shared/config/index.js';
import { jwtTable, writeDocuments, type JwtResults } from './document.js';
import { machine } from './machine.js';

const { values: flags } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '1' },
    'in-flight': { type: 'string', default: '64' },
  },
});
const rounds = Number(flags.rounds);
const seconds = Number(flags.seconds);
const inFlight = Number(flags['in-flight']);
if (![rounds, seconds, inFlight].every((n) => Number.isFinite(n) && n > 0))
  throw new Error('--rounds, --seconds and --in-flight must be positive numbers');

const SECRET = 'bench-secret-0123456789abcdef';
const keys = {
  rsa: await generateKeyPair('RS256', { extractable: true }),
  ec: await generateKeyPair('ES256', { extractable: true }),
};
const jwks = {
  keys: [
    { ...(await exportJWK(keys.rsa.publicKey)), kid: 'rsa', alg: 'RS256' },
    { ...(await exportJWK(keys.ec.publicKey)), kid: 'ec', alg: 'ES256' },
  ],
};
const idp = createServer((_req, res) =>
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(jwks)),
);
await new Promise<void>((resolve) => idp.listen(0, '127.0.0.1', resolve));
const jwksUrl = `http://127.0.0.1:${(idp.address() as { port: number }).port}/jwks.json`;

const now = Math.floor(Date.now() / 1000);
const claims = new TextEncoder().encode(JSON.stringify({ sub: 'bench-buyer', iat: now, exp: now + 3600 }));
const signed = (alg: 'RS256' | 'ES256', kid: string, key: CryptoKey) =>
  new CompactSign(claims).setProtectedHeader({ alg, kid }).sign(key);
const base = loadConfig({ development: false, logLevel: 'silent' });
const hsVerifier = createVerifier({ ...base, jwtSecret: SECRET, jwtJwksUrl: undefined });
const jwksConfig = { ...base, jwtSecret: undefined, jwtJwksUrl: jwksUrl };
/** Keeps nothing: each call is a token's first verification, cache lookup included. */
class NothingKept extends VerifiedTokens {
  override set(): void {}
}
const firstVerifier = createVerifier(jwksConfig, { verifiedTokens: new NothingKept() });
const repeatVerifier = createVerifier(jwksConfig);
const hsKey = createSecretKey(Buffer.from(SECRET));

interface Case {
  name: string;
  what: string;
  token: string;
  verify: Verifier;
}
const hsToken = signJwt('bench-buyer', SECRET);
const rsToken = await signed('RS256', 'rsa', keys.rsa.privateKey);
const esToken = await signed('ES256', 'ec', keys.ec.privateKey);
const cases: Case[] = [
  { name: 'HS256', what: 'createVerifier, JWT_SECRET (node:crypto HMAC)', token: hsToken, verify: hsVerifier },
  {
    name: 'HS256 (jose)',
    what: 'jose jwtVerify with a KeyObject: the reference, not used',
    token: hsToken,
    verify: async (t) => {
      const { payload } = await jwtVerify(t, hsKey, { algorithms: ['HS256'] });
      return { id: payload.sub!, claims: payload };
    },
  },
  {
    name: 'RS256',
    what: 'createVerifier, JWT_JWKS_URL (jose, 2048-bit key), first verification',
    token: rsToken,
    verify: firstVerifier,
  },
  {
    name: 'RS256 repeat',
    what: 'the same token again: answered by the verified-token cache',
    token: rsToken,
    verify: repeatVerifier,
  },
  {
    name: 'ES256',
    what: 'createVerifier, JWT_JWKS_URL (jose, P-256), first verification',
    token: esToken,
    verify: firstVerifier,
  },
  {
    name: 'ES256 repeat',
    what: 'the same token again: answered by the verified-token cache',
    token: esToken,
    verify: repeatVerifier,
  },
];

interface Measure {
  perSec: number;
  usPerOp: number;
  cpuUsPerOp: number;
  n: number;
}

/** Verifications for `seconds`, `concurrency` awaiting at once. */
async function measure(c: Case, concurrency: number): Promise<Measure> {
  let n = 0;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const until = t0 + seconds * 1000;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < until) {
        if ((await c.verify(c.token)).id !== 'bench-buyer') throw new Error(`${c.name}: wrong sub`);
        n++;
      }
    }),
  );
  const ms = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  return {
    perSec: Math.round((n / ms) * 1000),
    usPerOp: round((ms * 1000) / n),
    cpuUsPerOp: round((cpu.user + cpu.system) / n),
    n,
  };
}
const round = (x: number) => Math.round(x * 100) / 100;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const started = Date.now();
const env = machine({ jose: (await import('jose/package.json', { with: { type: 'json' } })).default.version });
// Warm-up: JIT, the JWKS fetch, key imports.
for (const c of cases) for (let i = 0; i < 2000; i++) await c.verify(c.token);

const modes = [
  ['sequential', 1],
  ['inFlight', inFlight],
] as const;
const raw: Record<string, Record<(typeof modes)[number][0], Measure[]>> = Object.fromEntries(
  cases.map((c) => [c.name, { sequential: [], inFlight: [] }]),
);
for (let r = 0; r < rounds; r++) {
  for (const [mode, concurrency] of modes)
    for (const c of cases) raw[c.name]![mode]!.push(await measure(c, concurrency));
  process.stderr.write(`round ${r + 1}/${rounds} done\n`);
}
idp.close();

const summary = (ms: Measure[]) => ({
  perSec: median(ms.map((m) => m.perSec)),
  usPerOp: median(ms.map((m) => m.usPerOp)),
  cpuUsPerOp: median(ms.map((m) => m.cpuUsPerOp)),
  rounds: ms,
});
const results = cases.map((c) => ({
  name: c.name,
  what: c.what,
  sequential: summary(raw[c.name]!.sequential),
  inFlight: summary(raw[c.name]!.inFlight),
}));
const out: JwtResults = {
  at: new Date(started).toISOString(),
  seconds: Math.round((Date.now() - started) / 1000),
  settings: { rounds, secondsPerRound: seconds, inFlight },
  machine: env,
  results,
};
mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
writeFileSync(new URL('./results/jwt.json', import.meta.url), `${JSON.stringify(out, null, 2)}\n`);
console.log(jwtTable(out));
writeDocuments();
