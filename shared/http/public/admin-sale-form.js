// The new-sale form: its fields become POST /api/sales's body. Empty fields are left out (the
// server's defaults apply); the server checks everything else and its refusal is shown as it says it.
import { loadSales } from './admin-sales.js';
import { $, api, failed, refused, show } from './admin-session.js';

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

export async function createSale(event) {
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
