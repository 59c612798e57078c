// A sale of several variants (sizes, colours): the buyer picks one from radio buttons styled as
// chips, each greyed and disabled while sold out as the sale's poll says (GET /api/sales/:id lists
// each variant's units left), and the price shown is the chosen one's. A mode's part may ask for a
// second choice too (a draw's, mode.js). A sale of one variant shows no picker, and its purchase
// names none, as before variants.
import { saleMode } from './mode.js';
import { el, render, state } from './state.js';
import { money, setText } from './text.js';

/** The sale sells several variants: the buyer names one. */
export const manyVariants = () => (state.sale?.variants?.length ?? 0) > 1;
const variantOf = (sku) => state.sale?.variants?.find((v) => v.sku === sku);
const inStock = (sku) => (variantOf(sku)?.available ?? 0) > 0;
const sizeName = (sku) => `Size ${variantOf(sku)?.label ?? sku}`;

/** The buyer may buy or enter as far as the size goes: one in stock is chosen, or the sale sells one variant. */
export const sizeReady = () => !manyVariants() || inStock(state.variant);

/** What a purchase names besides its qty: the chosen variant on a sale of several, nothing on a sale of one. */
export const variantBody = () => (manyVariants() ? { variant: state.variant } : {});

/** A draw entry's body on a sale of several: the first choice and the second, if any; none on a sale of one. */
export const entryBody = () =>
  manyVariants()
    ? { variant: state.variant, ...(state.secondChoice ? { secondChoice: state.secondChoice } : {}) }
    : undefined;

/** The price shown: the chosen variant's (its own, else the sale's); before a choice, the one price, or "from" the lowest. */
export function priceText(s) {
  const priceOf = (v) => v.priceCents ?? s.price;
  const variants = s.variants ?? [];
  const chosen = manyVariants() ? variantOf(state.variant) : variants[0];
  const prices = chosen ? [priceOf(chosen)] : variants.map(priceOf);
  if (prices.length === 0 || prices.some((p) => p == null)) return s.price != null ? money(s.price, s.currency) : '–';
  const lowest = Math.min(...prices);
  return prices.every((p) => p === lowest) ? money(lowest, s.currency) : `from ${money(lowest, s.currency)}`;
}

/**
 * A purchase refused as sold out on a sale of several: the chosen size greys at once (the next poll
 * confirms it) and the message says which are left. False for any other refusal.
 */
export function refusedSoldOut(err) {
  const v = variantOf(state.variant);
  if (err.code !== 'sold_out' || !manyVariants() || !v) return false;
  v.available = 0;
  state.refusedSize = v.sku;
  return true;
}

/** While the size refused stays sold out: which sizes are left, as the latest poll has them. */
export function sizeMessage() {
  const sku = state.refusedSize;
  if (!sku || !manyVariants() || inStock(sku)) return '';
  const left = state.sale.variants.filter((v) => v.available > 0).map((v) => v.label);
  return left.length === 0
    ? 'Sold out: every size has been claimed.'
    : `${sizeName(sku)} is sold out. Still available: ${left.join(', ')}.`;
}

/** The hint the size gives under Buy or Enter, or '' when it has nothing to say. */
export function sizeHint(verb = 'buy') {
  if (!manyVariants()) return '';
  if (!state.variant) return `Choose a size to ${verb}.`;
  if (!inStock(state.variant) && state.refusedSize !== state.variant)
    return `${sizeName(state.variant)} is sold out: choose another.`;
  return '';
}

function choose(sku) {
  state.variant = sku;
  state.refusedSize = null;
  if (state.secondChoice === sku) state.secondChoice = null;
  render();
}

function chooseSecond(sku) {
  state.secondChoice = sku || null;
  render();
}

const NONE = { sku: '', label: 'None' };

// The chips are built once per set of variants, then updated in place: a rebuild at every render
// would take the keyboard's focus away.
function build(container, name, options, pick) {
  const key = options.map((o) => o.sku).join('\n');
  if (container.dataset.built === key) return;
  container.dataset.built = key;
  const chips = options.map(({ sku, label }) => {
    const input = Object.assign(document.createElement('input'), { type: 'radio', name, value: sku });
    input.addEventListener('change', () => pick(sku));
    const chip = document.createElement('label');
    chip.className = 'chip';
    chip.dataset.testid = `${name}-${sku || 'none'}`;
    const text = Object.assign(document.createElement('span'), { className: 'chip-label', textContent: label });
    // The space keeps the label and the units left two words in the chip's accessible name.
    chip.append(input, text, ' ', Object.assign(document.createElement('span'), { className: 'chip-left' }));
    return chip;
  });
  container.replaceChildren(...chips);
}

function update(container, chosen, locked, taken = '') {
  for (const chip of container.children) {
    const input = chip.firstElementChild;
    const v = variantOf(input.value);
    const out = v !== undefined && v.available <= 0;
    chip.dataset.soldOut = String(out);
    input.disabled = locked || out || (input.value !== '' && input.value === taken);
    input.checked = input.value === chosen;
    setText(chip.lastElementChild, v === undefined ? '' : out ? 'Sold out' : `${v.available} left`);
  }
}

export function renderSizes() {
  const mode = saleMode();
  // A choice that went with an entry is the entry's: nothing left to pick.
  const shown = manyVariants() && !mode?.sizeSent?.();
  const second = shown && mode?.secondChoice === true;
  el.sizes.hidden = !shown;
  el.secondSizes.hidden = !second;
  if (!shown) return;
  const locked = state.buying || state.entering;
  build(el.sizeChips, 'size', state.sale.variants, choose);
  update(el.sizeChips, state.variant ?? '', locked);
  if (!second) return;
  build(el.secondSizeChips, 'second-size', [...state.sale.variants, NONE], chooseSecond);
  update(el.secondSizeChips, state.secondChoice ?? '', locked, state.variant ?? '');
}
