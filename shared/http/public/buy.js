// The purchase: Buy sends one, with what the sale's admission mode gives it (a waiting room's pass)
// or a purchase token on a pow sale, and the chosen size on a sale of several (sizes.js); the order
// it makes becomes the buyer's current order. The mode's part of the page (mode.js) may hide Buy (a
// draw's orders come from the draw) or hold it back.
import { api, plain } from './api.js';
import { saleMode } from './mode.js';
import { takeOrder } from './order.js';
import { refreshSale } from './sale.js';
import { refusedSoldOut, sizeHint, sizeReady, variantBody } from './sizes.js';
import { buyerKey, buyerToken, dropRefusedToken, identityGiven, purchaseToken, spendPurchaseToken } from './tokens.js';
import { development, el, orderHeld, render, salePath, state, TOKEN_HEADER } from './state.js';
import { setText } from './text.js';

const canBuy = () =>
  state.sale?.state === 'open' &&
  !state.buying &&
  !orderHeld() &&
  identityGiven() &&
  sizeReady() &&
  (saleMode()?.mayBuy?.() ?? true);

export async function buy() {
  if (!canBuy()) return;
  // Disabled before the first await: a second click cannot send a second purchase.
  state.buying = true;
  state.message = '';
  state.refusedSize = null;
  state.order = null;
  render();
  const buyer = buyerKey();
  let gate = null; // the mode's own token for this purchase, if it gives one
  try {
    const token = await buyerToken();
    gate = saleMode()?.purchase?.() ?? null;
    const headers = gate
      ? gate.headers
      : state.sale.challenge === 'pow'
        ? { [TOKEN_HEADER]: await purchaseToken(token) }
        : {};
    const { orderId } = await api('POST', salePath('/purchases'), {
      token,
      body: { qty: 1, ...variantBody() },
      headers,
    });
    if (gate) gate.bought();
    else spendPurchaseToken(buyer);
    takeOrder(orderId, token);
  } catch (err) {
    dropRefusedToken(buyer, err);
    gate?.refused(err);
    // A size sold out is said with the sizes left (sizes.js), as the poll keeps them.
    state.message = refusedSoldOut(err) ? '' : plain(err);
  } finally {
    state.buying = false;
    render();
  }
  void refreshSale(); // the stock moved, or a refusal says our view of the sale is stale
}

function buyHintText(s) {
  if (orderHeld() || state.buying) return '';
  if (!s) return '';
  const mode = saleMode();
  const own = mode?.hint?.(s, Date.now());
  // A mode with nothing to say once its buyer may buy (an admitted pass) leaves the size's hint.
  if (own === '' && s.state === 'open' && (mode.mayBuy?.() ?? true)) return sizeHint();
  if (own !== undefined) return own;
  if (s.state === 'upcoming') return 'The button opens when the countdown ends.';
  if (s.state === 'sold_out') return 'Items come back if a buyer does not pay in time.';
  if (s.state === 'ended') return 'This sale is over.';
  if (!identityGiven()) return development ? 'Enter a user id to buy.' : 'Paste your buyer token to buy.';
  if (s.buyers === 'verified-email') return 'This sale is only for buyers whose email address is verified.';
  return sizeHint();
}

export function renderBuy() {
  el.buy.hidden = saleMode()?.buyHidden?.() ?? false;
  el.buy.disabled = !canBuy();
  setText(el.buy, state.buying ? 'Buying…' : 'Buy now');
  setText(el.buyHint, buyHintText(state.sale));
}
