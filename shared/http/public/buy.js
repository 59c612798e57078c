// The purchase: Buy sends one, with the waiting room's pass on a queue sale or a purchase token on a
// pow sale, and the order it makes becomes the buyer's current order. A draw has no Buy button: its
// orders come from the draw.
import { api, plain } from './api.js';
import { drawHintText } from './draw.js';
import { takeOrder } from './order.js';
import { passLive, room } from './queue.js';
import { refreshSale } from './sale.js';
import { buyerKey, buyerToken, dropRefusedToken, identityGiven, purchaseToken, spendPurchaseToken } from './tokens.js';
import { development, drawSale, el, orderHeld, queueSale, render, salePath, state, TOKEN_HEADER } from './state.js';
import { setText } from './text.js';

const canBuy = () => state.sale?.state === 'open' && !state.buying && !orderHeld() && identityGiven() && !drawSale() && (!queueSale() || passLive());

export async function buy() {
  if (!canBuy()) return;
  // Disabled before the first await: a second click cannot send a second purchase.
  state.buying = true;
  state.message = '';
  state.order = null;
  render();
  const buyer = buyerKey();
  try {
    const token = await buyerToken();
    const r = queueSale() ? state.room : null;
    const headers = r ? { [TOKEN_HEADER]: r.view.pass }
      : state.sale.challenge === 'pow' ? { [TOKEN_HEADER]: await purchaseToken(token) } : {};
    const { orderId } = await api('POST', salePath('/purchases'), { token, body: { qty: 1 }, headers });
    if (r) room.apply(r, { ...r.view, state: 'used', pass: undefined });
    else spendPurchaseToken(buyer);
    takeOrder(orderId, token);
  } catch (err) {
    dropRefusedToken(buyer, err);
    if (err.code === 'admission_pass_invalid' && state.room) void room.refresh(state.room); // used elsewhere, or run out
    state.message = plain(err);
  } finally {
    state.buying = false;
    render();
  }
  void refreshSale(); // the stock moved, or a refusal says our view of the sale is stale
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
  if (s.buyers === 'verified-email') return 'This sale is only for buyers whose email address is verified.';
  return '';
}

export function renderBuy() {
  // A queue sale's Buy button appears once admitted (and stays with the order it made).
  el.buy.hidden = drawSale() || (queueSale() && state.room?.view.state !== 'admitted' && !orderHeld() && !state.buying);
  el.buy.disabled = !canBuy();
  setText(el.buy, state.buying ? 'Buying…' : 'Buy now');
  setText(el.buyHint, buyHintText(state.sale));
}
