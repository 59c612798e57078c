// A live sale's controls beside its view: pause and resume, a new end, each variant's restock and
// removal, and the audit trail of the sale (who did what, when), read again after each action and
// every few seconds.
import { $, api, failed, refused, setText, show } from './admin-session.js';

const AUDIT_EVERY_MS = 5000;
const state = { saleId: '', auditAt: 0, asked: 0 };

const ACTIONS = {
  'sale.create': 'created',
  'sale.pause': 'paused',
  'sale.resume': 'resumed',
  'sale.end-time': 'moved the end',
  'sale.restock': 'restocked',
  'sale.remove': 'removed unsold units:',
  'sale.end': 'ended',
  'refund.mark': 'marked a refund paid back',
};

// A refusal of the action itself (an ended sale, a time gone) is said; a refused token ends the session.
const said = (err) => (refused(err) && err.code !== 'ended' ? failed(err) : show('message', err.message));

/** The controls of the sale the live view shows, from its poll (`paused` is Postgres's record). */
export function renderControls(n) {
  const ended = n.sale.state === 'ended';
  $('paused-badge').hidden = !n.paused;
  $('pause-sale').hidden = ended || n.paused;
  $('resume-sale').hidden = !n.paused;
  $('end-time-form').hidden = ended;
  renderStockForms(n.sale, ended);
  if (state.saleId !== n.sale.id || Date.now() - state.auditAt >= AUDIT_EVERY_MS) void loadAudit(n.sale.id);
}

function describe(entry) {
  const what = ACTIONS[entry.action] ?? entry.action;
  const to = entry.detail?.to ? ` to ${new Date(entry.detail.to).toLocaleString()}` : '';
  const units = entry.detail?.sku ? ` ${entry.detail.units} of ${entry.detail.sku}` : '';
  return `${new Date(entry.at).toLocaleString()} · ${entry.operator} ${what}${to}${units}`;
}

export async function loadAudit(saleId) {
  state.saleId = saleId;
  state.auditAt = Date.now();
  const seq = ++state.asked;
  try {
    const { entries } = await api('GET', `/api/audit?saleId=${encodeURIComponent(saleId)}&limit=20`);
    if (seq !== state.asked) return;
    $('audit').replaceChildren(
      ...entries.map((e) => {
        const li = document.createElement('li');
        li.dataset.action = e.action;
        li.textContent = describe(e);
        return li;
      }),
    );
    setText('audit-empty', entries.length === 0 ? 'Nothing recorded yet.' : '');
  } catch (err) {
    said(err);
  }
}

async function act(button, method, path, body, after) {
  button.disabled = true;
  try {
    const answer = await api(method, path, body);
    show('message', '');
    after(answer);
  } catch (err) {
    said(err);
  } finally {
    button.disabled = false;
  }
}

export function setPaused(sale, paused) {
  const button = $(paused ? 'pause-sale' : 'resume-sale');
  return act(
    button,
    'POST',
    `/api/sales/${encodeURIComponent(sale.id)}/${paused ? 'pause' : 'resume'}`,
    undefined,
    (r) => {
      renderControls({ sale: r.sale, paused: r.paused });
      void loadAudit(sale.id);
    },
  );
}

export function moveEnd(sale, event) {
  event.preventDefault();
  const value = $('end-time').value;
  if (!value) return show('message', 'Choose the new end first.');
  const endsAt = new Date(value).toISOString();
  return act($('end-time-button'), 'POST', `/api/sales/${encodeURIComponent(sale.id)}/end-time`, { endsAt }, () => {
    $('end-time').value = '';
    void loadAudit(sale.id);
  });
}

/**
 * A restock form and a remove form per variant, built again only when the sale or its skus change,
 * so the poll never clears what the operator is typing.
 */
function renderStockForms(sale, ended) {
  const box = $('variant-stock');
  box.hidden = ended;
  const key = `${sale.id}:${sale.variants.map((v) => v.sku).join(',')}`;
  if (box.dataset.key === key) return;
  box.dataset.key = key;
  box.replaceChildren(...sale.variants.map((v) => stockForm(sale, v)));
}

function stockForm(sale, variant) {
  const row = document.createElement('form');
  row.className = 'end-time';
  row.dataset.testid = `variant-controls-${variant.sku}`;
  const label = document.createElement('label');
  const units = document.createElement('input');
  Object.assign(units, { type: 'number', min: '1', step: '1', required: true });
  units.dataset.testid = `variant-units-${variant.sku}`;
  label.append(`${variant.label} (${variant.sku}): units `, units);
  const result = document.createElement('span');
  result.className = 'hint';
  result.dataset.testid = `variant-result-${variant.sku}`;
  const buttons = ['restock', 'remove'].map((change) => {
    const button = document.createElement('button');
    Object.assign(button, { type: 'button', className: 'secondary' });
    button.textContent = change === 'restock' ? 'Restock' : 'Remove';
    button.dataset.testid = `${change}-${variant.sku}`;
    button.addEventListener('click', () => void changeStock(sale, variant.sku, change, units, result, button));
    return button;
  });
  row.addEventListener('submit', (event) => event.preventDefault());
  row.append(label, ...buttons, result);
  return row;
}

function changeStock(sale, sku, change, input, result, button) {
  const units = Number(input.value);
  if (!Number.isSafeInteger(units) || units < 1) return show('message', 'Give the units as a whole number from 1.');
  const path = `/api/sales/${encodeURIComponent(sale.id)}/variants/${encodeURIComponent(sku)}/${change}`;
  return act(button, 'POST', path, { units }, (r) => {
    input.value = '';
    result.textContent = `${change === 'restock' ? 'Added' : 'Removed'} ${r.units}: stock ${r.stock}, ${r.available} available.`;
    void loadAudit(sale.id);
  });
}
