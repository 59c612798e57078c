// How the buyer's page writes: text into the page only when it changed, and times, durations,
// counts and prices in the buyer's locale.

export function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

export function duration(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const pad = (n) => String(n).padStart(2, '0');
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h > 0 ? `${h}:${pad(m)}:${pad(s % 60)}` : `${m}:${pad(s % 60)}`;
}

/** A time the buyer reads: "Nov 25, 2026, 11:45 PM" in their locale and time zone. */
export const when = (iso) => new Date(iso).toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' });

export const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;

// A price in minor units, in the currency's own format for the buyer's locale: EUR 1999 is €19.99, JPY 1999 ¥1,999.
export function money(amount, currency) {
  const format = new Intl.NumberFormat(undefined, { style: 'currency', currency });
  return format.format(amount / 10 ** format.resolvedOptions().maximumFractionDigits);
}

export const delay = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
