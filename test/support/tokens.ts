// The secrets every test process runs with, and buyer tokens: real ones signed as the API expects,
// and forged ones built from parts (any header, any payload, any key or none).
import { createHmac } from 'node:crypto';
import { signJwt } from '../../shared/buyers/jwt.js';

export const JWT_SECRET = 'test-secret-0123456789abcdef';
export const ADMIN_TOKEN = 'test-admin-token';
export const PAYMENT_WEBHOOK_SECRET = 'test-webhook-secret-0123456789';

/** A valid buyer token for `userId`. */
export function token(userId: string, secret = JWT_SECRET): string {
  return signJwt(userId, secret);
}

/** The Authorization header of a valid buyer token. */
export const auth = (userId: string) => ({ authorization: `Bearer ${token(userId)}` });

/** base64url of a string as it is, or of anything else as JSON. */
export const b64 = (v: unknown) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');

/** A JWT from parts: key null leaves it unsigned, as `alg: none` tokens are. */
export function forgeJwt(header: unknown, payload: unknown, key: string | null = JWT_SECRET, hash = 'sha256'): string {
  const body = `${b64(header)}.${b64(payload)}`;
  return key === null ? `${body}.` : `${body}.${createHmac(hash, key).update(body).digest('base64url')}`;
}
