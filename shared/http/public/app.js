// The buyer's page: polls the sale, and by its admission lets the buyer buy at once (first come,
// buy.js), join a waiting room and buy once admitted (queue.js), or enter a draw (draw.js); then
// follows the order to paid, expired or cancelled (order.js). Pushed changes come as events, polled
// if that fails (follow.js). All state is in `state` (state.js); render() here draws all of it.
import { networkMessage } from './api.js';
import { buy, renderBuy } from './buy.js';
import { pageModes } from './mode.js';
import './modes.js';
import { cancel, forgetOrders, loadOrders, pay, renderHistory, renderOrder } from './order.js';
import { checkStart, pollSale, renderSale } from './sale.js';
import { renderSizes, sizeMessage } from './sizes.js';
import { el, orderHeld, saleId, setRender, state } from './state.js';
import { setText } from './text.js';

// Each admission mode's part of the page (mode.js, registered by modes.js): its flow (follow.js
// admission) and its rendering, each acting only on a sale of its own mode (the flow's `active`),
// so none is chosen here by name.
const MODES = pageModes();

function render() {
  const now = Date.now();
  renderSale(now);
  renderSizes();
  renderBuy();
  const inFlight =
    state.buying || (orderHeld() && state.order.status !== 'paid') || MODES.some((mode) => mode.holdsIdentity?.());
  el.userId.disabled = inFlight;
  el.emailVerified.disabled = inFlight;
  el.token.disabled = inFlight;
  const message = state.saleMissing
    ? `There is no sale called "${saleId}".`
    : state.message || sizeMessage() || (state.offline ? networkMessage : '');
  el.message.hidden = message === '';
  setText(el.message, message);
  for (const mode of MODES) mode.render(now);
  renderOrder(now);
  renderHistory();
}

function tick() {
  checkStart();
  for (const mode of MODES) mode.tick?.();
  render();
}

// The buyer's place or entry, once the sale says which mode it is in (on load, or for a new buyer):
// only the sale's own mode's flow loads anything.
function loadAdmission() {
  for (const mode of MODES) void mode.flow.load();
}

function changeIdentity() {
  // Someone else at the keyboard: what the page followed belongs to the previous buyer.
  forgetOrders();
  for (const mode of MODES) mode.flow.forget();
  state.message = '';
  state.refusedSize = null;
  render();
}

function identityChanged() {
  void loadOrders();
  loadAdmission();
}

setRender(render);
el.buy.addEventListener('click', () => void buy());
for (const mode of MODES) mode.button?.addEventListener('click', () => void mode.flow.start());
el.pay.addEventListener('click', () => void pay());
el.cancel.addEventListener('click', () => void cancel());
el.userId.addEventListener('input', changeIdentity);
el.token.addEventListener('input', changeIdentity);
el.userId.value = localStorage.getItem('flashsale.userId') ?? '';
el.userId.addEventListener('change', () => {
  localStorage.setItem('flashsale.userId', el.userId.value.trim());
  identityChanged();
});
el.token.addEventListener('change', identityChanged);
setInterval(tick, 250);
render();
void pollSale(loadAdmission);
void loadOrders();
