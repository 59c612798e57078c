// One API process's subscription to a channel of per-sale ticks (the waiting room's and the draw's,
// published by the admission loop) and the open streams of each sale. A tick goes to every
// listener of its sale; after the subscription comes back, each listener gets `null`: ticks
// published while it was away are lost, so every stream reads its buyer's state again.
import type { Logger } from '../../runtime/logger.js';
import { hintSubscriber, quitRedis, type RedisClient } from '../../redis/connect.js';
import { StreamSlots } from './slots.js';

/** How many streams of one kind one buyer may hold at once (SSE_MAX_STREAMS bounds the process's). */
const MAX_STREAMS_PER_BUYER = 3;

export type TickListener<T> = (tick: T | null) => void;

export class SaleFeed<T extends { saleId: string }> {
  private readonly bySale = new Map<string, Set<TickListener<T>>>();
  private readonly slots: StreamSlots;
  private subscriber: RedisClient | undefined;

  /** `what` names the streams in messages and logs; `poll` is the route to poll instead when they are full. */
  constructor(
    private readonly redis: RedisClient,
    private readonly channel: string,
    private readonly what: string,
    poll: string,
    maxStreams: number,
    private readonly logger: Logger,
  ) {
    this.slots = new StreamSlots(() => ({ all: maxStreams, perBuyer: MAX_STREAMS_PER_BUYER }), what, poll);
  }

  /** Takes a stream slot for `buyer` (429 busy past the caps) and adds the listener; returns its leave (call once). */
  join(saleId: string, buyer: string, listener: TickListener<T>): () => void {
    const release = this.slots.take(buyer);
    let set = this.bySale.get(saleId);
    if (!set) this.bySale.set(saleId, (set = new Set()));
    set.add(listener);
    if (!this.subscriber) this.subscribe();
    return () => {
      release();
      set.delete(listener);
      if (set.size === 0 && this.bySale.get(saleId) === set) this.bySale.delete(saleId);
    };
  }

  private subscribe(): void {
    const sub = (this.subscriber = hintSubscriber(this.redis, this.logger, `${this.what} subscriber`));
    let before = false;
    sub.on('ready', () => {
      if (before) for (const s of this.bySale.values()) for (const l of s) l(null);
      before = true;
    });
    sub.on('message', (_channel: string, message: string) => this.dispatch(message));
    sub.subscribe(this.channel).catch((err: unknown) => this.logger.warn({ err }, `${this.what} subscription failed`));
  }

  private dispatch(message: string): void {
    let tick: T;
    try {
      tick = JSON.parse(message) as T;
    } catch {
      return;
    }
    const set = this.bySale.get(tick?.saleId);
    if (set) for (const listener of set) listener(tick);
  }

  close(): Promise<void> {
    return this.subscriber ? quitRedis(this.subscriber) : Promise.resolve();
  }
}
