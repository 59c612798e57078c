// The live view of one sale (the one in the address's hash): GET /api/sales/:id/live every second,
// its units, figures, waiting room or draw, and this instance's purchase outcomes; and ending it.
import { addSample, makeChart, purchaseRate, UNITS } from './admin-chart.js';
import { buyerPage, loadSales, markSelected, SALE_STATES, when } from './admin-sales.js';
import { $, api, failed, setText, show, signedIn } from './admin-session.js';

const POLL_MS = 1000;
const live = { saleId: '', sale: null, timer: 0, asked: 0 };

function duration(ms) {
  if (ms === null) return 'none waiting';
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
}

function renderSaleHead(sale) {
  live.sale = sale;
  setText('live-name', sale.name);
  setText('live-id', sale.id);
  $('live-page').href = buyerPage(sale.id);
  const badge = $('live-state');
  badge.dataset.state = sale.state;
  setText('live-state', SALE_STATES[sale.state]);
  $('end-sale').hidden = sale.state === 'ended';
}

// A queue sale's waiting room; other sales have none (`room` is null).
function renderRoom(room) {
  $('room').hidden = room === null;
  if (room === null) return;
  const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;
  setText('room-waiting', String(room.waiting));
  setText('room-joined', room.open ? `${plural(room.joined, 'buyer', 'buyers')} joined` : `${plural(room.joined, 'buyer', 'buyers')} joined · places drawn at the start`);
  setText('room-admitted', String(room.admitted));
  setText('room-outstanding', `${plural(room.passesOutstanding, 'pass', 'passes')} can still buy`);
  setText('room-used', String(room.passesUsed));
  setText('room-expired', String(room.passesExpired));
  setText('room-no-show', room.noShowRate === null ? '–' : `${(room.noShowRate * 100).toFixed(1)}%`);
}

// A draw's entrants as Postgres records them; other sales have none (`draw` is null).
function renderDraw(draw, sale) {
  $('draw').hidden = draw === null;
  if (draw === null) return;
  setText('draw-entries', String(draw.entries));
  setText('draw-made', draw.drawn ? `drawn ${when(draw.drawnAt)}` : `draw at ${when(sale.entriesCloseAt)}`);
  setText('draw-awarded', String(draw.awarded));
  setText('draw-waiting', String(draw.waiting));
  setText('draw-backfill', draw.over ? 'backfill over' : draw.drawn ? `next in line until ${when(sale.backfillUntil)}` : 'not drawn yet');
  setText('draw-lost', String(draw.lost));
}

function renderLive(n) {
  renderSaleHead(n.sale);
  renderRoom(n.room);
  renderDraw(n.draw, n.sale);
  const r = n.reconciliation;
  for (const u of UNITS) setText(`live-${u}`, String(r[u]));
  addSample(n);
  setText('purchase-rate', purchaseRate());
  setText('purchases', `${n.purchases} accepted so far`);
  setText('writer-lag', duration(n.writerLagMs));
  const l = n.lateness;
  setText('lateness', l.closes === 0 ? 'no closes' : `p50 ${duration(l.p50Ms)} · p99 ${duration(l.p99Ms)}`);
  setText('lateness-closes', `${l.closes} order${l.closes === 1 ? '' : 's'} closed unpaid in the last minute`);
  const rec = $('reconciliation');
  rec.dataset.holds = String(r.holds);
  setText('reconciliation', r.holds ? 'Holds' : 'Violated');
  const sum = r.available + r.queued + r.pending + r.paid + r.restoring;
  setText('reconciliation-detail', `${r.available} available + ${r.queued} queued + ${r.pending} pending + ${r.paid} paid + ${r.restoring} restoring = ${sum} of ${r.total}`);
  const outcomes = Object.entries(n.thisInstance.outcomes).sort(([a], [b]) => a.localeCompare(b));
  const rows = outcomes.length > 0 ? outcomes : [['no purchases yet', 0]];
  $('outcomes').replaceChildren(...rows.map(([outcome, count]) => {
    const tr = document.createElement('tr');
    tr.dataset.outcome = outcome;
    tr.append(...[outcome, String(count)].map((text) => Object.assign(document.createElement('td'), { textContent: text })));
    return tr;
  }));
}

async function pollLive(saleId) {
  const seq = ++live.asked;
  try {
    const n = await api('GET', `/api/sales/${encodeURIComponent(saleId)}/live`);
    // A late answer for a sale no longer shown, or older than one already drawn, is dropped.
    if (live.saleId !== saleId || seq !== live.asked) return;
    renderLive(n);
    show('message', '');
  } catch (err) {
    if (err.code === 'sale_not_found' || err.code === 'invalid_id') {
      stopLive();
      show('message', `There is no sale called "${saleId}".`);
    } else {
      failed(err);
    }
  }
}

export function stopLive() {
  clearInterval(live.timer);
  live.saleId = '';
  live.sale = null;
  live.asked++;
  $('live').hidden = true;
}

function startLive(saleId) {
  stopLive();
  live.saleId = saleId;
  $('live').hidden = false;
  $('room').hidden = true;
  $('draw').hidden = true;
  for (const u of UNITS) setText(`live-${u}`, '–');
  makeChart();
  void pollLive(saleId);
  live.timer = setInterval(() => void pollLive(saleId), POLL_MS);
}

/** Shows the sale the address's hash names (none: closes the view), once signed in. */
export function openFromHash() {
  const saleId = location.hash.slice(1);
  if (!signedIn() || $('console').hidden || saleId === live.saleId) return;
  if (saleId) startLive(saleId);
  else stopLive();
  markSelected(saleId);
}

export async function endSale() {
  const sale = live.sale;
  if (!sale || !confirm(`End "${sale.name}" now? No one can buy from it after this; pending orders stay payable until their deadline.`)) return;
  $('end-sale').disabled = true;
  try {
    const ended = await api('POST', `/api/sales/${encodeURIComponent(sale.id)}/end`);
    live.asked++; // a poll asked before this answer may read the sale from before the end: dropped
    renderSaleHead(ended);
    void loadSales();
  } catch (err) {
    failed(err);
  } finally {
    $('end-sale').disabled = false;
  }
}
