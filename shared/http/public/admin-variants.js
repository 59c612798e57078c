// A sale's variants in the live view (GET .../live's `variants`, its table `variants`): each one's
// price, stock and units by place, read with the sale's units above. Shown for a sale of several;
// a sale of one has only those.
import { money } from './admin-sales.js';
import { $ } from './admin-session.js';

const cell = (text, testId) => {
  const td = Object.assign(document.createElement('td'), { textContent: text });
  if (testId) td.dataset.testid = testId;
  return td;
};

export function renderVariants(variants, sale) {
  const many = variants.length > 1;
  $('variants').hidden = !many;
  if (!many) return;
  $('variant-rows').replaceChildren(
    ...variants.map((v) => {
      const tr = document.createElement('tr');
      tr.dataset.testid = `variant-${v.sku}`;
      const sku = cell('');
      sku.append(Object.assign(document.createElement('code'), { textContent: v.sku }));
      tr.append(
        cell(v.label),
        sku,
        cell(v.price == null ? '—' : money(v.price, sale.currency)),
        ...['stock', 'available', 'queued', 'pending', 'paid'].map((unit) => cell(String(v[unit]))),
      );
      if (v.available === 0) tr.dataset.soldOut = 'true';
      return tr;
    }),
  );
}
