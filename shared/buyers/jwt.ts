// Buyer tokens: verified with HS256 and JWT_SECRET, or RS256/ES256 from an identity provider's
// JWKS (JWT_JWKS_URL) through jose, one set of claim rules for both modes; and signed (HS256).
import { createHmac, timingSafeEqual } from 'node:crypto';
import { compactVerify, createRemoteJWKSet, customFetch, errors as jose, type JWTVerifyGetKey } from 'jose';
import { ConfigError, type Config } from '../config/index.js';
import { HttpError, UnavailableError } from '../runtime/errors.js';
import { VerifiedTokens } from './jwt-cache.js';
import type { Logger } from '../runtime/logger.js';
import { buyerOf, checkUserId, type Buyer } from './buyer.js';

/** Resolves to the buyer (the token's sub, and its claims), or rejects with 401 unauthorized. */
export type Verifier = (token: string) => Promise<Buyer>;

const MAX_TOKEN_LENGTH = 4096;
const BASE64URL = /^[A-Za-z0-9_-]*$/;
const JWKS_ALGORITHMS = ['RS256', 'ES256'];
/**
 * An unknown kid refetches the key set at most once per 30 s (jose's cooldown): a flood of forged
 * kids costs the identity provider two requests a minute per API process, not one per request
 * (Auth0 and Cognito rate-limit their JWKS endpoints), while a newly rotated key is still picked
 * up on its first token whenever the last fetch is 30 s old.
 */
export const JWKS_COOLDOWN_MS = 30_000;
/**
 * Known keys are refreshed in the background every 10 minutes, so a key the provider withdraws
 * stops being trusted within 10 minutes. jose's own cacheMaxAge is turned off: with it, the first
 * request after expiry waits for the fetch, and while the provider is down every request refetches
 * and fails. Here a request never waits for a refresh, and an outage keeps the last keys fetched.
 */
export const JWKS_REFRESH_MS = 10 * 60_000;
const JWKS_TIMEOUT_MS = 5_000;

const unauthorized = (message: string) => new HttpError('unauthorized', message);

function jsonObject(text: string): Record<string, unknown> | null {
  try {
    const value: unknown = JSON.parse(text);
    return value !== null && typeof value === 'object' && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : null;
  } catch {
    return null;
  }
}

/**
 * The three parts of a compact JWT. The signature must be canonical base64url: decoders skip stray
 * characters and the last character's spare bits, so many strings would pass for one signature.
 */
function split(token: string): [string, string, string] {
  const parts = token.split('.');
  if (parts.length !== 3 || token.length > MAX_TOKEN_LENGTH || !parts.every((p) => BASE64URL.test(p))) {
    throw unauthorized('The bearer token is not a JWT (three base64url parts joined by dots).');
  }
  const sig = parts[2]!;
  if (Buffer.from(sig, 'base64url').toString('base64url') !== sig)
    throw unauthorized('The token signature is invalid.');
  return parts as [string, string, string];
}

interface ClaimRules {
  issuer: string | undefined;
  audience: string | undefined;
  toleranceSeconds: number;
  requireExp: boolean;
}

/** The claims of a token whose signature has been checked; returns its buyer. */
function checkClaims(claims: Record<string, unknown> | null, rules: ClaimRules, nowSeconds = Date.now() / 1000): Buyer {
  if (!claims) throw unauthorized('The token payload is not a JSON object.');
  // A time claim that is not a finite number is refused rather than skipped: `exp: "…"` would
  // never be compared, and `exp: 1e400` parses to Infinity and would never expire.
  for (const claim of ['exp', 'nbf', 'iat'] as const) {
    const value = claims[claim];
    if (value !== undefined && (typeof value !== 'number' || !Number.isFinite(value))) {
      throw unauthorized(`The token's ${claim} must be a finite number of seconds since 1970.`);
    }
  }
  const { exp, nbf } = claims as { exp?: number; nbf?: number };
  if (exp === undefined && rules.requireExp)
    throw unauthorized('The token has no exp: this service refuses tokens that never expire.');
  if (exp !== undefined && exp <= nowSeconds - rules.toleranceSeconds) throw unauthorized('The token has expired.');
  if (nbf !== undefined && nbf > nowSeconds + rules.toleranceSeconds)
    throw unauthorized('The token is not valid yet (nbf is in the future).');
  if (rules.issuer !== undefined && claims.iss !== rules.issuer) {
    throw unauthorized(`The token's issuer (iss) must be ${JSON.stringify(rules.issuer)}.`);
  }
  if (rules.audience !== undefined) {
    const aud = claims.aud;
    if (!(aud === rules.audience || (Array.isArray(aud) && aud.includes(rules.audience)))) {
      throw unauthorized(`The token's audience (aud) must include ${JSON.stringify(rules.audience)}.`);
    }
  }
  return buyerOf(checkUserId(claims.sub), Object.freeze(claims));
}

