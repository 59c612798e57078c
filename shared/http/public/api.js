// The buyer's page's requests to the API, and what each refusal says to the buyer.
import { development } from './state.js';

const MESSAGES = {
  sold_out: 'Sold out: every item has been claimed.',
  not_enough_stock: 'Not enough items are left for that quantity.',
  limit_reached: 'You already have as many as this sale allows per buyer.',
  email_not_verified: 'This sale is only for buyers whose email address is verified.',
  not_started: 'The sale has not started yet.',
  ended: 'The sale has ended.',
  invalid_id: 'This sale link is broken: check the address.',
  unauthorized: development
    ? 'That user id is not accepted: use 1 to 128 letters, digits or symbols, without spaces.'
    : 'Your token was not accepted: paste a fresh buyer token.',
  order_expired: 'Too late: the payment window has closed.',
  order_not_ready: 'Your order is still being confirmed; try again in a moment.',
  order_not_found: 'This order could not be found.',
  order_paid: 'This order is already paid.',
  order_cancelled: 'This order was cancelled.',
  challenge_failed: 'The anti-bot check did not pass; please try again.',
  invalid_purchase_token: 'The anti-bot check has expired; please try again.',
  purchase_token_used: 'The anti-bot check was used up; please try again.',
  admission_pass_required: 'This sale has a waiting room: join it, and buy when it is your turn.',
  admission_pass_invalid: 'Your pass can no longer buy: it was used or has run out.',
  not_in_queue: "You are not in this sale's waiting room: join it first.",
  entries_not_open: 'Entries to this draw are not open yet.',
  entries_closed: 'Entries to this draw are closed.',
  busy: 'The shop is very busy right now; please try again.',
  unavailable: 'The shop is having trouble right now; please try again shortly.',
  network: 'Cannot reach the shop; retrying…',
};

export class ApiError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

export async function api(method, path, { token, body, headers: extra } = {}) {
  const headers = { ...extra };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (token) headers.authorization = `Bearer ${token}`;
  let res;
  try {
    res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
    });
  } catch {
    throw new ApiError('network', '');
  }
  const data = await res.json().catch(() => null);
  if (!res.ok) throw new ApiError(data?.error ?? `http_${res.status}`, data?.message ?? '');
  return data;
}

export const plain = (err) => MESSAGES[err.code] ?? (err.message || 'Something went wrong; please try again.');
export const networkMessage = MESSAGES.network;

/** The shop could not answer (the network, load, an outage): the page says it is offline and tries again. */
export const unreachable = (err) => err.code === 'network' || err.code === 'busy' || err.code === 'unavailable';
