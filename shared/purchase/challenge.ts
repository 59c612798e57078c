// Bot defence for a sale with `challenge: 'pow'`. A buyer fetches a proof-of-work challenge (signed,
// bound to the buyer and the sale, altcha-lib's SHA-256 scheme), solves it in the browser (the
// altcha widget, about `challengeComplexity` hashes) and, once the sale is open, exchanges the
// solution for a purchase token: the buyer, the sale, an id and an expiry, signed. One solution
// earns one token (the spent signature is kept in Redis until the challenge expires) and one token
// buys once (purchase.lua keeps its id until it expires). The purchase checks the token with one
// HMAC, no round trip; Redis decides whether it was used and who wins.
//
// The signing key is random, made once in Redis (SET NX) and shared by every API process: no setting
// to deploy, and a Redis that lost it only sends buyers back to solve a new challenge. Each process
// re-reads it every KEY_REFRESH_MS, so a key replaced or lost in Redis is followed everywhere within
// that, at one round trip per interval, none per purchase.
import { createHmac, randomBytes, randomInt, timingSafeEqual } from 'node:crypto';
import { createChallenge, verifySolution, type Challenge, type Payload } from 'altcha-lib';
import { deriveKey } from 'altcha-lib/algorithms/sha';
import { HttpError } from '../runtime/errors.js';
import { CHALLENGE_KEY } from '../redis/keys.js';
import type { RedisClient } from '../redis/connect.js';
import { exchangeScript } from '../sales/scripts.js';
import type { Sale } from '../sales/model.js';

/** How long a challenge may take to solve, and how long a purchase token lasts. */
export const CHALLENGE_SECONDS = 600;
export const PURCHASE_TOKEN_SECONDS = 120;
/** How long a process signs and checks with the key it last read from Redis. */
export const KEY_REFRESH_MS = 2000;
/**
 * A challenge's expiry is judged by Redis's clock (exchange.lua), from the `exp` its signed data
 * carries; altcha-lib also checks its own expiry by the API's clock, set this much later, so an API
 * whose clock runs ahead by less refuses no live challenge.
 */
export const CHALLENGE_CLOCK_MARGIN_SECONDS = 120;

/** What a checked token tells purchase.lua: which purchase token it is, or that it is an admission pass, and until when it is good (ms). */
import type { CheckedToken } from './rules/rule.js';
export type { CheckedToken };

export class Challenges {
  private held: { key: string; until: number } | undefined;
  private reading: Promise<string> | undefined;

  constructor(private readonly redis: RedisClient) {}

  /** The key as Redis holds it, read at most once per interval whatever the traffic (`now`: the caller's clock). */
  private signingKey(now: number): Promise<string> | string {
    const held = this.held;
    if (held && now < held.until) return held.key;
    this.reading ??= this.readKey()
      .then((key) => {
        this.held = { key, until: now + KEY_REFRESH_MS };
        return key;
      })
      .finally(() => {
        this.reading = undefined;
      });
    return this.reading;
  }

  private async readKey(): Promise<string> {
    const key = await this.redis.get(CHALLENGE_KEY);
    if (key) return key;
    // Gone (a Redis that lost it, or an operator revoking it): the first process to notice makes the next one.
    await this.redis.set(CHALLENGE_KEY, randomBytes(32).toString('hex'), 'NX');
    const made = await this.redis.get(CHALLENGE_KEY);
    if (!made) throw new Error(`${CHALLENGE_KEY} is missing from Redis`);
    return made;
  }

  /**
   * A new challenge for this buyer and sale. The counter to find is uniform in [0, 2 x complexity):
   * the solver searches up from 0 and learns nothing of where it lies, so it costs `complexity`
   * hashes on average and at most twice that.
   */
  async challenge(sale: Sale, userId: string, now = Date.now()): Promise<Challenge> {
    if (sale.challenge !== 'pow') throw new HttpError('no_challenge');
    const [key, [s, us]] = await Promise.all([this.signingKey(now), this.redis.time()]);
    // Its life is counted on Redis's clock, which exchange.lua judges it by.
    const exp = Number(s) * 1000 + Math.floor(Number(us) / 1000) + CHALLENGE_SECONDS * 1000;
    return createChallenge({
      algorithm: 'SHA-256',
      cost: 1,
      deriveKey,
      counter: randomInt(0, 2 * sale.challengeComplexity),
      expiresAt: Math.floor(now / 1000) + CHALLENGE_SECONDS + CHALLENGE_CLOCK_MARGIN_SECONDS,
      data: { saleId: sale.id, userId, exp },
      hmacSignatureSecret: key,
      hmacKeySignatureSecret: key,
    });
  }

