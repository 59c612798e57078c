// The purchase decision: one Lua script call, plus a short-lived in-process sold-out flag so a
// crowd hitting a sold-out sale costs no Redis round trip.
import type { Config } from '../config/index.js';
import type { RedisClient } from '../redis/connect.js';
import { HttpError, type ErrorCode } from '../runtime/errors.js';
import { purchaseScript, type PurchaseGate } from '../sales/scripts.js';
import type { ReplicaAcks } from '../redis/replication.js';
import { newOrderId } from '../runtime/ids.js';
import { TOKEN_EXPIRED } from './challenge.js';

/** purchase.lua's refusal codes. */
export enum Refusal {
  SaleNotFound = -1,
  NotStarted = -2,
  Ended = -3,
  QtyAboveMax = -4,
  LimitReached = -5,
  SoldOut = -6,
  NotEnoughStock = -7,
  TokenRequired = -8,
  TokenUsed = -9,
  DrawOnly = -10,
  PassRequired = -11,
  PassInvalid = -12,
  RateLimited = -13,
  TokenExpired = -14,
  UnpaidLimit = -15,
  NotAdmitted = -16,
  VariantRequired = -17,
  UnknownVariant = -18,
  VariantLimitReached = -19,
  Paused = -20,
}

/** The refusals answered with their catalogue message alone. */
const PLAIN: Partial<Record<Refusal, ErrorCode>> = {
  [Refusal.SaleNotFound]: 'sale_not_found',
  [Refusal.NotStarted]: 'not_started',
  [Refusal.Ended]: 'ended',
  [Refusal.SoldOut]: 'sold_out',
  [Refusal.TokenRequired]: 'purchase_token_required',
  [Refusal.TokenUsed]: 'purchase_token_used',
  [Refusal.DrawOnly]: 'draw_sale',
  [Refusal.PassRequired]: 'admission_pass_required',
  [Refusal.PassInvalid]: 'admission_pass_invalid',
  [Refusal.NotAdmitted]: 'not_admitted',
  [Refusal.Paused]: 'paused',
};

const listed = (skus: string[]) => skus.slice().sort().join(', ');

function refusalError(code: number, n: number, skus: string[], variant: string | undefined): Error {
  if (code === Refusal.SoldOut && n === 1)
    return new HttpError(
      'sold_out',
      `Variant ${variant} is sold out.${skus.length > 0 ? ` Still available: ${listed(skus)}.` : ''}`,
    );
  const plain = PLAIN[code as Refusal];
  if (plain) return new HttpError(plain);
  switch (code) {
    case Refusal.VariantRequired:
      return new HttpError(
        'variant_required',
        `This sale sells ${n} variants: name the one to buy as "variant" in the body, one of ${listed(skus)}.`,
      );
    case Refusal.UnknownVariant:
      return new HttpError(
        'unknown_variant',
        `This sale has no variant "${variant}": its variants are ${listed(skus)}.`,
      );
    case Refusal.VariantLimitReached:
      return new HttpError(
        'limit_reached',
        `This buyer already holds ${n} of variant ${variant}, the most this sale allows of one variant.`,
      );
    case Refusal.QtyAboveMax:
      return new HttpError('qty_above_max', `qty is above this sale's maximum of ${n} per order.`);
    case Refusal.LimitReached:
      return new HttpError('limit_reached', `This buyer already holds ${n}, the most this sale allows.`);
    case Refusal.NotEnoughStock:
      return new HttpError('not_enough_stock', `Only ${n} left.`);
    case Refusal.TokenExpired:
      return new HttpError('invalid_purchase_token', TOKEN_EXPIRED);
    case Refusal.UnpaidLimit:
      return new HttpError(
        'unpaid_limit',
        `This buyer let ${n} orders of this sale expire unpaid, the most it allows: no more purchases here.`,
      );
    case Refusal.RateLimited: {
      const seconds = Math.max(1, Math.ceil(n / 1000));
      return new HttpError('rate_limited', `This buyer is sending purchases too fast; retry in ${seconds} s.`, seconds);
    }
    // The script and this enum disagree: a bug, answered 500 internal and logged with its stack.
    default:
      return new Error(`Unknown purchase result ${code}.`);
  }
}

const UNREPLICATED =
  "This sale's Redis master has fewer replicas than REDIS_MIN_REPLICAS_ACK asks for, so a purchase could not be made safe: nothing was reserved; retry later.";

export interface PurchaseResult {
  orderId: string;
  available: number;
}

export class Purchaser {
  private readonly soldOutUntil = new Map<string, number>();
  /** A sale's variants this process saw sold out (the sale itself not), each with its answer: sale -> sku -> memory. */
  private readonly variantSoldOut = new Map<string, Map<string, { until: number; answer: HttpError }>>();

  constructor(
    private readonly redis: RedisClient,
    private readonly opts: Pick<Config, 'soldOutCacheMs' | 'buyCountTtlSeconds'> &
      Partial<Pick<Config, 'purchaseRatePerBuyer' | 'purchaseRateWindowMs' | 'maxUnpaidPerSale'>>,
    /** REDIS_MIN_REPLICAS_ACK's confirmation of `redis`'s writes (services.ts connect); undefined at 0. */
    private readonly replicaAcks?: ReplicaAcks,
  ) {
    const { purchaseRatePerBuyer: max = 0, purchaseRateWindowMs: windowMs = 0 } = opts;
    this.rate = max > 0 ? { max, windowMs } : undefined;
  }

