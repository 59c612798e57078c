// Following what the server moves on its own: an order, a place in the waiting room, an entry in
// the draw. The server pushes each change as an event; if the stream fails (an old server, a proxy
// that buffers, the network), the page polls instead. EventSource cannot send headers, so the token
// goes in the URL, which the server accepts on these routes only.
//
// Views arrive from the stream, the poll and the buyer's own requests in any order: a late one must
// never move the buyer back (admitted, then "number 3"; won, then "waiting"), so each state has a
// rank and a view of a lower rank is dropped.
import { api, plain, unreachable } from './api.js';
import { refreshSale } from './sale.js';
import { buyerKey, buyerToken, dropRefusedToken, identityGiven, purchaseToken, spendPurchaseToken } from './tokens.js';
import { render, salePath, state, TOKEN_HEADER } from './state.js';
import { delay } from './text.js';

/** Reads the view once and applies it; the shop unreachable marks the page offline, any other refusal goes to `refused`. */
export async function refresh(read, apply, refused) {
  try {
    apply(await read());
    state.offline = false;
  } catch (err) {
    if (unreachable(err)) state.offline = true;
    else refused?.(err);
  }
  render();
}

/** Follows the stream at `events` while `active()`, or if it fails, polls `read` every `pause()` ms. */
export async function follow({ events, token, read, apply, active, pause = () => 1000, refused }) {
  if (await stream(`${events}?access_token=${encodeURIComponent(token)}`, apply, active)) return;
  while (active()) {
    await delay(pause());
    await refresh(read, apply, refused);
  }
}

// Resolves true once the thing is no longer followed, false if the stream fails first.
function stream(url, apply, active) {
  if (typeof EventSource !== 'function') return Promise.resolve(false);
  return new Promise((resolve) => {
    const source = new EventSource(url);
    const stop = (ok) => {
      clearInterval(watch);
      source.close(); // also after the last event: the server ends the stream, and EventSource would reconnect
      resolve(ok);
    };
    // Another took its place (another buyer), or an answer of ours (pay, cancel, buy) moved it on.
    const watch = setInterval(() => !active() && stop(true), 1000);
    source.onmessage = (m) => {
      apply(JSON.parse(m.data));
      state.offline = false;
      render();
      if (!active()) stop(true);
    };
    source.onerror = () => stop(!active());
  });
}

/**
 * The buyer's place in the waiting room (`state.room`) or entry in the draw (`state.entry`): GET
 * `<path>/me` finds it on load (a reload, a new buyer), POST `<path>` takes it (spending a purchase
 * token on a pow sale), `<path>/events` follows it until its state's rank reaches `until`.
 * `body()` is what the POST sends (undefined: none). `create(token)` makes the followed object; `behind(old, view)` drops a view the ranks alone
 * cannot tell is late; `moved(x, view)` runs after each view taken; `refused(err, x)` after a poll's refusal.
 */
export function admission({ slot, busy, path, active, allowed, rank, until, body, create, behind, moved, refused }) {
  let asked = 0; // a newer question (another buyer, a join) makes the answer to an older one stale
  const url = (tail = '') => salePath(`/${path}${tail}`);
  const current = (x) => state[slot] === x;
  const followed = (x) => current(x) && rank[x.view.state] < until;

  function apply(x, view) {
    const old = x.view;
    if (old && (rank[view.state] < rank[old.state] || behind?.(old, view))) return;
    x.view = view;
    if (old && old.state !== view.state) void refreshSale(); // the sale's figures moved too: shown with it, not at the next poll
    moved?.(x, view);
  }

  // How one followed object is read, and its views and refusals taken, for as long as it is the buyer's.
  const of = (x) => ({
    read: () => api('GET', url('/me'), { token: x.token }),
    apply: (view) => current(x) && apply(x, view),
    refused: refused && ((err) => refused(err, x)),
  });
  const refreshOf = (x) => {
    const f = of(x);
    return refresh(f.read, f.apply, f.refused);
  };

  function begin(token, view) {
    const x = create(token);
    state[slot] = x;
    apply(x, view);
    if (followed(x)) void follow({ events: url('/events'), token, ...of(x), active: () => followed(x) });
  }

  async function load() {
    if (!active() || !identityGiven() || state[slot]) return;
    const seq = ++asked;
    try {
      const token = await buyerToken();
      const view = await api('GET', url('/me'), { token });
      if (seq === asked && !state[slot]) begin(token, view);
    } catch (err) {
      if (unreachable(err)) state.offline = true;
      // Not in it (not_in_queue, not_entered): the button to join or enter is the answer.
    }
    render();
  }

  async function start() {
    if (!allowed()) return;
    // Disabled before the first await, as Buy is.
    state[busy] = true;
    state.message = '';
    render();
    const buyer = buyerKey();
    const seq = ++asked;
    try {
      const token = await buyerToken();
      const pow = state.sale.challenge === 'pow';
      const headers = pow ? { [TOKEN_HEADER]: await purchaseToken(token) } : {};
      const view = await api('POST', url(), { token, headers, body: body?.() });
      if (pow) spendPurchaseToken(buyer);
      if (seq === asked) begin(token, view);
    } catch (err) {
      dropRefusedToken(buyer, err);
      state.message = plain(err);
    } finally {
      state[busy] = false;
      render();
    }
  }

  /** Another buyer at the keyboard: the previous one's place or entry is dropped (its stream or poll stops), and answers on their way too. */
  function forget() {
    state[slot] = null;
    asked++;
  }

  return { apply, refresh: refreshOf, load, start, forget };
}
