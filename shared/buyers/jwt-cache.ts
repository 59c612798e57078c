// Buyer tokens already verified against the identity provider's key set (JWKS mode only). A buyer
// clicking again during a sale sends the same token; its RS256/ES256 signature costs 75-117 µs of
// CPU to check again, a hash lookup a few. HS256 is not cached: its ~9 µs HMAC costs about as much
// as the lookup.
import { createHash } from 'node:crypto';
import type { Buyer } from './buyer.js';

/** The default bound: a few MB with the claims, more buyers than click within one key-set refresh on one process. */
export const VERIFIED_TOKENS_MAX = 10_000;

interface Entry {
  buyer: Buyer;
  expMs: number;
}

/**
 * Successful verifications, keyed by the SHA-256 of the whole token (so the cache holds no bearer
 * credential and a token differing in any byte, a forged signature included, is a miss). An entry
 * is used only before the token's exp: the verifier's clock tolerance is not extended to it, so a
 * token late by the tolerance is checked in full again. A token without exp is never cached, since
 * nothing would bound its entry's life. Issuer, audience and nbf are fixed in the token, so a
 * success stays one until exp. Failures are not cached: a refusal costs the verifier, not the cache.
 * When the key set changes in any way (a kid withdrawn, or a key replaced under its kid), every
 * entry is dropped, so no token outlives the key that signed it.
 */
export class VerifiedTokens {
  private readonly entries = new Map<string, Entry>();
  private fingerprint: string | undefined;
  /** Bumped whenever the entries are dropped: a verification begun before then is not stored. */
  generation = 0;
  /** Verifications answered from the cache (for tests and the bench). */
  hits = 0;

  constructor(readonly max = VERIFIED_TOKENS_MAX) {
    if (!Number.isInteger(max) || max < 1)
      throw new RangeError(`VerifiedTokens: max must be a positive integer, got ${max}`);
  }

  get size(): number {
    return this.entries.size;
  }

  static hash(token: string): string {
    return createHash('sha256').update(token).digest('base64url');
  }

  /** The buyer of a token verified before and not expired at nowMs. */
  get(hash: string, nowMs: number): Buyer | undefined {
    const entry = this.entries.get(hash);
    if (!entry) return undefined;
    if (nowMs >= entry.expMs) {
      this.entries.delete(hash);
      return undefined;
    }
    this.hits++;
    return entry.buyer;
  }

  /** Remembers a verification begun at `generation`; the oldest entry goes past the bound. */
  set(hash: string, buyer: Buyer, expSeconds: number | undefined, generation: number): void {
    if (expSeconds === undefined || generation !== this.generation) return;
    this.entries.delete(hash);
    this.entries.set(hash, { buyer, expMs: expSeconds * 1000 });
    if (this.entries.size > this.max) this.entries.delete(this.entries.keys().next().value!);
  }

  /** The key set as last fetched; any change from the one before drops every entry. */
  keySet(jwks: unknown): void {
    const fingerprint = JSON.stringify(jwks);
    if (this.fingerprint !== undefined && fingerprint !== this.fingerprint) {
      this.entries.clear();
      this.generation++;
    }
    this.fingerprint = fingerprint;
  }
}
