// The operator's page: sign in with the admin token (kept in this tab's sessionStorage), list the
// sales, create one, and follow one live: GET /api/sales/:id/live every second, the last five
// minutes kept for the chart (uPlot, loaded by the page as the global `uPlot`).

const $ = (id) => document.querySelector(`[data-testid="${id}"]`);
const TOKEN_KEY = 'flashsale.adminToken';
const POLL_MS = 1000;
const SALES_POLL_MS = 5000;
const WINDOW_S = 5 * 60;
// Purchases/s over the last few seconds: steadier than one poll's difference.
const RATE_SPAN_S = 5;
const UNITS = ['available', 'queued', 'pending', 'paid', 'expired', 'cancelled'];
const COLORS = { available: '#067647', queued: '#b54708', pending: '#1570ef', paid: '#6941c6', expired: '#d92d20', cancelled: '#667085' };
const SALE_STATES = { upcoming: 'Upcoming', open: 'Open', sold_out: 'Sold out', ended: 'Ended' };

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let token = sessionStorage.getItem(TOKEN_KEY) ?? '';

async function api(method, path, body) {
  const headers = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store' });
  } catch {
    throw new ApiError(0, 'network', 'Cannot reach the server; retrying…');
  }
  const data = await res.json().catch(() => null);
  if (!res.ok) throw new ApiError(res.status, data?.error ?? `http_${res.status}`, data?.message ?? `The server answered ${res.status}.`);
  return data;
}

const refused = (err) => err.status === 401 || err.status === 403;

function show(testId, text) {
  const node = $(testId);
  node.hidden = !text;
  if (node.textContent !== text) node.textContent = text;
}

function setText(testId, text) {
  const node = $(testId);
  if (node.textContent !== text) node.textContent = text;
}

// A refused token ends the session: the page asks for the token again and says why.
function signOut(reason = '') {
  token = '';
  sessionStorage.removeItem(TOKEN_KEY);
  stopLive();
  $('console').hidden = true;
  $('sign-out').hidden = true;
  $('sign-in').hidden = false;
  show('message', reason);
}

function failed(err) {
  if (refused(err)) signOut(err.message);
  else show('message', err.message);
}

// --- sales list ---------------------------------------------------------------------------------

const when = (iso) => (iso ? new Date(iso).toLocaleString() : '—');

// Minor units in the currency's own format (EUR 1999 is €19.99, JPY 1999 ¥1,999).
function money(amount, currency) {
  const format = new Intl.NumberFormat(undefined, { style: 'currency', currency });
  return format.format(amount / 10 ** format.resolvedOptions().maximumFractionDigits);
}

function renderSales(sales) {
  $('sales-empty').hidden = sales.length > 0;
  const selected = location.hash.slice(1);
  $('sales').replaceChildren(...sales.map((s) => {
    const row = document.createElement('tr');
    row.dataset.testid = 'sale-row';
    row.dataset.sale = s.id;
    row.classList.toggle('selected', s.id === selected);
    const link = Object.assign(document.createElement('a'), { href: `#${s.id}`, textContent: s.name, title: s.id });
    const price = s.price == null ? '—' : money(s.price, s.currency);
    const cells = [link, SALE_STATES[s.state], price, `${s.available} of ${s.stock}`, s.pending, s.paid, s.expired, s.cancelled, when(s.startsAt), when(s.endsAt)];
    row.append(...cells.map((c, i) => {
      const td = document.createElement('td');
      if (i === 1) td.dataset.state = s.state;
      td.append(c instanceof Node ? c : String(c));
      return td;
    }));
    return row;
  }));
}

// The newest SALES_PAGE sales, and a page more for each click on "More sales": every refresh reads
// again as many pages as were asked for.
const SALES_PAGE = 50;
let salesPages = 1;

async function fetchSales() {
  const sales = [];
  let next = null;
  for (let page = 0; page < salesPages; page++) {
    const answer = await api('GET', `/api/sales?limit=${SALES_PAGE}${next ? `&before=${encodeURIComponent(next)}` : ''}`);
    sales.push(...answer.sales);
    next = answer.next;
    if (!next) break;
  }
  return { sales, next };
}

async function loadSales() {
  try {
    const { sales, next } = await fetchSales();
    renderSales(sales);
    $('sales-more').hidden = next === null;
    if (!$('console').hidden || !token) return sales;
    // The token works: keep it for this tab.
    sessionStorage.setItem(TOKEN_KEY, token);
    $('sign-in').hidden = true;
    $('console').hidden = false;
    $('sign-out').hidden = false;
    show('message', '');
    openFromHash();
    return sales;
  } catch (err) {
    failed(err);
    return null;
  }
}

// --- live view ----------------------------------------------------------------------------------

const live = { saleId: '', sale: null, timer: 0, chart: null, data: null, samples: [], asked: 0 };

function duration(ms) {
  if (ms === null) return 'none waiting';
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
}

