// Buyers and payers over HTTP for a reliability scenario, every answer recorded, and the check
// that what each buyer was told is what happened; then the scenario's wind-down.
import type { InvariantReport } from '../../shared/checks/invariants.js';
import { delay } from '../../shared/runtime/daemon.js';
import type { TestEnv } from './env.js';
import { orderCount, settle } from './fixtures.js';
import { http, outcome } from './http.js';
import { checkSale, type LiveChecks } from './scenario.js';

export interface Won {
  orderId: string;
  userId: string;
  qty: number;
  /** The variant bought, on a sale of several. */
  sku?: string;
  /** The API that answered, and when (this process's clock) the request went and its 202 came. */
  port: number;
  sentAt: number;
  answeredAt: number;
}

export interface ShopperOptions {
  port: number;
  saleId: string;
  rand: () => number;
  /** Buyers are drawn from `${prefix}0 .. ${prefix}(users-1)`, so they come back for more. */
  users: number;
  prefix: string;
  maxQty: number;
  payRatio: number;
  /** A won order is paid this long after the 202 (uniform); past the window it meets order_expired. */
  payDelayMs: [number, number];
  concurrency: number;
  /** Each buyer pauses this long between clicks (uniform; default none). */
  thinkMs?: [number, number];
  /** Several APIs: each click goes to one of them, drawn from `rand` (instead of `port`). */
  ports?: number[];
  /** A sale of several variants: each click names one, drawn from `rand` by these weights. */
  demand?: Demand;
}

/** Which variant a click names: each sku with its share of the clicks (any positive weights). */
export interface Demand {
  skus: string[];
  weights: number[];
}

/**
 * Skewed demand as a drop meets it: the sizes' shares halve from the most wanted to the least
 * (1/2, 1/4, ...), the order of the sizes shuffled by `rand`, so a seed replays which sizes sell out
 * first. With equal stock, the most wanted size takes half the clicks and the least a few in ten
 * thousand.
 */
export function skewedDemand(skus: string[], rand: () => number): Demand {
  const order = skus.map((sku) => [sku, rand()] as const).sort((a, b) => a[1] - b[1]);
  return { skus: order.map(([sku]) => sku), weights: order.map((_, i) => 2 ** -i) };
}

/** The variants of a sale with `n` of them, `stock` each (spread into a sale definition). */
export function sizes(n: number, stock: number): { variants: { sku: string; label: string; stock: number }[] } {
  return {
    variants: Array.from({ length: n }, (_, i) => ({ sku: `EU${36 + i}`, label: `EU ${36 + i}`, stock })),
  };
}

/**
 * A drop where one size is scarce: `n` sizes of `stock` units, but the first (EU36) has `scarce`
 * (spread into a sale definition). With scarceFirst's demand it sells out within moments while the
 * others sell on, however slowly the machine serves the buyers.
 */
export function scarceSizes(n: number, stock: number, scarce: number): ReturnType<typeof sizes> {
  const { variants } = sizes(n, stock);
  variants[0]!.stock = scarce;
  return { variants };
}

/** Skewed demand (as skewedDemand) with the sale's scarcest variant the most wanted. */
export function scarceFirst(variants: { sku: string; stock: number }[], rand: () => number): Demand {
  const scarcest = variants.reduce((a, b) => (b.stock < a.stock ? b : a)).sku;
  const rest = skewedDemand(
    variants.map((v) => v.sku).filter((sku) => sku !== scarcest),
    rand,
  ).skus;
  return { skus: [scarcest, ...rest], weights: [scarcest, ...rest].map((_, i) => 2 ** -i) };
}

function pick(d: Demand, rand: () => number): string {
  let r = rand() * d.weights.reduce((n, w) => n + w, 0);
  for (const [i, w] of d.weights.entries()) if ((r -= w) < 0) return d.skus[i]!;
  return d.skus.at(-1)!;
}

/** Buyers and payers over HTTP, recording every answer so the final state can be held against it. */
export class Shoppers {
  readonly accepted: Won[] = [];
  readonly purchases: Record<string, number> = {};
  /** The last answer each paid order got: `200 paid`, `409 order_expired`, `503 unavailable`, ... */
  readonly payments = new Map<string, string>();
  readonly buyers = new Set<string>();
  /** Per variant: when (ms since the start) it was first answered sold out. */
  readonly soldOutAt = new Map<string, number>();
  /** Sold-out answers for one variant while others were still available (the message lists them). */
  soldOutWithOthersLeft = 0;
  private readonly started = Date.now();
  private readonly paying = new Set<Promise<void>>();
  private stopping = false;
  private running: Promise<void> = Promise.resolve();

  constructor(private readonly o: ShopperOptions) {}

  /** Buys until done() is called. */
  run(): void {
    this.running = Promise.all(Array.from({ length: this.o.concurrency }, () => this.buyer())).then(() => {});
  }

  /** Stops buying; resolves once every buyer in flight has its answer and every payment started is answered. */
  async done(): Promise<void> {
    this.stopping = true;
    await this.running;
    while (this.paying.size > 0) await Promise.all([...this.paying]);
  }

