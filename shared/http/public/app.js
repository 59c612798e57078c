// The buyer's page: polls the sale, and by its admission lets the buyer buy at once (first come,
// buy.js), join a waiting room and buy once admitted (queue.js), or enter a draw (draw.js); then
// follows the order to paid, expired or cancelled (order.js). Pushed changes come as events, polled
// if that fails (follow.js). All state is in `state` (state.js); render() here draws all of it.
import { networkMessage } from './api.js';
import { buy, renderBuy } from './buy.js';
import { entry, renderDraw } from './draw.js';
import { cancel, forgetOrders, loadOrders, pay, renderHistory, renderOrder } from './order.js';
import { checkPass, renderRoom, room } from './queue.js';
import { checkStart, pollSale, renderSale } from './sale.js';
import { el, orderHeld, saleId, setRender, state } from './state.js';
import { setText } from './text.js';

function render() {
  const now = Date.now();
  renderSale(now);
  renderBuy();
  const inFlight = state.buying || state.joining || state.entering || (orderHeld() && state.order.status !== 'paid') || state.room?.view.state === 'admitted';
  el.userId.disabled = inFlight;
  el.emailVerified.disabled = inFlight;
  el.token.disabled = inFlight;
  const message = state.saleMissing ? `There is no sale called "${saleId}".` : state.message || (state.offline ? networkMessage : '');
  el.message.hidden = message === '';
  setText(el.message, message);
  renderRoom(now);
  renderDraw(now);
  renderOrder(now);
  renderHistory();
}

function tick() {
  checkStart();
  checkPass();
  render();
}

// The buyer's place or entry, once the sale says which mode it is in (on load, or for a new buyer).
function loadAdmission() {
  if (state.sale?.admission === 'queue') void room.load();
  if (state.sale?.admission === 'draw') void entry.load();
}

function changeIdentity() {
  // Someone else at the keyboard: what the page followed belongs to the previous buyer.
  forgetOrders();
  room.forget();
  entry.forget();
  state.message = '';
  render();
}

function identityChanged() {
  void loadOrders();
  loadAdmission();
}

setRender(render);
el.buy.addEventListener('click', () => void buy());
el.join.addEventListener('click', () => void room.start());
el.enter.addEventListener('click', () => void entry.start());
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
