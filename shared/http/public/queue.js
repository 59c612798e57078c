// A sale with a waiting room (admission: queue): the buyer joins (with a purchase token on a pow
// sale), follows their place, and once admitted the pass buys, as the token the purchase carries.
// Its part of the page (mode.js) is queuePage, at the end.
import { admission } from './follow.js';
import { identityGiven } from './tokens.js';
import { el, orderHeld, state, TOKEN_HEADER } from './state.js';
import { duration, setText } from './text.js';

const queueSale = () => state.sale?.admission === 'queue';

// sold_out goes back to waiting when units return; the stream ends once admitted.
const ROOM_RANK = { waiting: 0, sold_out: 0, admitted: 1, used: 2, expired: 2, ended: 2 };

// A sold-out room can be joined: units come back from unpaid orders, and admission resumes.
const canJoin = () =>
  queueSale() && state.sale.state !== 'ended' && !state.joining && !state.room && !orderHeld() && identityGiven();
const passLive = () => state.room?.view.state === 'admitted' && Date.parse(state.room.view.passExpiresAt) > Date.now();

const room = admission({
  slot: 'room',
  busy: 'joining',
  path: 'queue',
  active: queueSale,
  allowed: canJoin,
  rank: ROOM_RANK,
  until: 1,
  create: (token) => ({ token, view: null, startAhead: null, expiryAsked: false }),
  // Within the line, a place further back is an older view.
  behind: (old, view) =>
    ROOM_RANK[view.state] === 0 && old.position !== null && view.position !== null && view.position > old.position,
  moved: (r, view) => {
    // The progress bar's baseline: the most people this page has seen ahead of the buyer (their
    // place is fixed once the room opens, so this is where they started, or where this page came in).
    if (view.ahead !== null && (r.startAhead === null || view.ahead > r.startAhead)) r.startAhead = view.ahead;
  },
  refused: (err, r) => {
    if (err.code === 'not_in_queue' && state.room === r) state.room = null; // the room was cleared
  },
});

/** The pass ran out here: the server says whether it bought (elsewhere) or expired. */
function checkPass() {
  const r = state.room;
  if (r?.view.state === 'admitted' && !r.expiryAsked && Date.now() >= Date.parse(r.view.passExpiresAt)) {
    r.expiryAsked = true;
    void room.refresh(r);
  }
}

function waitText(seconds) {
  if (seconds === 0) return 'any moment';
  return seconds < 60 ? `about ${seconds} s` : `about ${Math.ceil(seconds / 60)} min`;
}

const ROOM_TEXT = {
  upcoming: [
    'You are in the waiting room',
    'Places are drawn at random when the sale opens: everyone who joins before then has the same chance. Keep this page open.',
  ],
  waiting: [null, 'Keep this page open: the Buy button appears here when it is your turn.'],
  admitted: ['It is your turn!', 'Buy before your pass runs out; after that it goes to the next in line.'],
  used: ['Your pass was used', 'You bought with it; your order is below.'],
  expired: ['Your turn has passed', 'Your pass ran out before you bought, so the next buyer in line was let in.'],
  sold_out: [
    'Sold out for now',
    'Every item is claimed. You keep your place: if a buyer does not pay in time, the line moves again.',
  ],
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
  setText(
    el.queueProgressHint,
    !inLine
      ? ''
      : r.startAhead === 0
        ? 'You are next in line.'
        : `${moved} of the ${r.startAhead} ${r.startAhead === 1 ? 'person' : 'people'} ahead of you ${moved === 1 ? 'has' : 'have'} gone in.`,
  );
  const admitted = v.state === 'admitted';
  el.passCountdown.hidden = !admitted;
  setText(el.passCountdown, admitted ? `Your pass buys for ${duration(Date.parse(v.passExpiresAt) - now)}` : '');
}

export const queuePage = {
  name: 'queue',
  flow: room,
  button: el.join,
  render: renderRoom,
  tick: checkPass,
  holdsIdentity: () => state.joining || state.room?.view.state === 'admitted',
  // The Buy button appears once admitted (and stays with the order it made); only a live pass buys.
  buyHidden: () => state.room?.view.state !== 'admitted' && !orderHeld() && !state.buying,
  mayBuy: passLive,
  purchase: () => {
    const r = state.room;
    return (
      r && {
        headers: { [TOKEN_HEADER]: r.view.pass },
        bought: () => room.apply(r, { ...r.view, state: 'used', pass: undefined }),
        refused: (err) => {
          if (err.code === 'admission_pass_invalid' && state.room) void room.refresh(state.room); // used elsewhere, or run out
        },
      }
    );
  },
  // Before the start, the generic countdown hint; in the room, its panel speaks.
  hint: (s) =>
    s.state === 'upcoming'
      ? undefined
      : state.room
        ? ''
        : s.state === 'open' && identityGiven()
          ? 'This sale has a waiting room: join it, and the Buy button appears when it is your turn.'
          : undefined,
  // Joined: the join took the purchase token; the pass buys.
  challengeAhead: () => !state.room,
};