  /**
   * Checks a solved challenge (the widget's base64 payload) and, if the sale is open, the challenge
   * live and the solution unused, answers a purchase token. Those three are judged by Redis's clock
   * (exchange.lua), as the purchase is; `now` only paces the signing key's re-reads.
   */
  async exchange(
    sale: Sale,
    userId: string,
    payload: string,
    now = Date.now(),
  ): Promise<{ token: string; expiresAt: string }> {
    if (sale.challenge !== 'pow') throw new HttpError('no_challenge');
    let solved: Payload;
    try {
      solved = JSON.parse(Buffer.from(payload, 'base64').toString('utf8')) as Payload;
    } catch {
      throw new HttpError('challenge_failed', "The payload is not the widget's base64 JSON.");
    }
    const data = solved?.challenge?.parameters?.data;
    if (
      data?.saleId !== sale.id ||
      data?.userId !== userId ||
      typeof data?.exp !== 'number' ||
      typeof solved.solution !== 'object'
    )
      throw new HttpError('challenge_failed');
    const key = await this.signingKey(now);
    const result = await verifySolution({
      challenge: solved.challenge,
      solution: solved.solution,
      deriveKey,
      hmacSignatureSecret: key,
      hmacKeySignatureSecret: key,
    }).catch(() => ({ verified: false, expired: false }));
    if (!result.verified) throw new HttpError('challenge_failed', result.expired ? CHALLENGE_EXPIRED : undefined);
    // Verified, so the signature and `exp` are the ones we made.
    const [code, redisNow] = await exchangeScript(this.redis, sale.id, solved.challenge.signature!, data.exp);
    if (code !== 1) throw exchangeRefusal(code);
    const expiresAt = redisNow + PURCHASE_TOKEN_SECONDS * 1000;
    const body = Buffer.from(
      JSON.stringify({ s: sale.id, u: userId, n: randomBytes(12).toString('base64url'), e: expiresAt }),
    ).toString('base64url');
    return { token: `${body}.${sign(key, body)}`, expiresAt: new Date(expiresAt).toISOString() };
  }

  /**
   * An admission pass: the buyer, the sale and the expiry admit.lua gave it, signed with the same
   * key. purchase.lua takes it only while that buyer's pass in Redis has that expiry and is unused.
   */
  async pass(saleId: string, userId: string, expiresAt: number, now = Date.now()): Promise<string> {
    const body = Buffer.from(JSON.stringify({ s: saleId, u: userId, p: 1, e: expiresAt })).toString('base64url');
    return `${body}.${sign(await this.signingKey(now), body)}`;
  }

  /**
   * The purchase's check: a purchase token or an admission pass for this buyer and sale, signed by
   * us. Whether it was used, and whether it has expired, is for the script that spends it to say
   * (purchase.lua, join_queue.lua, spend_token.lua for a draw's entry), by Redis's clock; `now`
   * only paces the signing key's re-reads.
   */
  async check(saleId: string, userId: string, token: string | undefined, now = Date.now()): Promise<CheckedToken> {
    if (!token) throw new HttpError('purchase_token_required');
    const [body, mac, extra] = token.split('.');
    if (!body || !mac || extra !== undefined) throw new HttpError('invalid_purchase_token');
    const expected = Buffer.from(sign(await this.signingKey(now), body), 'base64url');
    const given = Buffer.from(mac, 'base64url');
    if (given.length !== expected.length || !timingSafeEqual(given, expected))
      throw new HttpError('invalid_purchase_token');
    const claims = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as {
      s?: unknown;
      u?: unknown;
      n?: unknown;
      e?: unknown;
      p?: unknown;
    };
    const pass = claims.p === 1;
    if (claims.s !== saleId || claims.u !== userId || typeof claims.e !== 'number')
      throw new HttpError(pass ? 'admission_pass_invalid' : 'invalid_purchase_token');
    if (pass) return { kind: 'pass', expiresAt: claims.e };
    if (typeof claims.n !== 'string') throw new HttpError('invalid_purchase_token');
    return { kind: 'token', id: claims.n, expiresAt: claims.e };
  }
}

export const TOKEN_EXPIRED = 'The purchase token has expired: solve a new challenge.';
const CHALLENGE_EXPIRED = 'The challenge has expired: fetch a new one.';

/** What exchange.lua's refusal says to the buyer. */
function exchangeRefusal(code: number): HttpError {
  switch (code) {
    case -1:
      return new HttpError('sale_not_found');
    case -2:
      return new HttpError('not_started');
    case -3:
      return new HttpError('ended');
    case -9:
      return new HttpError(
        'challenge_failed',
        'This challenge was already used for a purchase token: fetch a new one.',
      );
    case -14:
      return new HttpError('challenge_failed', CHALLENGE_EXPIRED);
    default:
      throw new Error(`exchange.lua answered ${code}`);
  }
}

const sign = (key: string, body: string) => createHmac('sha256', key).update(body).digest('base64url');