const noCrit = (header: Record<string, unknown>): void => {
  // RFC 7515: an extension listed in crit must be understood or the token refused; we know none.
  if (header.crit !== undefined)
    throw unauthorized('The token header lists critical extensions (crit) this service does not support.');
};

/** HS256 by hand with node:crypto: one synchronous HMAC, several times cheaper than jose's WebCrypto path (BENCHMARKS.md). */
function hs256Verifier(secret: string, rules: ClaimRules): Verifier {
  const verify = (token: string): Buyer => {
    const [h, p, s] = split(token);
    const header = jsonObject(Buffer.from(h, 'base64url').toString('utf8'));
    if (!header) throw unauthorized('The token header is not a JSON object.');
    if (header.alg !== 'HS256')
      throw unauthorized('The token must be signed with HS256 (this service verifies with JWT_SECRET).');
    noCrit(header);
    // Compared as text, which split() has made canonical.
    const expected = Buffer.from(createHmac('sha256', secret).update(`${h}.${p}`).digest('base64url'));
    const given = Buffer.from(s);
    if (given.length !== expected.length || !timingSafeEqual(given, expected))
      throw unauthorized('The token signature is invalid.');
    return checkClaims(jsonObject(Buffer.from(p, 'base64url').toString('utf8')), rules);
  };
  return async (token) => verify(token);
}

/** jose's verdicts on a token, as the 401 a developer can act on; anything else means the key set is out of reach (503). */
const JOSE_REFUSALS: Record<string, (err: Error) => string> = {
  ERR_JWS_INVALID: (err) => `The bearer token is not a valid JWS: ${err.message}.`,
  ERR_JOSE_ALG_NOT_ALLOWED: () =>
    `The token must be signed with ${JWKS_ALGORITHMS.join(' or ')} by the identity provider (JWT_JWKS_URL).`,
  ERR_JOSE_NOT_SUPPORTED: (err) => `The token uses something this service does not support: ${err.message}.`,
  ERR_JWS_SIGNATURE_VERIFICATION_FAILED: () => 'The token signature is invalid.',
  ERR_JWKS_NO_MATCHING_KEY: () => "No key of the identity provider matches the token's kid and alg.",
  ERR_JWKS_MULTIPLE_MATCHING_KEYS: () =>
    'The token has no kid and several keys of the identity provider match: the token must carry a kid.',
};

