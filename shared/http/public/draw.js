// A draw (admission: draw): the buyer enters while entries are open and follows the entry to won
// (whose order then follows as a bought one), waiting (next in line for a unit that comes back), or
// lost; with the facts that let anyone check the draw. Its part of the page (mode.js) is drawPage,
// at the end.
import { admission } from './follow.js';
import { takeOrder } from './order.js';
import { entryBody, sizeHint, sizeReady } from './sizes.js';
import { identityGiven } from './tokens.js';
import { development, el, orderHeld, salePath, state } from './state.js';
import { duration, plural, setText, when } from './text.js';

const drawSale = () => state.sale?.admission === 'draw';

// The stream ends after won or lost.
const ENTRY_RANK = { entered: 0, waiting: 1, won: 2, lost: 2 };

const entriesOpen = (now) =>
  drawSale() && now >= Date.parse(state.sale.entriesOpenAt) && now < Date.parse(state.sale.entriesCloseAt);
const canEnter = () => entriesOpen(Date.now()) && !state.entering && !state.entry && identityGiven() && sizeReady();

const entry = admission({
  slot: 'entry',
  busy: 'entering',
  path: 'entries',
  active: drawSale,
  allowed: canEnter,
  rank: ENTRY_RANK,
  until: 2,
  // On a sale of several variants, the size wanted and an optional second choice.
  body: entryBody,
  create: (token) => ({ token, view: null }),
  moved: (e, view) => {
    // Won: the draw's order is the buyer's order, followed as one just bought (unless a reload's
    // list of orders has it already).
    if (view.state === 'won' && state.entry === e && state.order?.orderId !== view.orderId)
      takeOrder(view.orderId, e.token);
  },
});

/** A won entry whose order has closed since (expired or cancelled): its unit went to the next in line. */
const orderClosed = (v) =>
  v.state === 'won' &&
  state.order?.orderId === v.orderId &&
  (state.order.status === 'expired' || state.order.status === 'cancelled');

function entryText(v, s, now) {
  const ranked = `Drawn at rank ${v.drawRank} of ${v.entries}`;
  switch (v.state) {
    case 'entered':
      return now < Date.parse(s.entriesCloseAt)
        ? [
            "You're in the draw",
            `${plural(v.entries, 'entry', 'entries')}; the draw is made at ${when(s.entriesCloseAt)}. Keep this page open, or come back then.`,
          ]
        : [
            "You're in the draw",
            `Entries are closed (${plural(v.entries, 'entry', 'entries')}); the draw is being made…`,
          ];
    case 'won': {
      // The order may have closed since: its unit then goes to the next in line (not back on sale), until backfillUntil.
      const gone =
        now < Date.parse(s.backfillUntil)
          ? 'so its unit went to the next in line'
          : 'and the draw is over: its unit is not sold again';
      return orderClosed(v)
        ? [
            'You were drawn',
            `${ranked}; your order was ${state.order.status === 'expired' ? 'not paid in time' : 'cancelled'}, ${gone}.`,
          ]
        : [
            'You were drawn!',
            `${ranked}: your order is below. Pay before its timer runs out, or it goes to the next in line.`,
          ];
    }
    case 'waiting':
      return [
        `Drawn at rank ${v.drawRank}; not yet`,
        `Units that come back (an order not paid in time, or cancelled) go to the next in line until ${when(s.backfillUntil)}. Keep this page open.`,
      ];
    default:
      return ['Not drawn this time', `${ranked}; no unit came back to your place before ${when(s.backfillUntil)}.`];
  }
}

/** The hint under the (hidden) Buy button on a draw: when entries open and close, and what the draw gives. */
function drawHintText(s, now) {
  if (state.entry || state.entering) return '';
  if (now < Date.parse(s.entriesOpenAt)) return `Entries open at ${when(s.entriesOpenAt)}.`;
  if (now >= Date.parse(s.entriesCloseAt)) return 'Entries are closed.';
  if (!identityGiven())
    return development ? 'Enter a user id to enter the draw.' : 'Paste your buyer token to enter the draw.';
  const size = sizeHint('enter the draw');
  if (size) return size;
  const first =
    s.stock === 1 ? 'the first entrant drawn gets an order' : `the first ${s.stock} entrants drawn get an order`;
  return `Entries close at ${when(s.entriesCloseAt)}; then the draw is made, and ${first}.`;
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
  el.secretRow.hidden = !e?.view.secret;
  setText(el.secret, e?.view.secret ?? '');
  setText(
    el.drawCheck,
    s.seed === null
      ? 'The seed that orders the draw is revealed once the draw is made. Its hash is published now, so it cannot be picked once the entries are known.'
      : 'To check: sha256(seed) is the hash above; each ticket is sha256(sale id + ":" + buyer + ":" + that entry\'s secret), so yours is sha256 of your id and your secret above; the draw order is every ticket sorted by sha256(seed + ":" + ticket), and the first in that order get the units.',
  );
  el.recordLine.hidden = s.seed === null;
  const record = salePath('/draw');
  if (el.record.getAttribute('href') !== record) el.record.setAttribute('href', record);
}

/** The sale's countdown while entries are to open or open (undefined after: the generic one). */
function drawTimeText(s, now) {
  if (s.state === 'ended') return undefined;
  if (now < Date.parse(s.entriesOpenAt)) return `Entries open in ${duration(Date.parse(s.entriesOpenAt) - now)}`;
  if (now < Date.parse(s.entriesCloseAt)) return `Draw in ${duration(Date.parse(s.entriesCloseAt) - now)}`;
  return undefined;
}

export const drawPage = {
  name: 'draw',
  flow: entry,
  button: el.enter,
  render: renderDraw,
  holdsIdentity: () => state.entering,
  // No Buy button: the draw's orders come from the draw.
  buyHidden: () => true,
  mayBuy: () => false,
  // The entry names the size wanted, and a second choice if the first is gone.
  secondChoice: true,
  sizeSent: () => state.entry !== null,
  hint: drawHintText,
  timeText: drawTimeText,
  // Entered: the entry took the purchase token; closed: nothing left to spend one on.
  challengeAhead: (s, now) => !state.entry && now < Date.parse(s.entriesCloseAt),
  // A draw's unit does not go back on sale: the draw panel above says where it went.
  closedOrderText: { expired: 'The payment window closed.', cancelled: 'You cancelled this order.' },
};
