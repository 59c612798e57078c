// The new-sale form: its fields become POST /api/sales's body. Empty fields are left out (the
// server's defaults apply), and so is a choice at its default, and so are the settings of an
// admission not chosen (hidden, and disabled); the server checks everything else and
// its refusal is shown as it says it. The inputs are the sale definition's (shared/http/sale-form.ts):
// their names are its fields, their types say how to send them; the Sizes box, named by none, is
// sent as `variants`.
import { loadSales } from './admin-sales.js';
import { $, api, failed, refused, show } from './admin-session.js';

function saleDefinition(form) {
  const body = {};
  for (const input of form.querySelectorAll('[name]')) {
    const value = input.value.trim();
    if (input.disabled || value === '' || value === input.dataset.default) continue;
    if (input.type === 'number') body[input.name] = Number(value);
    else if (input.type === 'datetime-local') body[input.name] = new Date(value).toISOString();
    else body[input.name] = value;
  }
  return body;
}

// The Sizes box, one `sku, label, stock[, price]` a line, as POST /api/sales's `variants`; empty:
// none (one variant, the whole stock). Only a line's shape is judged here; its values are the
// server's to refuse, so the form takes no rule of its own. `lines[i]` is variant i's line number.
const NUMBER = /^\d+$/;
function sizes(text) {
  const variants = [];
  const lines = [];
  for (const [at, line] of text.split('\n').entries()) {
    if (line.trim() === '') continue;
    const parts = line.split(',').map((part) => part.trim());
    if (parts.length < 3 || parts.length > 4)
      throw new Error(`Sizes, line ${at + 1}: give sku, label, stock and optionally a price, separated by commas.`);
    const [sku, label, stock, price] = parts;
    // A value that is not a number is sent as it is, for the server to say what it must be.
    const number = (value) => (NUMBER.test(value) ? Number(value) : value);
    variants.push({ sku, label, stock: number(stock), ...(price === undefined ? {} : { priceCents: number(price) }) });
    lines.push(at + 1);
  }
  return { variants: variants.length > 0 ? variants : undefined, lines };
}

/** With sizes, the stock is their sum: the Stock input may be left empty. */
export function stockOptional() {
  $('create-stock').required = $('create-sizes').value.trim() === '';
}

// A refusal of one variant names it as the API does (`variants[2].stock`); the form says its line.
const inLines = (message, lines) =>
  message.replace(
    /^variants\[(\d+)\](?:\.(\w+))?:?/,
    (_, i, field) =>
      `Sizes, line ${lines[Number(i)] ?? Number(i) + 1}:${field ? ` ${field === 'priceCents' ? 'price' : field}` : ''}`,
  );

// The server's refusal names the API's fields (the input names); the form says them as its labels do.
function inLabels(form, message) {
  const labels = new Map(
    [...form.querySelectorAll('[name]')].map((input) => [
      input.name,
      input.closest('label')?.firstChild?.textContent.trim(),
    ]),
  );
  return message.replace(/(?<![\w-])[a-z][A-Za-z]*(?![\w-])/g, (word) =>
    labels.get(word) ? `“${labels.get(word)}”` : word,
  );
}

/** Shows the settings of the chosen admission only (a label's data-only names its admission). */
export function showAdmission() {
  const form = $('create-form');
  const admission = form.elements.admission.value;
  for (const label of form.querySelectorAll('[data-only]')) {
    const shown = label.dataset.only === admission;
    label.hidden = !shown;
    for (const input of label.querySelectorAll('[name]')) input.disabled = !shown;
  }
}

export async function createSale(event) {
  event.preventDefault();
  const form = event.currentTarget;
  const button = $('create-button');
  button.disabled = true;
  show('create-message', '');
  let lines = [];
  try {
    const given = sizes($('create-sizes').value);
    lines = given.lines;
    const body = saleDefinition(form);
    if (given.variants) body.variants = given.variants;
    const sale = await api('POST', '/api/sales', body);
    form.reset();
    showAdmission();
    stockOptional();
    await loadSales();
    location.hash = sale.id;
  } catch (err) {
    if (refused(err)) failed(err);
    else if (err.code !== 'invalid_sale') show('create-message', err.message);
    else if (err.message.startsWith('variants[')) show('create-message', inLines(err.message, lines));
    else show('create-message', inLabels(form, err.message));
  } finally {
    button.disabled = false;
  }
}
