// The buyer's page: polls the sale, buys one item, then follows the order to paid, expired or
// cancelled (pushed by the server as events, polled if that fails). On load (and for a new buyer)
// it asks the server for the buyer's orders in this sale, so a reload shows the current order as it was.
// A sale with a waiting room (admission: queue) has the buyer join first and follow their place
// (pushed as events, polled if that fails); once admitted, the pass buys, as the token the purchase carries.
// A draw (admission: draw) has the buyer enter while entries are open and follow the entry (pushed,
// polled if that fails) to won, whose order then follows as a bought one, waiting, or lost.
// All state is in `state`; render() draws all of it, so every change is an assignment and a render().

const $ = (id) => document.querySelector(`[data-testid="${id}"]`);
const el = {
  name: $('sale-name'), badge: $('sale-state'), countdown: $('countdown'), price: $('price'), stock: $('stock'),
  userId: $('user-id'), token: $('token'), buy: $('buy'), buyHint: $('buy-hint'), message: $('message'),
  order: $('order'), orderStatus: $('order-status'), orderDetail: $('order-detail'), timer: $('payment-countdown'), pay: $('pay'),
  cancel: $('cancel'), history: $('orders'), orderList: $('order-list'), challenge: $('challenge'),
  join: $('join'), queue: $('queue'), queueStatus: $('queue-status'), queueDetail: $('queue-detail'), queueFacts: $('queue-facts'),
  queueAhead: $('queue-ahead'), queueWait: $('queue-wait'), queueProgress: $('queue-progress'), queueProgressHint: $('queue-progress-hint'),
  passCountdown: $('pass-countdown'),
  enter: $('enter'), draw: $('draw'), drawStatus: $('draw-status'), drawDetail: $('draw-detail'), fairness: $('fairness'),
  seedHash: $('draw-seed-hash'), seedRow: $('draw-seed-row'), seed: $('draw-seed'), ticketRow: $('draw-ticket-row'), ticket: $('draw-ticket'),
  drawCheck: $('draw-check'), recordLine: $('draw-record-line'), record: $('draw-record'),
};
const TOKEN_HEADER = 'flashsale-purchase-token';

const development = document.body.dataset.mode === 'development';
// Direct pay: the Pay button asks the API, which signs a payment event and takes it through the
// webhook path. Otherwise the payment provider confirms, and the poll shows "Paid".
const directPay = document.body.dataset.pay === 'direct';
const saleId = new URLSearchParams(location.search).get('sale') || 'demo';

const MESSAGES = {
  sold_out: 'Sold out: every item has been claimed.',
  not_enough_stock: 'Not enough items are left for that quantity.',
  limit_reached: 'You already have as many as this sale allows per buyer.',
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
  not_in_queue: 'You are not in this sale\'s waiting room: join it first.',
  entries_not_open: 'Entries to this draw are not open yet.',
  entries_closed: 'Entries to this draw are closed.',
  busy: 'The shop is very busy right now; please try again.',
  unavailable: 'The shop is having trouble right now; please try again shortly.',
  network: 'Cannot reach the shop; retrying…',
};
const SALE_STATES = { upcoming: 'Upcoming', open: 'Open', sold_out: 'Sold out', ended: 'Ended' };
const ORDER_RANK = { queued: 0, pending_payment: 1, paid: 2, expired: 2, cancelled: 2 };

const state = {
  sale: null, // the last GET /api/sales/:id answer
  saleMissing: false,
  offline: false, // the last poll failed to reach the server
  buying: false, // a purchase request is in flight
  paying: false,
  cancelling: false,
  order: null, // { orderId, token, status, expiresAt (ms), closed }
  joining: false, // a join request is in flight
  room: null, // a queue sale, once joined: { token, view (GET .../queue/me's answer), startAhead, expiryAsked }
  entering: false, // an entry request is in flight
  entry: null, // a draw, once entered: { token, view (GET .../entries/me's answer) }
  history: [], // this buyer's orders in this sale as GET /api/me/orders listed them, newest first
  message: '',
};

class ApiError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

async function api(method, path, { token, body, headers: extra } = {}) {
  const headers = { ...extra };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (token) headers.authorization = `Bearer ${token}`;
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store' });
  } catch {
    throw new ApiError('network', '');
  }
  const data = await res.json().catch(() => null);
  if (!res.ok) throw new ApiError(data?.error ?? `http_${res.status}`, data?.message ?? '');
  return data;
}

const plain = (err) => MESSAGES[err.code] ?? (err.message || 'Something went wrong; please try again.');
const delay = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function duration(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const pad = (n) => String(n).padStart(2, '0');
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h > 0 ? `${h}:${pad(m)}:${pad(s % 60)}` : `${m}:${pad(s % 60)}`;
}

const tokens = new Map(); // development: user id -> token from /api/dev/token
async function buyerToken() {
  if (!development) return el.token.value.trim();
  const userId = el.userId.value.trim();
  if (!tokens.has(userId)) tokens.set(userId, (await api('POST', '/api/dev/token', { body: { userId } })).token);
  return tokens.get(userId);
}

