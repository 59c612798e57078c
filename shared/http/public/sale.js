// The sale itself: polled every second, its facts at the top of the page (name, state, time,
// price, stock), and asked at once when its start passes rather than at the next poll.
import { api } from './api.js';
import { saleMode } from './mode.js';
import { priceText } from './sizes.js';
import { prepareChallenge } from './tokens.js';
import { el, render, salePath, state } from './state.js';
import { delay, duration, setText } from './text.js';

const SALE_STATES = { upcoming: 'Upcoming', open: 'Open', sold_out: 'Sold out', ended: 'Ended' };

// What the mode does once the sale is first known (app.js: load the buyer's place or entry).
let firstSeen = () => {};

// Answers to overlapping requests can arrive in any order; only the newest sale view is shown.
let saleAsked = 0;
let saleShown = 0;
export async function refreshSale() {
  const seq = ++saleAsked;
  try {
    const sale = await api('GET', salePath());
    if (seq > saleShown) {
      // A refusal ("sold out", "not started") is stale once the sale opens again.
      if (sale.state === 'open' && state.sale?.state !== 'open') state.message = '';
      saleShown = seq;
      const first = state.sale === null;
      state.sale = sale;
      prepareChallenge();
      if (first) firstSeen(sale);
    }
    state.offline = false;
  } catch (err) {
    if (err.code === 'sale_not_found' || err.code === 'invalid_id') state.saleMissing = true;
    else state.offline = true;
  }
  render();
}

/** Polls the sale until it turns out not to exist; `onFirst(sale)` runs once, with the first answer. */
export async function pollSale(onFirst) {
  firstSeen = onFirst;
  while (!state.saleMissing) {
    await refreshSale();
    await delay(1000);
  }
}

// The countdowns tick on the client; when the start passes, ask at once rather than at the next poll.
let startAsked = false;
export function checkStart() {
  const s = state.sale;
  if (s?.state === 'upcoming' && Date.now() >= Date.parse(s.startsAt) && !startAsked) {
    startAsked = true;
    void refreshSale();
  }
}

function saleTimeText(s, now) {
  const own = saleMode()?.timeText?.(s, now);
  if (own !== undefined) return own;
  if (s.state === 'upcoming') return `Starts in ${duration(Date.parse(s.startsAt) - now)}`;
  if (s.state === 'ended') return 'Ended';
  return s.endsAt ? `Ends in ${duration(Date.parse(s.endsAt) - now)}` : 'No end time';
}

export function renderSale(now) {
  const s = state.sale;
  setText(el.name, s ? s.name : state.saleMissing ? 'No such sale' : 'Loading…');
  document.title = s ? `${s.name} · Flash sale` : 'Flash sale';
  el.badge.hidden = !s;
  el.badge.dataset.state = s?.state ?? '';
  setText(el.badge, s ? SALE_STATES[s.state] : '');
  setText(el.countdown, s ? saleTimeText(s, now) : '–');
  setText(el.price, s ? priceText(s) : '–');
  setText(el.stock, s ? `${s.available} of ${s.stock} left` : '–');
}
