// The operator's list of sales: the newest SALES_PAGE, and a page more for each click on "More
// sales"; every refresh reads again as many pages as were asked for.
import { $, api, failed } from './admin-session.js';

export const SALE_STATES = { upcoming: 'Upcoming', open: 'Open', sold_out: 'Sold out', ended: 'Ended' };
const SALES_PAGE = 50;
let salesPages = 1;

export const when = (iso) => (iso ? new Date(iso).toLocaleString() : '—');

// Minor units in the currency's own format (EUR 1999 is €19.99, JPY 1999 ¥1,999).
export function money(amount, currency) {
  const format = new Intl.NumberFormat(undefined, { style: 'currency', currency });
  return format.format(amount / 10 ** format.resolvedOptions().maximumFractionDigits);
}

/** The buyer's page of a sale: `/?sale=<id>` (without it, the page shows the sale `demo`). */
export const buyerPage = (saleId) => `/?sale=${encodeURIComponent(saleId)}`;

/** A sale's id, as the API and the CLI take it, and a link to its buyer's page. */
export function saleIdLine(saleId) {
  const line = Object.assign(document.createElement('p'), { className: 'hint sale-id' });
  const id = Object.assign(document.createElement('code'), { textContent: saleId });
  id.dataset.testid = 'sale-id';
  const page = Object.assign(document.createElement('a'), {
    href: buyerPage(saleId),
    textContent: 'buyer page',
    target: '_blank',
    rel: 'noopener',
  });
  page.dataset.testid = 'sale-page';
  line.append(id, ' · ', page);
  return line;
}

function renderSales(sales) {
  $('sales-empty').hidden = sales.length > 0;
  const selected = location.hash.slice(1);
  $('sales').replaceChildren(
    ...sales.map((s) => {
      const row = document.createElement('tr');
      row.dataset.testid = 'sale-row';
      row.dataset.sale = s.id;
      row.classList.toggle('selected', s.id === selected);
      const link = Object.assign(document.createElement('a'), { href: `#${s.id}`, textContent: s.name });
      const name = document.createElement('div');
      name.append(link, saleIdLine(s.id));
      const price = s.price == null ? '—' : money(s.price, s.currency);
      const cells = [
        name,
        SALE_STATES[s.state],
        price,
        `${s.available} of ${s.stock}`,
        s.pending,
        s.paid,
        s.expired,
        s.cancelled,
        when(s.startsAt),
        when(s.endsAt),
      ];
      row.append(
        ...cells.map((c, i) => {
          const td = document.createElement('td');
          if (i === 1) td.dataset.state = s.state;
          td.append(c instanceof Node ? c : String(c));
          return td;
        }),
      );
      return row;
    }),
  );
}

async function fetchSales() {
  const sales = [];
  let next = null;
  for (let page = 0; page < salesPages; page++) {
    const answer = await api(
      'GET',
      `/api/sales?limit=${SALES_PAGE}${next ? `&before=${encodeURIComponent(next)}` : ''}`,
    );
    sales.push(...answer.sales);
    next = answer.next;
    if (!next) break;
  }
  return { sales, next };
}

/** Reads and shows the list; resolves true if the server answered (a refusal is handled by failed()). */
export async function loadSales() {
  try {
    const { sales, next } = await fetchSales();
    renderSales(sales);
    $('sales-more').hidden = next === null;
    return true;
  } catch (err) {
    failed(err);
    return false;
  }
}

export function moreSales() {
  salesPages++;
  void loadSales();
}

/** Marks the shown sale's row (the rows are drawn again by each refresh, marked from the hash). */
export function markSelected(saleId) {
  for (const row of document.querySelectorAll('[data-testid="sale-row"]'))
    row.classList.toggle('selected', row.dataset.sale === saleId);
}
