// A purchase rule: one condition a sale may put on who buys (a solved challenge, a waiting room's
// pass, a draw, a verified email), judged by the API before purchase.lua is asked, and, for a rule
// on the buyer themself, before they join a waiting room or enter a draw too. Each rule is a module
// of this folder and a line in sale-rules.ts's RULES (an admission mode's, its `rule`); a rule that needs a field of the sale reads it
// from the sale's rules as Redis holds them, so the field needs a `redis` name in sales/definition.ts.
//
// A rule that needs what only Redis knows atomically (whether a token or a pass was spent) hands it
// to purchase.lua, which checks and spends it with the reservation, and refuses a purchase without
// the gate the sale's meta names (a `pow` sale's token, an admission mode's), in its own order (a sale not open yet is told so first) and
// whoever sent it. A rule that needs only the request (a claim of the buyer's) refuses here.
import type { Buyer } from '../../buyers/buyer.js';
import type { ErrorCode } from '../../runtime/errors.js';
import type { PurchaseGate, SaleRules } from '../../sales/model.js';

/** A purchase token or pass as checked (purchase/challenge.ts). */
export type CheckedToken = Extract<PurchaseGate, { kind: 'token' | 'pass' }>;

/** Where a buyer asks: a purchase, joining a waiting room, entering a draw. */
export type Door = 'purchase' | 'join' | 'enter';

/** What a rule judges. */
export interface Attempt {
  /** The sale's rules: at a purchase as its Redis meta holds them, at joining and entering as Postgres does. */
  sale: SaleRules;
  buyer: Buyer;
  /** At a purchase, the purchase token or admission pass the request carried, already checked: signed, for this buyer and sale, not expired. */
  carried: CheckedToken | undefined;
}

export interface PurchaseRule {
  /** Where it is judged. */
  doors: readonly Door[];
  /** Whether the rule judges this sale's buyers. */
  applies(sale: SaleRules): boolean;
  /** Throws the refusal, or lets the purchase go on with what purchase.lua must spend, if anything. */
  judge(attempt: Attempt): PurchaseGate | undefined;
  /** The codes it may refuse with, for the route's documentation. */
  refusals: ErrorCode[];
}
