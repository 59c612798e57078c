// HS256 JWTs, checked with node:crypto: the purchase path pays for one HMAC, nothing more.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { HttpError } from './errors.js';

const USER_ID = /^[\x21-\x7e]{1,128}$/;

function b64json(part: string): Record<string, unknown> | null {
  try {
    const value: unknown = JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** Returns the token's `sub`, or throws 401. Only HS256 is accepted: `alg: none` and friends are refused. */
export function verifyJwt(token: string, secret: string, nowSeconds = Date.now() / 1000): string {
  const parts = token.split('.');
  if (parts.length !== 3 || token.length > 4096) throw new HttpError('unauthorized', 'The bearer token is not a JWT.');
  const [h, p, s] = parts as [string, string, string];
  const header = b64json(h);
  if (!header || header.alg !== 'HS256') throw new HttpError('unauthorized', 'The token must be signed with HS256.');
  // Compared as text: decoding would skip stray characters and the last character's spare bits,
  // so many strings would pass for the one signature.
  const expected = Buffer.from(createHmac('sha256', secret).update(`${h}.${p}`).digest('base64url'));
  const given = Buffer.from(s);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
    throw new HttpError('unauthorized', 'The token signature is invalid.');
  }
  const claims = b64json(p);
  if (!claims) throw new HttpError('unauthorized', 'The token payload is not a JSON object.');
  // A time claim that is not a number is refused rather than skipped: skipping it would never expire.
  for (const claim of ['exp', 'nbf'] as const) {
    if (claims[claim] !== undefined && typeof claims[claim] !== 'number') throw new HttpError('unauthorized', `The token's ${claim} must be a number of seconds.`);
  }
  if (typeof claims.exp === 'number' && nowSeconds >= claims.exp) throw new HttpError('unauthorized', 'The token has expired.');
  if (typeof claims.nbf === 'number' && nowSeconds < claims.nbf) throw new HttpError('unauthorized', 'The token is not valid yet.');
  return checkUserId(claims.sub);
}

export function checkUserId(sub: unknown): string {
  if (typeof sub !== 'string' || !USER_ID.test(sub)) {
    throw new HttpError('unauthorized', 'The user id must be 1-128 printable ASCII characters without spaces.');
  }
  return sub;
}

export function signJwt(sub: string, secret: string, ttlSeconds = 3600): string {
  const enc = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const now = Math.floor(Date.now() / 1000);
  const body = `${enc({ alg: 'HS256', typ: 'JWT' })}.${enc({ sub, iat: now, exp: now + ttlSeconds })}`;
  return `${body}.${createHmac('sha256', secret).update(body).digest('base64url')}`;
}
