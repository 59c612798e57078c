// An admission mode's part of the buyer's page, which the generic parts ask instead of comparing
// the sale's admission with a name. The modes register in modes.js, one line each; a first-come
// sale, or one of a mode with no part here, is bought as a first-come sale is.
//
// A part names its mode (`name`, the sale's `admission`), and may give:
// - flow: the buyer's place or entry (follow.js admission()), loaded and forgotten with the buyer;
//   button: what starts it; render(now): its panel; tick(): each tick, before render;
// - holdsIdentity(): its request is in flight or the buyer's turn is on: the identity stays fixed;
// - buyHidden(), mayBuy(): the Buy button hidden, or allowed to buy, on its sales;
// - purchase(): what a purchase carries ({ headers, bought(), refused(err) }), or null for the generic;
// - secondChoice: on a sale of several variants, ask for a second size too (sizes.js); sizeSent(): the
//   sizes went with the buyer's request (an entry): the pickers are hidden;
// - hint(s, now), timeText(s, now): the text under Buy and the sale's countdown (undefined: the generic);
// - challengeAhead(s, now): whether solving a proof-of-work challenge ahead of the click still helps;
// - closedOrderText: an expired or cancelled order's detail, by status, where its unit does not go back on sale.
import { state } from './state.js';

const byName = new Map();

export function registerPageMode(mode) {
  if (byName.has(mode.name)) throw new Error(`the page of admission ${mode.name} is registered already`);
  byName.set(mode.name, mode);
}

/** The shown sale's mode's part; undefined for first come (and before the sale is known). */
export const saleMode = () => byName.get(state.sale?.admission);

/** Every registered part, in registration order. */
export const pageModes = () => [...byName.values()];
