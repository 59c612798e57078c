// What every part of the buyer's page shares: its elements, what the HTML says about the
// deployment, and `state`. render() (app.js) draws all of the state, so every change anywhere is
// an assignment and a render().

export const $ = (id) => document.querySelector(`[data-testid="${id}"]`);
export const el = {
  name: $('sale-name'),
  badge: $('sale-state'),
  countdown: $('countdown'),
  price: $('price'),
  stock: $('stock'),
  userId: $('user-id'),
  emailVerified: $('email-verified'),
  token: $('token'),
  buy: $('buy'),
  buyHint: $('buy-hint'),
  message: $('message'),
  order: $('order'),
  orderStatus: $('order-status'),
  orderDetail: $('order-detail'),
  timer: $('payment-countdown'),
  pay: $('pay'),
  cancel: $('cancel'),
  history: $('orders'),
  orderList: $('order-list'),
  challenge: $('challenge'),
  sizes: $('sizes'),
  sizeChips: $('size-chips'),
  secondSizes: $('second-sizes'),
  secondSizeChips: $('second-size-chips'),
  join: $('join'),
  queue: $('queue'),
  queueStatus: $('queue-status'),
  queueDetail: $('queue-detail'),
  queueFacts: $('queue-facts'),
  queueAhead: $('queue-ahead'),
  queueWait: $('queue-wait'),
  queueProgress: $('queue-progress'),
  queueProgressHint: $('queue-progress-hint'),
  passCountdown: $('pass-countdown'),
  enter: $('enter'),
  draw: $('draw'),
  drawStatus: $('draw-status'),
  drawDetail: $('draw-detail'),
  fairness: $('fairness'),
  seedHash: $('draw-seed-hash'),
  seedRow: $('draw-seed-row'),
  seed: $('draw-seed'),
  ticketRow: $('draw-ticket-row'),
  ticket: $('draw-ticket'),
  secretRow: $('draw-secret-row'),
  secret: $('draw-secret'),
  drawCheck: $('draw-check'),
  recordLine: $('draw-record-line'),
  record: $('draw-record'),
};
export const TOKEN_HEADER = 'flashsale-purchase-token';

export const development = document.body.dataset.mode === 'development';
// Direct pay: the Pay button asks the API, which signs a payment event and takes it through the
// webhook path. Otherwise the payment provider confirms, and the poll shows "Paid".
export const directPay = document.body.dataset.pay === 'direct';
export const saleId = new URLSearchParams(location.search).get('sale') || 'demo';
/** This sale's API path, `tail` appended. */
export const salePath = (tail = '') => `/api/sales/${encodeURIComponent(saleId)}${tail}`;

export const state = {
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
  variant: null, // a sale of several variants: the sku chosen
  secondChoice: null, // a draw of several variants: the sku wanted if the first is gone (null: none)
  refusedSize: null, // the sku a purchase was refused as sold out, said until another is chosen
  message: '',
};

// The page's render() is app.js's, which imports every part: the parts reach it through here.
let draw = () => {};
export const setRender = (fn) => void (draw = fn);
export const render = () => draw();

// Queued, waiting for payment, or paid: one order per visit; an expired or cancelled one frees the button again.
export const orderHeld = () =>
  state.order !== null && state.order.status !== 'expired' && state.order.status !== 'cancelled';
