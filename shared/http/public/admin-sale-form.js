// The new-sale form: its fields become POST /api/sales's body. Empty fields are left out (the
// server's defaults apply), and so is a choice at its default, and so are the settings of an
// admission not chosen (hidden, and disabled); the server checks everything else and
// its refusal is shown as it says it. The inputs are the sale definition's (shared/http/sale-form.ts):
// their names are its fields, their types say how to send them.
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
  try {
    const sale = await api('POST', '/api/sales', saleDefinition(form));
    form.reset();
    showAdmission();
    await loadSales();
    location.hash = sale.id;
  } catch (err) {
    if (refused(err)) failed(err);
    else show('create-message', err.code === 'invalid_sale' ? inLabels(form, err.message) : err.message);
  } finally {
    button.disabled = false;
  }
}