// A sale with `challenge: pow`: as soon as the buyer is known (the sale upcoming or open), their
// browser solves a proof-of-work challenge in the altcha widget (loaded only for such a sale); the
// click on Buy then exchanges the solution for a purchase token, kept per buyer until it buys or
// shortly before it expires: a token buys once. A solution is good for 600 s and earns one token:
// an older one, or a used one, is solved again.
// Both by buyer (the user id, or the pasted token): the challenge is bound to the buyer, and one
// widget solves for one buyer at a time.
const solutions = new Map(); // buyer -> { payload: Promise<string>, until }
const purchaseTokens = new Map(); // buyer -> { token, until }
const buyerKey = () => (development ? el.userId.value.trim() : el.token.value.trim());

function solvedPayload(buyer, token) {
  const held = solutions.get(buyer);
  if (held && held.until > Date.now()) return held.payload;
  const payload = solveChallenge(token);
  solutions.set(buyer, { payload, until: Date.now() + 540_000 });
  payload.catch(() => solutions.delete(buyer));
  return payload;
}

async function solveChallenge(token) {
  const challenge = await api('GET', `/api/sales/${encodeURIComponent(saleId)}/challenge`, { token });
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
function prepareChallenge() {
  const s = state.sale;
  if (s?.challenge !== 'pow' || (s.state !== 'upcoming' && s.state !== 'open') || orderHeld() || state.room || state.entry) return;
  if (s.admission === 'draw' && Date.now() >= Date.parse(s.entriesCloseAt)) return;
  const buyer = buyerKey();
  const token = development ? tokens.get(buyer) : buyer;
  if (token) solvedPayload(buyer, token).catch(() => {}); // a failure is met again, and said, at the click
}

async function purchaseToken(token) {
  const buyer = buyerKey();
  const held = purchaseTokens.get(buyer);
  if (held && held.until > Date.now()) return held.token;
  const payload = await solvedPayload(buyer, token);
  try {
    const earned = await api('POST', `/api/sales/${encodeURIComponent(saleId)}/purchase-token`, { token, body: { payload } });
    purchaseTokens.set(buyer, { token: earned.token, until: Date.parse(earned.expiresAt) - 10_000 });
    return earned.token;
  } finally {
    solutions.delete(buyer); // used, or refused: the next purchase token takes a new solution
  }
}

const identityGiven = () => (development ? el.userId.value.trim() : el.token.value.trim()) !== '';
// Queued, waiting for payment, or paid: one order per visit; an expired or cancelled one frees the button again.
const orderHeld = () => state.order !== null && state.order.status !== 'expired' && state.order.status !== 'cancelled';
const queueSale = () => state.sale?.admission === 'queue';
const passLive = () => state.room?.view.state === 'admitted' && Date.parse(state.room.view.passExpiresAt) > Date.now();
const canBuy = () => state.sale?.state === 'open' && !state.buying && !orderHeld() && identityGiven() && !drawSale() && (!queueSale() || passLive());
// A sold-out room can be joined: units come back from unpaid orders, and admission resumes.
const drawSale = () => state.sale?.admission === 'draw';
const entriesOpen = (now) => drawSale() && now >= Date.parse(state.sale.entriesOpenAt) && now < Date.parse(state.sale.entriesCloseAt);
const canEnter = () => entriesOpen(Date.now()) && !state.entering && !state.entry && identityGiven();
const canJoin = () => queueSale() && state.sale.state !== 'ended' && !state.joining && !state.room && !orderHeld() && identityGiven();

// Answers to overlapping requests can arrive in any order; only the newest sale view is shown.
let saleAsked = 0;
let saleShown = 0;
async function refreshSale() {
  const seq = ++saleAsked;
  try {
    const sale = await api('GET', `/api/sales/${encodeURIComponent(saleId)}`);
    if (seq > saleShown) {
      // A refusal ("sold out", "not started") is stale once the sale opens again.
      if (sale.state === 'open' && state.sale?.state !== 'open') state.message = '';
      saleShown = seq;
      const first = state.sale === null;
      state.sale = sale;
      prepareChallenge();
      if (first && sale.admission === 'queue') void loadRoom();
      if (first && sale.admission === 'draw') void loadEntry();
    }
    state.offline = false;
  } catch (err) {
    if (err.code === 'sale_not_found' || err.code === 'invalid_id') state.saleMissing = true;
    else state.offline = true;
  }
  render();
}

async function pollSale() {
  while (!state.saleMissing) {
    await refreshSale();
    await delay(1000);
  }
}

// A late poll answer must never move an order backwards (paid, then "waiting for payment").
function applyOrder(view) {
  const o = state.order;
  if (!o || o.orderId !== view.orderId || ORDER_RANK[view.status] <= ORDER_RANK[o.status]) return;
  o.status = view.status;
  if (view.expiresAt) o.expiresAt = Date.parse(view.expiresAt);
}

// The server pushes each change of the order (GET /api/orders/:id/events). EventSource cannot send
// headers, so the token goes in the URL, which the server accepts on this route only. Resolves
// false if the stream fails (an old server, a proxy that buffers, the network): polling takes over.
function streamOrder(o) {
  if (typeof EventSource !== 'function') return Promise.resolve(false);
  return new Promise((resolve) => {
    const source = new EventSource(`/api/orders/${encodeURIComponent(o.orderId)}/events?access_token=${encodeURIComponent(o.token)}`);
    const stop = (ok) => {
      clearInterval(watch);
      source.close(); // also after the final event: the server ends the stream, and EventSource would reconnect
      resolve(ok);
    };
    // Another order took its place, or an answer of ours (pay, cancel) made it final.
    const watch = setInterval(() => (state.order !== o || ORDER_RANK[o.status] === 2) && stop(true), 1000);
    source.onmessage = (e) => {
      applyOrder(JSON.parse(e.data));
      state.offline = false;
      render();
      if (state.order !== o || ORDER_RANK[o.status] === 2) stop(true);
    };
    source.onerror = () => stop(false);
  });
}

async function followOrder(o) {
  if (!(await streamOrder(o))) await pollOrder(o);
  void loadOrders(); // the list shows the order's final state too
}

async function pollOrder(o) {
  while (state.order === o && ORDER_RANK[o.status] < 2) {
    const overdue = o.status === 'pending_payment' && Date.now() >= o.expiresAt;
    await delay(o.status === 'queued' || overdue ? 300 : 1000);
    try {
      applyOrder(await api('GET', `/api/orders/${encodeURIComponent(o.orderId)}`, { token: o.token }));
      state.offline = false;
    } catch (err) {
      if (err.code === 'network' || err.code === 'busy' || err.code === 'unavailable') state.offline = true;
      else state.message = plain(err);
    }
    render();
  }
}

// The server's list of this buyer's orders in this sale. Without an order in hand (a reload, a new
// buyer) the newest one becomes the current order again, followed as if just bought. An order still
// queued is listed once written, within milliseconds.
let ordersAsked = 0;
async function loadOrders() {
  if (!identityGiven()) return;
  const seq = ++ordersAsked;
  try {
    const token = await buyerToken();
    prepareChallenge();
    const { orders } = await api('GET', `/api/me/orders?sale=${encodeURIComponent(saleId)}&limit=20`, { token });
    if (seq !== ordersAsked) return; // a newer question (another buyer) is on its way
    state.history = orders;
    const newest = orders[0];
    if (!state.order && !state.buying && newest) {
      state.order = { orderId: newest.orderId, token, status: newest.status, expiresAt: newest.expiresAt ? Date.parse(newest.expiresAt) : 0, closed: false };
      void followOrder(state.order);
    } else {
      for (const view of orders) applyOrder(view);
    }
  } catch (err) {
    if (err.code === 'network' || err.code === 'busy' || err.code === 'unavailable') state.offline = true;
    else if (err.code !== 'invalid_id') state.message = plain(err); // a broken sale link is said once, by the sale poll
  }
  render();
}

async function buy() {
  if (!canBuy()) return;
  // Disabled before the first await: a second click cannot send a second purchase.
  state.buying = true;
  state.message = '';
  state.order = null;
  render();
  const buyer = buyerKey();
  try {
    const token = await buyerToken();
    const room = queueSale() ? state.room : null;
    const headers = room ? { [TOKEN_HEADER]: room.view.pass }
      : state.sale.challenge === 'pow' ? { [TOKEN_HEADER]: await purchaseToken(token) } : {};
    const { orderId } = await api('POST', `/api/sales/${encodeURIComponent(saleId)}/purchases`, { token, body: { qty: 1 }, headers });
    if (room) applyRoom(room, { ...room.view, state: 'used', pass: undefined });
    else purchaseTokens.delete(buyer); // spent
    state.order = { orderId, token, status: 'queued', expiresAt: 0, closed: false };
    void followOrder(state.order);
  } catch (err) {
    if (err.code === 'purchase_token_used' || err.code === 'invalid_purchase_token') purchaseTokens.delete(buyer);
    if (err.code === 'admission_pass_invalid' && state.room) void refreshRoom(state.room); // used elsewhere, or run out
    state.message = plain(err);
  } finally {
    state.buying = false;
    render();
  }
  void refreshSale(); // the stock moved, or a refusal says our view of the sale is stale
}

// --- the waiting room (admission: queue) ---------------------------------------------------------

// Views arrive from the stream, the poll and our own requests in any order: a late one must never
// move the buyer back (admitted, then "number 3"). sold_out goes back to waiting when units return.
const ROOM_RANK = { waiting: 0, sold_out: 0, admitted: 1, used: 2, expired: 2, ended: 2 };

function applyRoom(r, view) {
  const old = r.view;
  if (old) {
    if (ROOM_RANK[view.state] < ROOM_RANK[old.state]) return;
    if (ROOM_RANK[view.state] === 0 && old.position !== null && view.position !== null && view.position > old.position) return;
  }
  r.view = view;
  // Sold out, admitted, ended: the sale's figures moved too; show them with it, not at the next poll.
  if (old && old.state !== view.state) void refreshSale();
  // The progress bar's baseline: the most people this page has seen ahead of the buyer (their
  // place is fixed once the room opens, so this is where they started, or where this page came in).
  if (view.ahead !== null && (r.startAhead === null || view.ahead > r.startAhead)) r.startAhead = view.ahead;
}

function enterRoom(token, view) {
  const r = { token, view: null, startAhead: null, expiryAsked: false };
  applyRoom(r, view);
  state.room = r;
  if (ROOM_RANK[view.state] < 1) void followRoom(r);
}

// The buyer's place on load, or for a new buyer: a buyer who joined before (a reload) is back in line.
let roomAsked = 0;
async function loadRoom() {
  if (!queueSale() || !identityGiven() || state.room) return;
  const seq = ++roomAsked;
  try {
    const token = await buyerToken();
    const view = await api('GET', `/api/sales/${encodeURIComponent(saleId)}/queue/me`, { token });
    if (seq === roomAsked && !state.room) enterRoom(token, view);
  } catch (err) {
    if (err.code === 'network' || err.code === 'busy' || err.code === 'unavailable') state.offline = true;
    // not_in_queue: the buyer has not joined; the Join button is the answer.
  }
  render();
}

async function join() {
  if (!canJoin()) return;
  // Disabled before the first await, as Buy is.
  state.joining = true;
  state.message = '';
  render();
  const buyer = buyerKey();
  const seq = ++roomAsked;
  try {
    const token = await buyerToken();
    // A pow sale's room takes a purchase token to join (the join spends it); the pass buys later.
    const pow = state.sale.challenge === 'pow';
    const headers = pow ? { [TOKEN_HEADER]: await purchaseToken(token) } : {};
    const view = await api('POST', `/api/sales/${encodeURIComponent(saleId)}/queue`, { token, headers });
    if (pow) purchaseTokens.delete(buyer);
    if (seq === roomAsked) enterRoom(token, view);
  } catch (err) {
    if (err.code === 'purchase_token_used' || err.code === 'invalid_purchase_token') purchaseTokens.delete(buyer);
    state.message = plain(err);
  } finally {
    state.joining = false;
    render();
  }
}

// GET .../queue/events pushes each move (the token in the URL, as for orders). The stream ends once
// the buyer is admitted (its last event carries the pass) or out of the line. Resolves false if it
// fails first: polling takes over.
function streamRoom(r) {
  if (typeof EventSource !== 'function') return Promise.resolve(false);
  const followed = () => state.room === r && ROOM_RANK[r.view.state] < 1;
  return new Promise((resolve) => {
    const source = new EventSource(`/api/sales/${encodeURIComponent(saleId)}/queue/events?access_token=${encodeURIComponent(r.token)}`);
    const stop = (ok) => {
      clearInterval(watch);
      source.close(); // EventSource would reconnect after the server ends the stream
      resolve(ok);
    };
    const watch = setInterval(() => !followed() && stop(true), 1000);
    source.onmessage = (e) => {
      applyRoom(r, JSON.parse(e.data));
      state.offline = false;
      render();
      if (!followed()) stop(true);
    };
    source.onerror = () => stop(!followed());
  });
}

async function followRoom(r) {
  if (await streamRoom(r)) return;
  while (state.room === r && ROOM_RANK[r.view.state] < 1) {
    await delay(1000);
    await refreshRoom(r);
  }
}

async function refreshRoom(r) {
  try {
    const view = await api('GET', `/api/sales/${encodeURIComponent(saleId)}/queue/me`, { token: r.token });
    if (state.room === r) applyRoom(r, view);
    state.offline = false;
  } catch (err) {
    if (err.code === 'network' || err.code === 'busy' || err.code === 'unavailable') state.offline = true;
    else if (err.code === 'not_in_queue' && state.room === r) state.room = null; // the room was cleared
  }
  render();
}

function waitText(seconds) {
  if (seconds === 0) return 'any moment';
  return seconds < 60 ? `about ${seconds} s` : `about ${Math.ceil(seconds / 60)} min`;
}

const ROOM_TEXT = {
  upcoming: ['You are in the waiting room', 'Places are drawn at random when the sale opens: everyone who joins before then has the same chance. Keep this page open.'],
  waiting: [null, 'Keep this page open: the Buy button appears here when it is your turn.'],
  admitted: ['It is your turn!', 'Buy before your pass runs out; after that it goes to the next in line.'],
  used: ['Your pass was used', 'You bought with it; your order is below.'],
  expired: ['Your turn has passed', 'Your pass ran out before you bought, so the next buyer in line was let in.'],
  sold_out: ['Sold out for now', 'Every item is claimed. You keep your place: if a buyer does not pay in time, the line moves again.'],
  ended: ['The sale has ended', 'The waiting room closed before your turn.'],
};

/**
 * How far the buyer has come: of the steps from where this page first saw them (the people then
 * ahead, plus their own admission) the share taken. Full only once admitted; 0 before the room
 * opens, when places are not drawn yet. It measures the line's progress, not time.
 */
function roomProgress(r) {
  const v = r.view;
  if (v.state === 'admitted' || v.state === 'used') return 100;
  if (v.ahead === null || r.startAhead === null) return 0;
  return Math.round(((r.startAhead - v.ahead) / (r.startAhead + 1)) * 100);
}

function renderRoom(now) {
  const r = state.room;
  el.join.hidden = !queueSale() || r !== null || orderHeld();
  el.join.disabled = !canJoin();
  setText(el.join, state.joining ? 'Joining…' : 'Join the waiting room');
  // Once the pass has bought, the order below says the rest.
  el.queue.hidden = !r || (r.view.state === 'used' && state.order !== null);
  if (!r) return;
  const v = r.view;
  const before = v.state === 'waiting' && v.position === null;
  const key = before ? 'upcoming' : v.state;
  el.queue.dataset.state = key;
  const [title, detail] = ROOM_TEXT[key];
  setText(el.queueStatus, title ?? `You are number ${v.position}`);
  setText(el.queueDetail, detail);
  const inLine = v.state === 'waiting' && v.position !== null;
  el.queueFacts.hidden = !inLine;
  setText(el.queueAhead, inLine ? `${v.ahead} ${v.ahead === 1 ? 'person' : 'people'}` : '–');
  setText(el.queueWait, inLine ? waitText(v.estimatedWaitSeconds) : '–');
  const moving = v.state === 'waiting' || v.state === 'admitted';
  el.queueProgress.hidden = !moving;
  const progress = roomProgress(r);
  if (el.queueProgress.getAttribute('aria-valuenow') !== String(progress)) {
    el.queueProgress.setAttribute('aria-valuenow', String(progress));
    el.queueProgress.firstElementChild.style.width = `${progress}%`;
  }
  const moved = r.startAhead === null || !inLine ? 0 : r.startAhead - v.ahead;
  setText(el.queueProgressHint, !inLine ? ''
    : r.startAhead === 0 ? 'You are next in line.'
      : `${moved} of the ${r.startAhead} ${r.startAhead === 1 ? 'person' : 'people'} ahead of you ${moved === 1 ? 'has' : 'have'} gone in.`);
  const admitted = v.state === 'admitted';
  el.passCountdown.hidden = !admitted;
  setText(el.passCountdown, admitted ? `Your pass buys for ${duration(Date.parse(v.passExpiresAt) - now)}` : '');
}

// --- the draw (admission: draw) -------------------------------------------------------------------

// As for the room: views from the stream, the poll and our own request arrive in any order, and a
// late one never moves the entry back (won, then "waiting").
const ENTRY_RANK = { entered: 0, waiting: 1, won: 2, lost: 2 };

/** A time the buyer reads: "Nov 25, 2026, 11:45 PM" in their locale and time zone. */
const when = (iso) => new Date(iso).toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' });

function applyEntry(e, view) {
  const old = e.view;
  if (old && ENTRY_RANK[view.state] < ENTRY_RANK[old.state]) return;
  e.view = view;
  if (old && old.state !== view.state) void refreshSale(); // drawn: the units moved too
  // Won: the draw's order is the buyer's order, followed as one just bought (unless a reload's
  // list of orders has it already).
  if (view.state === 'won' && state.entry === e && state.order?.orderId !== view.orderId) {
    state.order = { orderId: view.orderId, token: e.token, status: 'queued', expiresAt: 0, closed: false };
    void followOrder(state.order);
  }
}

function takeEntry(token, view) {
  const e = { token, view: null };
  state.entry = e;
  applyEntry(e, view);
  if (ENTRY_RANK[view.state] < 2) void followEntry(e);
}

// The buyer's entry on load, or for a new buyer: one who entered before (a reload) sees it again.
let entryAsked = 0;
async function loadEntry() {
  if (!drawSale() || !identityGiven() || state.entry) return;
  const seq = ++entryAsked;
  try {
    const token = await buyerToken();
    const view = await api('GET', `/api/sales/${encodeURIComponent(saleId)}/entries/me`, { token });
    if (seq === entryAsked && !state.entry) takeEntry(token, view);
  } catch (err) {
    if (err.code === 'network' || err.code === 'busy' || err.code === 'unavailable') state.offline = true;
    // not_entered: the Enter button is the answer.
  }
  render();
}

async function enter() {
  if (!canEnter()) return;
  // Disabled before the first await, as Buy is.
  state.entering = true;
  state.message = '';
  render();
  const buyer = buyerKey();
  const seq = ++entryAsked;
  try {
    const token = await buyerToken();
    // A pow draw takes a purchase token to enter (the entry spends it).
    const pow = state.sale.challenge === 'pow';
    const headers = pow ? { [TOKEN_HEADER]: await purchaseToken(token) } : {};
    const view = await api('POST', `/api/sales/${encodeURIComponent(saleId)}/entries`, { token, headers });
    if (pow) purchaseTokens.delete(buyer);
    if (seq === entryAsked) takeEntry(token, view);
  } catch (err) {
    if (err.code === 'purchase_token_used' || err.code === 'invalid_purchase_token') purchaseTokens.delete(buyer);
    state.message = plain(err);
  } finally {
    state.entering = false;
    render();
  }
}

// GET .../entries/events pushes each change (the token in the URL, as for orders); the stream ends
// after won or lost. Resolves false if it fails first: polling takes over.
function streamEntry(e) {
  if (typeof EventSource !== 'function') return Promise.resolve(false);
  const followed = () => state.entry === e && ENTRY_RANK[e.view.state] < 2;
  return new Promise((resolve) => {
    const source = new EventSource(`/api/sales/${encodeURIComponent(saleId)}/entries/events?access_token=${encodeURIComponent(e.token)}`);
    const stop = (ok) => {
      clearInterval(watch);
      source.close();
      resolve(ok);
    };
    const watch = setInterval(() => !followed() && stop(true), 1000);
    source.onmessage = (m) => {
      applyEntry(e, JSON.parse(m.data));
      state.offline = false;
      render();
      if (!followed()) stop(true);
    };
    source.onerror = () => stop(!followed());
  });
}

async function followEntry(e) {
  if (await streamEntry(e)) return;
  while (state.entry === e && ENTRY_RANK[e.view.state] < 2) {
    await delay(1000);
    await refreshEntry(e);
  }
}

async function refreshEntry(e) {
  try {
    const view = await api('GET', `/api/sales/${encodeURIComponent(saleId)}/entries/me`, { token: e.token });
    if (state.entry === e) applyEntry(e, view);
    state.offline = false;
  } catch (err) {
    if (err.code === 'network' || err.code === 'busy' || err.code === 'unavailable') state.offline = true;
  }
  render();
}

const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;

/** A won entry whose order has closed since (expired or cancelled): its unit went to the next in line. */
const orderClosed = (v) => v.state === 'won' && state.order?.orderId === v.orderId && (state.order.status === 'expired' || state.order.status === 'cancelled');

function entryText(v, s, now) {
  const ranked = `Drawn at rank ${v.drawRank} of ${v.entries}`;
  switch (v.state) {
    case 'entered':
      return now < Date.parse(s.entriesCloseAt)
        ? ['You\'re in the draw', `${plural(v.entries, 'entry', 'entries')}; the draw is made at ${when(s.entriesCloseAt)}. Keep this page open, or come back then.`]
        : ['You\'re in the draw', `Entries are closed (${plural(v.entries, 'entry', 'entries')}); the draw is being made…`];
    case 'won': {
      // The order may have closed since: its unit then goes to the next in line (not back on sale), until backfillUntil.
      const gone = now < Date.parse(s.backfillUntil) ? 'so its unit went to the next in line' : 'and the draw is over: its unit is not sold again';
      return orderClosed(v)
        ? ['You were drawn', `${ranked}; your order was ${state.order.status === 'expired' ? 'not paid in time' : 'cancelled'}, ${gone}.`]
        : ['You were drawn!', `${ranked}: your order is below. Pay before its timer runs out, or it goes to the next in line.`];
    }
    case 'waiting':
      return [`Drawn at rank ${v.drawRank}; not yet`, `Units that come back (an order not paid in time, or cancelled) go to the next in line until ${when(s.backfillUntil)}. Keep this page open.`];
    default:
      return ['Not drawn this time', `${ranked}; no unit came back to your place before ${when(s.backfillUntil)}.`];
  }
}

function renderDraw(now) {
  const s = state.sale;
  const draw = drawSale();
  const e = state.entry;
  el.enter.hidden = !draw || e !== null || orderHeld() || now >= Date.parse(s.entriesCloseAt);
  el.enter.disabled = !canEnter();
  setText(el.enter, state.entering ? 'Entering…' : 'Enter the draw');
  el.draw.hidden = !e;
  if (e) {
    el.draw.dataset.state = orderClosed(e.view) ? 'closed' : e.view.state;
    const [title, detail] = entryText(e.view, s, now);
    setText(el.drawStatus, title);
    setText(el.drawDetail, detail);
  }
  el.fairness.hidden = !draw;
  if (!draw) return;
  setText(el.seedHash, s.seedSha256);
  el.seedRow.hidden = s.seed === null;
  setText(el.seed, s.seed ?? '');
  el.ticketRow.hidden = !e;
  setText(el.ticket, e ? e.view.ticket : '');
  setText(el.drawCheck, s.seed === null
    ? 'The seed that orders the draw is revealed when entries close. Its hash is published now, so it cannot be picked once the entries are known.'
    : 'To check: sha256(seed) is the hash above; each ticket is sha256(sale id + ":" + buyer); the draw order is every ticket sorted by sha256(seed + ":" + ticket), and the first in that order get the units.');
  el.recordLine.hidden = s.seed === null;
  const record = `/api/sales/${encodeURIComponent(saleId)}/draw`;
  if (el.record.getAttribute('href') !== record) el.record.setAttribute('href', record);
}

// Pay and Cancel: one request for the order at a time; its answer moves the order, a refusal is shown.
async function act(flag, action, onRefused) {
  const o = state.order;
  state[flag] = true;
  state.message = '';
  render();
  try {
    applyOrder(await api('POST', `/api/orders/${encodeURIComponent(o.orderId)}/${action}`, { token: o.token }));
  } catch (err) {
    onRefused?.(err, o);
    state.message = plain(err);
  } finally {
    state[flag] = false;
    render();
  }
}

async function pay() {
  const o = state.order;
  if (!o || o.status !== 'pending_payment' || state.paying || state.cancelling) return;
  // The poll, not this answer, turns the order into "Expired" once the server has closed it.
  await act('paying', 'pay', (err) => {
    if (err.code === 'order_expired') o.closed = true;
  });
}

async function cancel() {
  const o = state.order;
  if (!o || ORDER_RANK[o.status] >= 2 || state.cancelling || state.paying) return;
  await act('cancelling', 'cancel');
  void refreshSale(); // the unit is back on sale
}

function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

function saleTimeText(s, now) {
  if (s.admission === 'draw' && s.state !== 'ended') {
    if (now < Date.parse(s.entriesOpenAt)) return `Entries open in ${duration(Date.parse(s.entriesOpenAt) - now)}`;
    if (now < Date.parse(s.entriesCloseAt)) return `Draw in ${duration(Date.parse(s.entriesCloseAt) - now)}`;
  }
  if (s.state === 'upcoming') return `Starts in ${duration(Date.parse(s.startsAt) - now)}`;
  if (s.state === 'ended') return 'Ended';
  return s.endsAt ? `Ends in ${duration(Date.parse(s.endsAt) - now)}` : 'No end time';
}

function buyHintText(s) {
  if (orderHeld() || state.buying) return '';
  if (!s) return '';
  if (s.admission === 'draw') return drawHintText(s, Date.now());
  if (s.state === 'upcoming') return 'The button opens when the countdown ends.';
  if (s.admission === 'queue' && state.room) return '';
  if (s.state === 'sold_out') return 'Items come back if a buyer does not pay in time.';
  if (s.state === 'ended') return 'This sale is over.';
  if (!identityGiven()) return development ? 'Enter a user id to buy.' : 'Paste your buyer token to buy.';
  if (s.admission === 'queue') return 'This sale has a waiting room: join it, and the Buy button appears when it is your turn.';
  return '';
}

function drawHintText(s, now) {
  if (state.entry || state.entering) return '';
  if (now < Date.parse(s.entriesOpenAt)) return `Entries open at ${when(s.entriesOpenAt)}.`;
  if (now >= Date.parse(s.entriesCloseAt)) return 'Entries are closed.';
  if (!identityGiven()) return development ? 'Enter a user id to enter the draw.' : 'Paste your buyer token to enter the draw.';
  const first = s.stock === 1 ? 'the first entrant drawn gets an order' : `the first ${s.stock} entrants drawn get an order`;
  return `Entries close at ${when(s.entriesCloseAt)}; then the draw is made, and ${first}.`;
}

const ORDER_TEXT = {
  queued: ['Queued…', 'You are in line; your order is being confirmed.'],
  pending_payment: ['Waiting for payment', directPay
    ? 'Pay before the timer runs out to keep your item.'
    : 'Complete the payment with the payment provider before the timer runs out; this page updates by itself.'],
  paid: ['Paid', 'Thank you! Your order is paid.'],
  expired: ['Expired', 'The payment window closed, so the item went back on sale.'],
  cancelled: ['Cancelled', 'You cancelled this order, so the item went back on sale.'],
};

const DRAW_CLOSED_TEXT = { expired: 'The payment window closed.', cancelled: 'You cancelled this order.' };

function renderOrder(now) {
  const o = state.order;
  el.order.hidden = !o;
  if (!o) return;
  el.order.dataset.status = o.status;
  const [title, detail] = ORDER_TEXT[o.status];
  const pending = o.status === 'pending_payment';
  const overdue = pending && now >= o.expiresAt;
  setText(el.orderStatus, title);
  // A draw's unit does not go back on sale: the draw panel above says where it went.
  const drawClosed = drawSale() && (o.status === 'expired' || o.status === 'cancelled');
  setText(el.orderDetail, overdue ? 'Time is up; checking your order…' : drawClosed ? DRAW_CLOSED_TEXT[o.status] : detail);
  el.timer.hidden = !pending;
  setText(el.timer, pending ? duration(o.expiresAt - now) : '');
  el.pay.hidden = !directPay || !pending || o.closed;
  el.pay.disabled = state.paying || state.cancelling;
  setText(el.pay, state.paying ? 'Paying…' : 'Pay now');
  el.cancel.hidden = ORDER_RANK[o.status] >= 2 || o.closed;
  el.cancel.disabled = state.paying || state.cancelling;
  setText(el.cancel, state.cancelling ? 'Cancelling…' : 'Cancel order');
}

function renderHistory() {
  // The current order as the page follows it, the others as the server listed them.
  const rows = state.history.map((v) => `${ORDER_TEXT[state.order?.orderId === v.orderId ? state.order.status : v.status][0]} · `
    + `${v.qty} item${v.qty === 1 ? '' : 's'} · bought ${new Date(v.purchasedAt).toLocaleTimeString()}`);
  el.history.hidden = rows.length === 0;
  const key = rows.join('\n');
  if (el.orderList.dataset.shown === key) return;
  el.orderList.dataset.shown = key;
  el.orderList.replaceChildren(...rows.map((text) => Object.assign(document.createElement('li'), { textContent: text })));
}

// A price in minor units, in the currency's own format for the buyer's locale: EUR 1999 is €19.99, JPY 1999 ¥1,999.
function money(amount, currency) {
  const format = new Intl.NumberFormat(undefined, { style: 'currency', currency });
  return format.format(amount / 10 ** format.resolvedOptions().maximumFractionDigits);
}

function render() {
  const s = state.sale;
  const now = Date.now();
  setText(el.name, s ? s.name : state.saleMissing ? 'No such sale' : 'Loading…');
  document.title = s ? `${s.name} · Flash sale` : 'Flash sale';
  el.badge.hidden = !s;
  el.badge.dataset.state = s?.state ?? '';
  setText(el.badge, s ? SALE_STATES[s.state] : '');
  setText(el.countdown, s ? saleTimeText(s, now) : '–');
  setText(el.price, s?.price != null ? money(s.price, s.currency) : '–');
  setText(el.stock, s ? `${s.available} of ${s.stock} left` : '–');
  // A queue sale's Buy button appears once admitted (and stays with the order it made).
  el.buy.hidden = drawSale() || (queueSale() && state.room?.view.state !== 'admitted' && !orderHeld() && !state.buying);
  el.buy.disabled = !canBuy();
  setText(el.buy, state.buying ? 'Buying…' : 'Buy now');
  setText(el.buyHint, buyHintText(s));
  const inFlight = state.buying || state.joining || state.entering || (orderHeld() && state.order.status !== 'paid') || state.room?.view.state === 'admitted';
  el.userId.disabled = inFlight;
  el.token.disabled = inFlight;
  const message = state.saleMissing ? `There is no sale called "${saleId}".` : state.message || (state.offline ? MESSAGES.network : '');
  el.message.hidden = message === '';
  setText(el.message, message);
  renderRoom(now);
  renderDraw(now);
  renderOrder(now);
  renderHistory();
}

// The countdowns tick on the client; when the start passes, ask at once rather than at the next poll.
let startAsked = false;
function tick() {
  const s = state.sale;
  if (s?.state === 'upcoming' && Date.now() >= Date.parse(s.startsAt) && !startAsked) {
    startAsked = true;
    void refreshSale();
  }
  // The pass ran out here: the server says whether it bought (elsewhere) or expired.
  const r = state.room;
  if (r?.view.state === 'admitted' && !r.expiryAsked && Date.now() >= Date.parse(r.view.passExpiresAt)) {
    r.expiryAsked = true;
    void refreshRoom(r);
  }
  render();
}

function changeIdentity() {
  // Someone else at the keyboard: a finished order belongs to the previous buyer. (The fields are
  // disabled while an order is queued or waiting for payment.)
  if (state.order && ORDER_RANK[state.order.status] === 2) state.order = null;
  state.history = [];
  ordersAsked++; // an answer still on its way is the previous buyer's
  state.room = null; // the previous buyer's place (its stream or poll stops)
  roomAsked++;
  state.entry = null; // the previous buyer's entry, likewise
  entryAsked++;
  state.message = '';
  render();
}

el.buy.addEventListener('click', () => void buy());
el.join.addEventListener('click', () => void join());
el.enter.addEventListener('click', () => void enter());
el.pay.addEventListener('click', () => void pay());
el.cancel.addEventListener('click', () => void cancel());
el.userId.addEventListener('input', changeIdentity);
el.token.addEventListener('input', changeIdentity);
el.userId.value = localStorage.getItem('flashsale.userId') ?? '';
el.userId.addEventListener('change', () => {
  localStorage.setItem('flashsale.userId', el.userId.value.trim());
  void loadOrders();
  void loadRoom();
  void loadEntry();
});
el.token.addEventListener('change', () => {
  void loadOrders();
  void loadRoom();
  void loadEntry();
});
setInterval(tick, 250);
render();
void pollSale();
void loadOrders();
