// The live view of one sale (the one in the address's hash): GET /api/sales/:id/live every second,
// its units, figures, its variants (admin-variants.js), its admission mode's figures (admin-modes.js),
// and this instance's purchase outcomes; and ending it (pausing it and moving its end: admin-controls.js).
import { addSample, makeChart, purchaseRate, UNITS } from './admin-chart.js';
import { loadAudit, moveEnd, renderControls, setPaused } from './admin-controls.js';
import { LIVE_MODES } from './admin-modes.js';
import { renderVariants } from './admin-variants.js';
import { buyerPage, loadSales, markSelected, SALE_STATES } from './admin-sales.js';
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

// Each mode's figures in their panel; a sale of another mode has none (null): the panel is hidden.
function renderModes(n) {
  for (const mode of LIVE_MODES) {
    const figures = n[mode.key] ?? null;
    $(mode.key).hidden = figures === null;
    if (figures !== null) mode.render(figures, n.sale);
  }
}

function renderLive(n) {
  renderSaleHead(n.sale);
  renderControls(n);
  renderModes(n);
  renderVariants(n.variants, n.sale);
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
  setText(
    'reconciliation-detail',
    `${r.available} available + ${r.queued} queued + ${r.pending} pending + ${r.paid} paid + ${r.restoring} restoring = ${sum} of ${r.total}`,
  );
  const outcomes = Object.entries(n.thisInstance.outcomes).sort(([a], [b]) => a.localeCompare(b));
  const rows = outcomes.length > 0 ? outcomes : [['no purchases yet', 0]];
  $('outcomes').replaceChildren(
    ...rows.map(([outcome, count]) => {
      const tr = document.createElement('tr');
      tr.dataset.outcome = outcome;
      tr.append(
        ...[outcome, String(count)].map((text) => Object.assign(document.createElement('td'), { textContent: text })),
      );
      return tr;
    }),
  );
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
  for (const mode of LIVE_MODES) $(mode.key).hidden = true;
  $('variants').hidden = true;
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
  if (
    !sale ||
    !confirm(
      `End "${sale.name}" now? No one can buy from it after this; pending orders stay payable until their deadline.`,
    )
  )
    return;
  $('end-sale').disabled = true;
  try {
    const ended = await api('POST', `/api/sales/${encodeURIComponent(sale.id)}/end`);
    // A poll asked before this answer may have read the sale before the end: dropped, not shown over it.
    live.asked++;
    renderSaleHead(ended);
    renderControls({ sale: ended, paused: !$('paused-badge').hidden });
    void loadAudit(sale.id);
    void loadSales();
  } catch (err) {
    failed(err);
  } finally {
    $('end-sale').disabled = false;
  }
}

/** The controls act on the sale shown; none shown, they do nothing. */
export const pauseShown = (paused) => live.sale && void setPaused(live.sale, paused);
export const moveShownEnd = (event) => (live.sale ? void moveEnd(live.sale, event) : event.preventDefault());