function makeChart() {
  const box = $('chart');
  live.chart?.destroy();
  live.data = [[], ...UNITS.map(() => [])];
  live.chart = new uPlot({
    width: Math.max(320, box.clientWidth), height: 260,
    scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
    // Units move in steps (a purchase, a close): drawn as steps, not as slopes between samples.
    series: [{}, ...UNITS.map((u) => ({ label: u, stroke: COLORS[u], width: 2, points: { show: false }, paths: uPlot.paths.stepped({ align: 1 }) }))],
    axes: [{}, { size: 60 }],
    legend: { live: false },
  }, live.data, box);
}

function addSample(n) {
  const t = Date.parse(n.at) / 1000;
  live.samples.push({ t, purchases: n.purchases });
  live.data[0].push(t);
  UNITS.forEach((u, i) => live.data[i + 1].push(n.reconciliation[u]));
  // Keep the window: drop what fell out of it from the front of every series.
  let old = 0;
  while (old < live.data[0].length && live.data[0][old] < t - WINDOW_S) old++;
  if (old > 0) live.data.forEach((series) => series.splice(0, old));
  while (live.samples.length > 0 && live.samples[0].t < t - WINDOW_S) live.samples.shift();
  live.chart.setData(live.data);
  $('chart').dataset.points = String(live.data[0].length);
}

function purchaseRate() {
  const last = live.samples[live.samples.length - 1];
  const first = live.samples.find((s) => s.t >= last.t - RATE_SPAN_S) ?? last;
  if (last === first) return '–';
  return `${((last.purchases - first.purchases) / (last.t - first.t)).toFixed(1)}/s`;
}

function renderSaleHead(sale) {
  live.sale = sale;
  setText('live-name', sale.name);
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

function stopLive() {
  clearInterval(live.timer);
  live.saleId = '';
  live.sale = null;
  live.asked++;
  $('live').hidden = true;
}

function startLive(saleId) {
  stopLive();
  live.saleId = saleId;
  live.samples = [];
  $('live').hidden = false;
  $('room').hidden = true;
  $('draw').hidden = true;
  for (const u of UNITS) setText(`live-${u}`, '–');
  makeChart();
  void pollLive(saleId);
  live.timer = setInterval(() => void pollLive(saleId), POLL_MS);
}

function openFromHash() {
  const saleId = location.hash.slice(1);
  if (!token || $('console').hidden || saleId === live.saleId) return;
  if (saleId) startLive(saleId);
  else stopLive();
  for (const row of document.querySelectorAll('[data-testid="sale-row"]')) row.classList.toggle('selected', row.dataset.sale === saleId);
}

async function endSale() {
  const sale = live.sale;
  if (!sale || !confirm(`End "${sale.name}" now? No one can buy from it after this; pending orders stay payable until their deadline.`)) return;
  $('end-sale').disabled = true;
  try {
    renderSaleHead(await api('POST', `/api/sales/${encodeURIComponent(sale.id)}/end`));
    void loadSales();
  } catch (err) {
    failed(err);
  } finally {
    $('end-sale').disabled = false;
  }
}

// --- create -------------------------------------------------------------------------------------

// Empty fields are left out (the server's defaults apply); the server checks everything else and
// its refusal is shown as it says it.
function saleDefinition(form) {
  const f = new FormData(form);
  const body = {};
  for (const key of ['id', 'name', 'currency']) if (f.get(key).trim()) body[key] = f.get(key).trim();
  for (const key of ['stock', 'price', 'perUserLimit', 'maxPerOrder', 'paymentWindowSeconds', 'admitRatePerSecond', 'admitOverbook', 'passSeconds']) {
    if (f.get(key) !== '') body[key] = Number(f.get(key));
  }
  for (const key of ['startsAt', 'endsAt', 'entriesOpenAt', 'entriesCloseAt', 'backfillUntil']) if (f.get(key)) body[key] = new Date(f.get(key)).toISOString();
  if (f.get('admission') !== 'first-come') body.admission = f.get('admission');
  return body;
}

async function createSale(event) {
  event.preventDefault();
  const form = event.currentTarget;
  const button = $('create-button');
  button.disabled = true;
  show('create-message', '');
  try {
    const sale = await api('POST', '/api/sales', saleDefinition(form));
    form.reset();
    await loadSales();
    location.hash = sale.id;
  } catch (err) {
    if (refused(err)) failed(err);
    else show('create-message', err.message);
  } finally {
    button.disabled = false;
  }
}

// --- wiring -------------------------------------------------------------------------------------

$('token-form').addEventListener('submit', (event) => {
  event.preventDefault();
  token = $('token').value.trim();
  $('token').value = '';
  void loadSales();
});
$('sign-out').addEventListener('click', () => signOut());
$('sales-more').addEventListener('click', () => {
  salesPages++;
  void loadSales();
});
$('create-form').addEventListener('submit', (event) => void createSale(event));
$('end-sale').addEventListener('click', () => void endSale());
$('close-live').addEventListener('click', () => {
  location.hash = '';
});
window.addEventListener('hashchange', openFromHash);
window.addEventListener('resize', () => live.chart?.setSize({ width: Math.max(320, $('chart').clientWidth), height: 260 }));
setInterval(() => {
  if (token && !$('console').hidden) void loadSales();
}, SALES_POLL_MS);

if (token) void loadSales();
else signOut();
