// Who the buyer is (a user id in development, a pasted token otherwise) and the tokens the page
// gets for them: the buyer token, and on a sale with `challenge: pow` the purchase token.
//
// A pow sale: as soon as the buyer is known (the sale upcoming or open), their browser solves a
// proof-of-work challenge in the altcha widget (loaded only for such a sale); the click on Buy then
// exchanges the solution for a purchase token, kept per buyer until it buys or shortly before it
// expires: a token buys once. A solution is good for 600 s and earns one token: an older one, or a
// used one, is solved again. Both by buyer (the user id, or the pasted token): the challenge is
// bound to the buyer, and one widget solves for one buyer at a time.
import { api, ApiError } from './api.js';
import { saleMode } from './mode.js';
import { development, el, orderHeld, salePath, state } from './state.js';

export const buyerKey = () => (development ? el.userId.value.trim() : el.token.value.trim());
export const identityGiven = () => buyerKey() !== '';

const tokens = new Map(); // development: whether the email is verified and the user id -> token from /api/dev/token
const devTokenKey = () => `${el.emailVerified.checked} ${el.userId.value.trim()}`;
export async function buyerToken() {
  if (!development) return el.token.value.trim();
  const key = devTokenKey();
  if (!tokens.has(key)) {
    const body = { userId: el.userId.value.trim(), emailVerified: el.emailVerified.checked };
    tokens.set(key, (await api('POST', '/api/dev/token', { body })).token);
  }
  return tokens.get(key);
}

const solutions = new Map(); // buyer -> { payload: Promise<string>, until }
const purchaseTokens = new Map(); // buyer -> { token, until }

function solvedPayload(buyer, token) {
  const held = solutions.get(buyer);
  if (held && held.until > Date.now()) return held.payload;
  const payload = solveChallenge(token);
  solutions.set(buyer, { payload, until: Date.now() + 540_000 });
  payload.catch(() => solutions.delete(buyer));
  return payload;
}

async function solveChallenge(token) {
  const challenge = await api('GET', salePath('/challenge'), { token });
  await import('./altcha.js');
  globalThis.$altcha.algorithms.set('SHA-256', () => new Worker('./altcha-sha.js'));
  // A fresh widget per challenge, configured by its attributes, starting as soon as it is shown.
  const widget = document.createElement('altcha-widget');
  const solved = new Promise((resolve, reject) => {
    widget.addEventListener('verified', (e) => resolve(e.detail.payload));
    widget.addEventListener('statechange', (e) => {
      if (e.detail.state === 'error' || e.detail.state === 'expired') reject(new ApiError('challenge_failed', ''));
    });
  });
  widget.setAttribute('challenge', JSON.stringify(challenge));
  widget.setAttribute('auto', 'onload');
  widget.setAttribute('configuration', JSON.stringify({ hideLogo: true, hideFooter: true }));
  el.challenge.replaceChildren(widget);
  el.challenge.hidden = false;
  return solved;
}

/**
 * Starts solving ahead of the click, for a buyer already known (a user id whose token the page
 * holds, or a pasted token): never for a half-typed id.
 */
export function prepareChallenge() {
  const s = state.sale;
  if (s?.challenge !== 'pow' || (s.state !== 'upcoming' && s.state !== 'open') || orderHeld()) return;
  if (saleMode()?.challengeAhead?.(s, Date.now()) === false) return;
  const buyer = buyerKey();
  const token = development ? tokens.get(devTokenKey()) : buyer;
  if (token) solvedPayload(buyer, token).catch(() => {}); // a failure is met again, and said, at the click
}

export async function purchaseToken(token) {
  const buyer = buyerKey();
  const held = purchaseTokens.get(buyer);
  if (held && held.until > Date.now()) return held.token;
  const payload = await solvedPayload(buyer, token);
  try {
    const earned = await api('POST', salePath('/purchase-token'), { token, body: { payload } });
    purchaseTokens.set(buyer, { token: earned.token, until: Date.parse(earned.expiresAt) - 10_000 });
    return earned.token;
  } finally {
    solutions.delete(buyer); // used, or refused: the next purchase token takes a new solution
  }
}

/** The purchase, join or entry took `buyer`'s purchase token: the next one is earned anew. */
export const spendPurchaseToken = (buyer) => void purchaseTokens.delete(buyer);

/** A refusal that says the purchase token is used up or expired: it is dropped, and the next click earns another. */
export function dropRefusedToken(buyer, err) {
  if (err.code === 'purchase_token_used' || err.code === 'invalid_purchase_token') purchaseTokens.delete(buyer);
}
