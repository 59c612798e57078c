// The caps on open event streams (SSE_MAX_STREAMS per process, a few per buyer), counted per kind
// of stream: order streams (shared/orders/events.ts), waiting-room and draw streams (http/sale-feed.ts).
import { HttpError } from '../../runtime/errors.js';

/** Counts open streams, in all and per buyer, refusing past either cap with 429 busy. */
export class StreamSlots {
  private readonly byBuyer = new Map<string, number>();
  private open = 0;

  constructor(
    private readonly max: () => { all: number; perBuyer: number },
    private readonly what: string,
    private readonly poll: string,
  ) {}

  get streams(): number {
    return this.open;
  }

  /** Takes a slot for `buyer`; returns the function that gives it back (call it exactly once). */
  take(buyer: string): () => void {
    const held = this.byBuyer.get(buyer) ?? 0;
    const { all, perBuyer } = this.max();
    if (this.open >= all)
      throw new HttpError('busy', `Too many ${this.what} streams are open on this server; poll ${this.poll} instead.`);
    if (held >= perBuyer)
      throw new HttpError('busy', `You already have ${held} ${this.what} streams open; close one first.`);
    this.open++;
    this.byBuyer.set(buyer, held + 1);
    return () => {
      this.open--;
      const left = (this.byBuyer.get(buyer) ?? 1) - 1;
      if (left === 0) this.byBuyer.delete(buyer);
      else this.byBuyer.set(buyer, left);
    };
  }
}