  private async buyer(): Promise<void> {
    const { port, saleId, rand, users, prefix, maxQty } = this.o;
    while (!this.stopping) {
      const userId = `${prefix}${Math.floor(rand() * users)}`;
      const qty = 1 + Math.floor(rand() * maxQty);
      this.buyers.add(userId);
      const to = this.o.ports ? this.o.ports[Math.floor(rand() * this.o.ports.length)]! : port;
      const sku = this.o.demand && pick(this.o.demand, rand);
      const sentAt = Date.now();
      const body = sku === undefined ? { qty } : { qty, variant: sku };
      const r = await http(to, 'POST', `/api/sales/${saleId}/purchases`, { body, user: userId });
      const label = outcome(r);
      this.purchases[label] = (this.purchases[label] ?? 0) + 1;
      if (sku !== undefined && label === '409 sold_out') {
        if (!this.soldOutAt.has(sku)) this.soldOutAt.set(sku, sentAt - this.started);
        if (String(r.body?.message).includes('Still available')) this.soldOutWithOthersLeft++;
      }
      if (r.status === 202) {
        this.accepted.push({ orderId: r.body.orderId, userId, qty, sku, port: to, sentAt, answeredAt: Date.now() });
        if (rand() < this.o.payRatio)
          this.pay(
            to,
            r.body.orderId,
            userId,
            this.o.payDelayMs[0] + rand() * (this.o.payDelayMs[1] - this.o.payDelayMs[0]),
          );
      } else if (r.status === 409 || r.status === 429) {
        await delay(20); // sold out or busy: a real buyer waits a moment before the next click
      } else if (r.status === 0 || r.status >= 500) {
        await delay(50);
      }
      const [min, max] = this.o.thinkMs ?? [0, 0];
      if (max > 0) await delay(min + rand() * (max - min));
    }
  }

  private pay(port: number, orderId: string, userId: string, afterMs: number): void {
    const p = (async () => {
      await delay(afterMs);
      for (;;) {
        const r = await http(port, 'POST', `/api/orders/${orderId}/pay`, { user: userId });
        const label = outcome(r);
        this.payments.set(orderId, label);
        // Still queued (the writer is behind or down): the buyer's page retries.
        if (label !== '409 order_not_ready' && label !== '503 unavailable' && !r.error) return;
        await delay(100);
      }
    })();
    this.paying.add(p);
    void p.finally(() => this.paying.delete(p));
  }
}

/**
 * What each buyer was told must be what happened: a 200 on payment means paid, order_expired
 * means expired, and every order of the sale was answered 202 unless its request got no
 * definite answer. Returns the disagreements (none expected).
 */
export async function answersHold(env: TestEnv, saleId: string, shoppers: Shoppers): Promise<string[]> {
  const rows = await env.pool.query<{ id: string; user_id: string; qty: number; sku: string; status: string }>(
    'select id, user_id, qty, sku, status from orders where sale_id = $1',
    [saleId],
  );
  const byId = new Map(rows.rows.map((r) => [r.id, r]));
  const problems: string[] = [];
  for (const [orderId, label] of shoppers.payments) {
    const status = byId.get(orderId)?.status;
    if (label === '200 paid' && status !== 'paid') problems.push(`${orderId}: told paid, is ${status}`);
    if (label === '409 order_expired' && status !== 'expired') problems.push(`${orderId}: told expired, is ${status}`);
  }
  for (const w of shoppers.accepted) {
    const row = byId.get(w.orderId);
    if (!row) problems.push(`${w.orderId}: answered 202, no order`);
    else if (row.user_id !== w.userId || row.qty !== w.qty)
      problems.push(`${w.orderId}: answered 202 to ${w.userId} x${w.qty}, order is ${row.user_id} x${row.qty}`);
    else if (w.sku !== undefined && row.sku !== w.sku)
      problems.push(`${w.orderId}: answered 202 for variant ${w.sku}, order is of ${row.sku}`);
  }
  const told = new Set(shoppers.accepted.map((w) => w.orderId));
  const unanswered = Object.entries(shoppers.purchases)
    .filter(([l]) => l.startsWith('error') || l.startsWith('5'))
    .reduce((n, [, c]) => n + c, 0);
  const extra = rows.rows.filter((r) => !told.has(r.id)).length;
  if (extra > unanswered)
    problems.push(
      `${extra} orders nobody was answered 202 for, but only ${unanswered} purchases got no definite answer`,
    );
  return problems;
}

/**
 * The end of a shopping scenario: buyers stop, every payment is answered, the sale comes to rest,
 * the live checks stop; then the invariants at rest and the orders there are.
 */
export async function windDown(
  env: TestEnv,
  saleId: string,
  shoppers: Shoppers,
  live: LiveChecks,
): Promise<{ accepted: string[]; final: InvariantReport; orders: number }> {
  await shoppers.done();
  await settle(env, saleId);
  await live.stop();
  const accepted = shoppers.accepted.map((w) => w.orderId);
  return { accepted, final: await checkSale(env, saleId, accepted), orders: await orderCount(env, saleId) };
}
