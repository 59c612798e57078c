// Who is buying: the id every order, limit, token and pass is keyed by, and what the identity
// provider says of them (the verified token's claims), for the sale rules that ask more than who
// (shared/purchase/rules/).
import { HttpError } from '../runtime/errors.js';

export interface Buyer {
  /** The token's `sub`, or the gateway's X-User-Id. */
  readonly id: string;
  /**
   * The verified token's payload (AUTH_MODE=jwt), `sub` and the registered claims included; none
   * behind a gateway (AUTH_MODE=trusted-header), which sends only the id.
   */
  readonly claims: Readonly<Record<string, unknown>>;
}

const USER_ID = /^[\x21-\x7e]{1,128}$/;
const NO_CLAIMS: Readonly<Record<string, unknown>> = Object.freeze({});

export function checkUserId(sub: unknown): string {
  if (typeof sub !== 'string' || !USER_ID.test(sub)) {
    throw new HttpError('unauthorized', 'The user id must be 1-128 printable ASCII characters without spaces.');
  }
  return sub;
}

/** A buyer: by id alone (a gateway's X-User-Id), or with a verified token's claims. */
export const buyerOf = (id: string, claims = NO_CLAIMS): Buyer => ({ id, claims });