function jwksVerifier(url: URL, rules: ClaimRules, logger: Logger | undefined, cache: VerifiedTokens): Verifier {
  // Every fetch of the key set is counted, whoever asked for it (the refresh below, or jose itself
  // on an unknown kid), so the cache compares the set once after each fetch, not on every request.
  let fetches = 0;
  let compared = 0;
  const counted: typeof fetch = async (...args) => {
    try {
      return await fetch(...args);
    } finally {
      fetches++;
    }
  };
  const remote = createRemoteJWKSet(url, {
    cooldownDuration: JWKS_COOLDOWN_MS,
    cacheMaxAge: Infinity,
    timeoutDuration: JWKS_TIMEOUT_MS,
    [customFetch]: counted,
  });
  let refreshAt = 0;
  const refresh = () => {
    refreshAt = Date.now() + JWKS_REFRESH_MS;
    remote.reload().catch((err: unknown) => {
      refreshAt = Date.now() + JWKS_COOLDOWN_MS;
      logger?.warn({ err, jwksUrl: url.href }, 'JWKS refresh failed; the keys fetched before stay in use');
    });
  };
  // Fetched at start, so the first buyers of a sale do not wait for the identity provider.
  refresh();
  return async (token) => {
    split(token);
    // Checked on cache hits too: a sale answered from the cache alone must still see withdrawn keys.
    if (Date.now() >= refreshAt && !remote.reloading) refresh();
    // While a fetch is in flight jose still verifies with the old set, and so may the cache.
    if (fetches !== compared && !remote.reloading) {
      compared = fetches;
      cache.keySet(remote.jwks());
    }
    const hash = VerifiedTokens.hash(token);
    const cached = cache.get(hash, Date.now());
    if (cached !== undefined) return cached;
    const generation = cache.generation;
    let verified: Awaited<ReturnType<typeof compactVerify>>;
    try {
      verified = await compactVerify(token, remote as JWTVerifyGetKey, { algorithms: JWKS_ALGORITHMS });
    } catch (err) {
      const refusal = JOSE_REFUSALS[(err as { code?: string }).code ?? ''];
      if (refusal) throw unauthorized(refusal(err as Error));
      // Not the buyer's fault: the key set could not be fetched (fetch fails with a TypeError) or read.
      const outOfReach = err instanceof jose.JOSEError || (err instanceof TypeError && err.message === 'fetch failed');
      if (!outOfReach) throw err;
      throw new UnavailableError(
        `The identity provider's key set (JWT_JWKS_URL) is out of reach: ${(err as Error).message}`,
        { cause: err },
      );
    }
    noCrit(verified.protectedHeader as Record<string, unknown>);
    const buyer = checkClaims(jsonObject(Buffer.from(verified.payload).toString('utf8')), rules);
    cache.set(hash, buyer, buyer.claims.exp as number | undefined, generation);
    return buyer;
  };
}

function jwksUrl(raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(
      `JWT_JWKS_URL is not a URL: set it to your identity provider's JWKS, e.g. https://idp.example.com/.well-known/jwks.json, got ${JSON.stringify(raw)}`,
    );
  }
  // Whoever can answer this URL decides who every buyer is: plain http only on this machine.
  const loopback = /^(127\.[\d.]+|localhost|\[::1\])$/.test(url.hostname);
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && loopback)) {
    throw new ConfigError(
      `JWT_JWKS_URL must be an https URL (http only on 127.0.0.1/localhost), got ${JSON.stringify(raw)}`,
    );
  }
  return url;
}

/**
 * The buyer-token verifier of an API process (AUTH_MODE=jwt), built once: HS256 with JWT_SECRET or
 * RS256/ES256 with JWT_JWKS_URL, never both, so the algorithm is pinned by the configuration and
 * never chosen by the token.
 */
export function createVerifier(
  config: Config,
  opts: { logger?: Logger; verifiedTokens?: VerifiedTokens } = {},
): Verifier {
  const rules: ClaimRules = {
    issuer: config.jwtIssuer,
    audience: config.jwtAudience,
    toleranceSeconds: config.jwtClockToleranceSeconds,
    requireExp: config.jwtRequireExp,
  };
  if (config.jwtSecret !== undefined && config.jwtJwksUrl !== undefined) {
    throw new ConfigError(
      'JWT_SECRET and JWT_JWKS_URL are both set: set only one, JWT_SECRET for HS256 tokens signed with a shared secret or JWT_JWKS_URL for RS256/ES256 tokens from an identity provider',
    );
  }
  if (config.jwtJwksUrl !== undefined)
    return jwksVerifier(jwksUrl(config.jwtJwksUrl), rules, opts.logger, opts.verifiedTokens ?? new VerifiedTokens());
  if (config.jwtSecret !== undefined) return hs256Verifier(config.jwtSecret, rules);
  throw new ConfigError(
    'Neither JWT_SECRET nor JWT_JWKS_URL is set: set one of them, or AUTH_MODE=trusted-header behind an authenticating gateway',
  );
}

/** A buyer token signed with the shared secret (tests, loadtest, `flashsale token`, the dev route), with any other claims given. */
export function signJwt(sub: string, secret: string, ttlSeconds = 3600, claims: Record<string, unknown> = {}): string {
  const enc = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const now = Math.floor(Date.now() / 1000);
  const body = `${enc({ alg: 'HS256', typ: 'JWT' })}.${enc({ ...claims, sub, iat: now, exp: now + ttlSeconds })}`;
  return `${body}.${createHmac('sha256', secret).update(body).digest('base64url')}`;
}