  /** The per-buyer limit, counted by purchase.lua in the same round trip as the purchase. */
  private readonly rate: { max: number; windowMs: number } | undefined;

  /** With REDIS_MIN_REPLICAS_ACK, a reservation is answered 202 only once that many replicas have it. */
  private async confirm(saleId: string, orderId: string): Promise<void> {
    const acks = this.replicaAcks;
    if (!acks) return;
    const { acked, required } = await acks.acked(saleId);
    if (acked >= required) return;
    throw new HttpError(
      'unavailable',
      `Order ${orderId} was reserved but only ${acked} of ${required} Redis replicas confirmed it in time, so a failover could lose it: check GET /api/orders/${orderId} before buying again.`,
    );
  }

  /** Stock came back (an order expired): stop answering sold_out from memory. */
  stockRestored(saleId: string): void {
    this.soldOutUntil.delete(saleId);
    this.variantSoldOut.delete(saleId);
  }

  /**
   * The answer to a purchase of a variant this process saw sold out less than SOLD_OUT_CACHE_MS ago
   * (with the variants then still available), or undefined: ask Redis. Asked once the body names the
   * variant; a sale sold out whole is answered before the body (answerSoldOut).
   */
  variantSoldOutAnswer(saleId: string, variant: string, now = Date.now()): HttpError | undefined {
    const held = this.variantSoldOut.get(saleId)?.get(variant);
    if (held === undefined) return undefined;
    if (now < held.until) return held.answer;
    this.variantSoldOut.get(saleId)!.delete(variant);
    return undefined;
  }

  /** Whether this process saw the sale sold out less than SOLD_OUT_CACHE_MS ago. */
  soldOut(saleId: string, now = Date.now()): boolean {
    const until = this.soldOutUntil.get(saleId);
    return until !== undefined && now < until;
  }

  /**
   * The purchase route's question: answer sold_out from memory? While the memory lasts, yes. Once
   * it has run out, the first caller is told no and asks Redis; the others are still told yes
   * meanwhile, for up to another SOLD_OUT_CACHE_MS, and its answer decides (purchase). Letting every
   * request in until the first answer came back sent a herd to Redis each time the memory ran out:
   * under load, most of a sold-out crowd. Stock that comes back clears the memory at once
   * (stockRestored).
   */
  answerSoldOut(saleId: string, now = Date.now()): boolean {
    const until = this.soldOutUntil.get(saleId);
    if (until === undefined) return false;
    if (now < until) return true;
    this.soldOutUntil.set(saleId, now + this.opts.soldOutCacheMs);
    return false;
  }

  /**
   * Asks Redis. The route answers a sale it knows sold out from memory (answerSoldOut) before it
   * gets here, so that is not checked twice. `gate`: the buyer's purchase token or admission pass for
   * this sale, checked (shared/purchase/challenge.ts); a reservation spends it.
   */
  async purchase(
    saleId: string,
    userId: string,
    qty: number,
    gate?: PurchaseGate,
    variant?: string,
  ): Promise<PurchaseResult> {
    // The degraded mode (replica-watch.ts): nothing reserved that no replica could confirm.
    if (this.replicaAcks?.unreplicated(saleId)) throw new HttpError('unavailable', UNREPLICATED);
    const orderId = newOrderId(saleId);
    let code: number, n: number, skus: string[];
    try {
      [code, n, ...skus] = await purchaseScript(this.redis, {
        saleId,
        userId,
        qty,
        orderId,
        buyCountTtlSeconds: this.opts.buyCountTtlSeconds,
        gate,
        rate: this.rate,
        maxUnpaid: this.opts.maxUnpaidPerSale,
        variant,
      });
    } catch (err) {
      this.soldOutUntil.delete(saleId);
      throw err;
    }
    // Remembered from the answer's arrival, not the request's start: under load the round trip can
    // outlast the memory. Any other answer forgets it: only a sold-out answer says the sale is.
    // A variant sold out (n 1) is remembered for that variant alone, with its answer.
    const wholeSale = code === Refusal.SoldOut && n === 0;
    if (wholeSale && this.opts.soldOutCacheMs > 0) this.soldOutUntil.set(saleId, Date.now() + this.opts.soldOutCacheMs);
    else this.soldOutUntil.delete(saleId);
    if (code === 1) {
      await this.confirm(saleId, orderId);
      return { orderId, available: n };
    }
    const err = refusalError(code, n, skus, variant);
    if (code === Refusal.SoldOut && !wholeSale && variant !== undefined && this.opts.soldOutCacheMs > 0) {
      const of = this.variantSoldOut.get(saleId) ?? new Map();
      // Bounded by the sale's variants (at most 100), and dropped whole when stock comes back.
      of.set(variant, { until: Date.now() + this.opts.soldOutCacheMs, answer: err as HttpError });
      this.variantSoldOut.set(saleId, of);
    }
    throw err;
  }
}
