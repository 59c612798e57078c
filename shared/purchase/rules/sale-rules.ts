// The rules a buyer is judged by at each door (rule.ts), and each sale's rules as this process
// knows them. A sale's rules never change once it is loaded (an end is purchase.lua's to
// judge), so at a purchase they are read from its Redis meta once per process, one round trip
// at its first purchase, and never from Postgres: purchases go on while Postgres is away. Joining
// a waiting room and entering a draw read the sale from Postgres anyway, and are judged by it.
import type { Buyer } from '../../buyers/buyer.js';
import type { Challenges, CheckedToken } from '../challenge.js';
import type { RedisClient } from '../../redis/connect.js';
import { readSaleRules, type PurchaseGate, type SaleRules } from '../../sales/scripts.js';
import { registeredModes } from '../../admission/mode.js';
import { powToken } from './pow-token.js';
import type { Door, PurchaseRule } from './rule.js';
import { verifiedEmail } from './verified-email.js';

/**
 * Every rule, in the order they judge (the first refusal is the answer): the buyer's own, then
 * each admission mode's (shared/admission/modes.ts), then the challenge's. Kept as the registry
 * changes, so the hot path reads an array rather than building one.
 */
export let RULES: readonly PurchaseRule[] = [];
let modesSeen: readonly unknown[] = [];
export function allRules(): readonly PurchaseRule[] {
  const modes = registeredModes();
  if (modes.length !== modesSeen.length) {
    modesSeen = [...modes];
    RULES = [verifiedEmail, ...modes.flatMap((m) => (m.rule ? [m.rule] : [])), powToken];
  }
  return RULES;
}

/** The codes a door's rules may refuse with, for its route's documentation. */
export const refusalsAt = (door: Door) =>
  allRules().flatMap((rule) => (rule.doors.includes(door) ? rule.refusals : []));

/** What a door's rules let through: the gate purchase.lua spends, if any; a promise when a read or a check was needed. */
export type Judged = PurchaseGate | undefined | Promise<PurchaseGate | undefined>;

/** Past this many sales the memory starts again: ids of sales that do not exist are asked for too. */
const MAX_SALES = 4096;

export class PurchaseRules {
  private readonly held = new Map<string, SaleRules>();
  private readonly reading = new Map<string, Promise<SaleRules | undefined>>();

  constructor(
    private readonly redis: RedisClient,
    private readonly challenges: Challenges,
  ) {}

  /**
   * Refuses the buyer at this door, or answers what purchase.lua must spend. `header`: a purchase's
   * purchase-token header, checked whenever it is given (one HMAC): a forged or foreign one is
   * refused on any sale. A sale that is not loaded is left to the route, which answers sale_not_found.
   * Answered at once, without a promise, for a sale known here and no header: most of a crowd.
   */
  judge(door: Door, saleId: string, buyer: Buyer, header?: string): Judged {
    const sale = this.held.get(saleId);
    if (sale && header === undefined) return this.apply(door, sale, buyer, undefined);
    return this.judgeAfterReads(door, saleId, buyer, header);
  }

  /**
   * Judges a buyer at a door whose route holds the sale as Postgres has it (joining a waiting room,
   * entering a draw): its rules hold even while Redis has lost its copy of the sale.
   */
  judgeSale(door: Exclude<Door, 'purchase'>, sale: SaleRules, buyer: Buyer): void {
    this.apply(door, sale, buyer, undefined);
  }

  private async judgeAfterReads(
    door: Door,
    saleId: string,
    buyer: Buyer,
    header: string | undefined,
  ): Promise<PurchaseGate | undefined> {
    // The token's or pass's expiry is purchase.lua's to judge, by Redis's clock.
    const carried = header === undefined ? undefined : await this.challenges.check(saleId, buyer.id, header);
    const sale = this.held.get(saleId) ?? (await this.read(saleId));
    return sale && this.apply(door, sale, buyer, carried);
  }

  private apply(
    door: Door,
    sale: SaleRules,
    buyer: Buyer,
    carried: CheckedToken | undefined,
  ): PurchaseGate | undefined {
    let gate: PurchaseGate | undefined;
    for (const rule of allRules()) {
      if (rule.doors.includes(door) && rule.applies(sale)) gate = rule.judge({ sale, buyer, carried }) ?? gate;
    }
    return gate;
  }

  /** One read per sale however many buyers arrive at once; a sale not loaded is not remembered. */
  private read(saleId: string): Promise<SaleRules | undefined> {
    let reading = this.reading.get(saleId);
    if (!reading) {
      reading = readSaleRules(this.redis, saleId)
        .then((sale) => {
          if (sale) {
            if (this.held.size >= MAX_SALES) this.held.clear();
            this.held.set(saleId, sale);
          }
          return sale;
        })
        .finally(() => this.reading.delete(saleId));
      this.reading.set(saleId, reading);
    }
    return reading;
  }
}
