// The buyer's order: followed from queued to paid, expired or cancelled, paid (DIRECT_PAY) or
// cancelled from here, and the list of the buyer's orders in this sale. On load (and for a new
// buyer) the list brings the current order back, so a reload shows it as it was.
import { api, plain, unreachable } from './api.js';
import { follow } from './follow.js';
import { refreshSale } from './sale.js';
import { buyerToken, identityGiven, prepareChallenge } from './tokens.js';
import { saleMode } from './mode.js';
import { directPay, el, render, saleId, state } from './state.js';
import { duration, setText } from './text.js';

export const ORDER_RANK = { queued: 0, pending_payment: 1, paid: 2, expired: 2, cancelled: 2 };
const orderPath = (o, tail = '') => `/api/orders/${encodeURIComponent(o.orderId)}${tail}`;

// A late answer must never move an order backwards (paid, then "waiting for payment").
function applyOrder(view) {
  const o = state.order;
  if (!o || o.orderId !== view.orderId || ORDER_RANK[view.status] <= ORDER_RANK[o.status]) return;
  o.status = view.status;
  if (view.expiresAt) o.expiresAt = Date.parse(view.expiresAt);
}

/** Makes the order the buyer's current one and follows it (GET /api/orders/:id/events, polled if that fails). */
export function takeOrder(orderId, token, status = 'queued', expiresAt = 0) {
  const o = { orderId, token, status, expiresAt, closed: false };
  state.order = o;
  void followOrder(o);
}

async function followOrder(o) {
  // Polled faster while it is being written, or once its deadline passed: both end in milliseconds.
  const pause = () =>
    o.status === 'queued' || (o.status === 'pending_payment' && Date.now() >= o.expiresAt) ? 300 : 1000;
  await follow({
    events: orderPath(o, '/events'),
    token: o.token,
    read: () => api('GET', orderPath(o), { token: o.token }),
    apply: applyOrder,
    active: () => state.order === o && ORDER_RANK[o.status] < 2,
    pause,
    refused: (err) => (state.message = plain(err)),
  });
  void loadOrders(); // the list shows the order's final state too
}

// The server's list of this buyer's orders in this sale. Without an order in hand (a reload, a new
// buyer) the newest one becomes the current order again, followed as if just bought. An order still
// queued is listed once written, within milliseconds.
let ordersAsked = 0;
export async function loadOrders() {
  if (!identityGiven()) return;
  const seq = ++ordersAsked;
  try {
    const token = await buyerToken();
    prepareChallenge();
    const { orders } = await api('GET', `/api/me/orders?sale=${encodeURIComponent(saleId)}&limit=20`, { token });
    if (seq !== ordersAsked) return; // a newer question (another buyer) is on its way
    state.history = orders;
    const newest = orders[0];
    if (!state.order && !state.buying && newest)
      takeOrder(newest.orderId, token, newest.status, newest.expiresAt ? Date.parse(newest.expiresAt) : 0);
    else for (const view of orders) applyOrder(view);
  } catch (err) {
    if (unreachable(err)) state.offline = true;
    else if (err.code !== 'invalid_id') state.message = plain(err); // a broken sale link is said once, by the sale poll
  }
  render();
}

/** Someone else at the keyboard: a finished order and the list belong to the previous buyer. */
export function forgetOrders() {
  // (The identity fields are disabled while an order is queued or waiting for payment.)
  if (state.order && ORDER_RANK[state.order.status] === 2) state.order = null;
  state.history = [];
  ordersAsked++; // an answer still on its way is the previous buyer's
}

// Pay and Cancel: one request for the order at a time; its answer moves the order, a refusal is shown.
async function act(flag, action, onRefused) {
  const o = state.order;
  state[flag] = true;
  state.message = '';
  render();
  try {
    applyOrder(await api('POST', orderPath(o, `/${action}`), { token: o.token }));
  } catch (err) {
    onRefused?.(err, o);
    state.message = plain(err);
  } finally {
    state[flag] = false;
    render();
  }
}

export async function pay() {
  const o = state.order;
  if (o?.status !== 'pending_payment' || state.paying || state.cancelling) return;
  // The poll, not this answer, turns the order into "Expired" once the server has closed it.
  await act('paying', 'pay', (err) => {
    if (err.code === 'order_expired') o.closed = true;
  });
}

export async function cancel() {
  const o = state.order;
  if (!o || ORDER_RANK[o.status] >= 2 || state.cancelling || state.paying) return;
  await act('cancelling', 'cancel');
  void refreshSale(); // the unit is back on sale
}

const ORDER_TEXT = {
  queued: ['Queued…', 'You are in line; your order is being confirmed.'],
  pending_payment: [
    'Waiting for payment',
    directPay
      ? 'Pay before the timer runs out to keep your item.'
      : 'Complete the payment with the payment provider before the timer runs out; this page updates by itself.',
  ],
  paid: ['Paid', 'Thank you! Your order is paid.'],
  expired: ['Expired', 'The payment window closed, so the item went back on sale.'],
  cancelled: ['Cancelled', 'You cancelled this order, so the item went back on sale.'],
};

export function renderOrder(now) {
  const o = state.order;
  el.order.hidden = !o;
  if (!o) return;
  el.order.dataset.status = o.status;
  const [title, detail] = ORDER_TEXT[o.status];
  const pending = o.status === 'pending_payment';
  const overdue = pending && now >= o.expiresAt;
  setText(el.orderStatus, title);
  // Where the unit does not go back on sale, the mode says what it says instead.
  const closed = saleMode()?.closedOrderText?.[o.status];
  setText(el.orderDetail, overdue ? 'Time is up; checking your order…' : (closed ?? detail));
  el.timer.hidden = !pending;
  setText(el.timer, pending ? duration(o.expiresAt - now) : '');
  el.pay.hidden = !directPay || !pending || o.closed;
  el.pay.disabled = state.paying || state.cancelling;
  setText(el.pay, state.paying ? 'Paying…' : 'Pay now');
  el.cancel.hidden = ORDER_RANK[o.status] >= 2 || o.closed;
  el.cancel.disabled = state.paying || state.cancelling;
  setText(el.cancel, state.cancelling ? 'Cancelling…' : 'Cancel order');
}

export function renderHistory() {
  // The current order as the page follows it, the others as the server listed them.
  const rows = state.history.map(
    (v) =>
      `${ORDER_TEXT[state.order?.orderId === v.orderId ? state.order.status : v.status][0]} · ` +
      `${v.qty} item${v.qty === 1 ? '' : 's'} · bought ${new Date(v.purchasedAt).toLocaleTimeString()}`,
  );
  el.history.hidden = rows.length === 0;
  const key = rows.join('\n');
  if (el.orderList.dataset.shown === key) return;
  el.orderList.dataset.shown = key;
  el.orderList.replaceChildren(
    ...rows.map((text) => Object.assign(document.createElement('li'), { textContent: text })),
  );
}
