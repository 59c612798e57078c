// A proof-of-work sale from the buyer's side, over HTTP: fetch a challenge, solve it as the widget
// would (altcha-lib's solver, searching up from counter 0), exchange it for a purchase token, buy.
import assert from 'node:assert/strict';
import { solveChallenge, type Challenge } from 'altcha-lib';
import { deriveKey } from 'altcha-lib/algorithms/sha';
import { PURCHASE_TOKEN_HEADER } from '../../shared/http/routes/purchase.js';
import type { Sale } from '../../shared/sales/sale.js';
import { http, outcome } from './http.js';

/** What the widget sends once solved: base64 of {challenge, solution}. */
export async function solve(challenge: Challenge): Promise<string> {
  const solution = await solveChallenge({ challenge, deriveKey });
  assert.ok(solution, 'solved');
  return Buffer.from(JSON.stringify({ challenge, solution })).toString('base64');
}

/** The counter a solver had to reach: what the challenge's maker picked. */
export async function counterOf(challenge: Challenge): Promise<number> {
  const solution = await solveChallenge({ challenge, deriveKey });
  assert.ok(solution, 'solved');
  return solution.counter;
}

export const challengeFor = (port: number, s: Sale, user: string) =>
  http(port, 'GET', `/api/sales/${s.id}/challenge`, { user });

export const exchange = (port: number, s: Sale, user: string, payload: string) =>
  http(port, 'POST', `/api/sales/${s.id}/purchase-token`, { user, body: { payload } });

export const buy = (port: number, s: Sale, user: string, token?: string, qty = 1) =>
  http(port, 'POST', `/api/sales/${s.id}/purchases`, {
    user,
    body: { qty },
    headers: token === undefined ? {} : { [PURCHASE_TOKEN_HEADER]: token },
  });

/** A solved challenge of this buyer's, ready to exchange. */
export async function solvedPayload(port: number, s: Sale, user: string): Promise<string> {
  const c = await challengeFor(port, s, user);
  assert.equal(c.status, 200, outcome(c));
  return solve(c.body as Challenge);
}

/** A purchase token earned the honest way. */
export async function tokenFor(port: number, s: Sale, user: string): Promise<string> {
  const t = await exchange(port, s, user, await solvedPayload(port, s, user));
  assert.equal(t.status, 200, outcome(t));
  return t.body.token as string;
}

/** The id a purchase token carries (its signed body's `n`), under which purchase.lua marks it spent. */
export const tokenId = (token: string): string =>
  JSON.parse(Buffer.from(token.split('.')[0]!, 'base64url').toString('utf8')).n;
