// Order transitions as they happen, for the buyer's event stream (GET /api/orders/:id/events).
// Whoever makes a transition publishes it on ORDERS_CHANNEL after Postgres has it: the writer
// (pending_payment), the expiry sequence (expired), payments (paid), cancellation (cancelled); one
// PUBLISH per batch, however many orders it carries. Each API process holds one subscription and
// hands each message to the streams of the orders it names, through a map of order id to streams.
// Like keyspace events, a message is a hint: a stream re-reads the order after a reconnect of the
// subscription (messages published meanwhile are gone) and while its order looks stuck.
import type { RedisClient } from '../redis/connect.js';
import type { Config } from '../config/index.js';
import { HttpError } from '../runtime/errors.js';
import { ORDERS_CHANNEL } from '../redis/keys.js';
import type { Logger } from '../runtime/logger.js';
import type { OrderStatus } from './view.js';
import { hintSubscriber, quitRedis } from '../redis/connect.js';
import { StreamSlots } from '../http/streams/slots.js';

export interface OrderEvent {
  orderId: string;
  status: OrderStatus;
  /** The payment deadline (ISO 8601), with pending_payment. */
  expiresAt?: string;
}

/** A stream's view of what happened: an event, or null when its order must be read again. */
export type OrderListener = (event: OrderEvent | null) => void;

/**
 * Publishes a batch of transitions in one message. Best effort: the transition is already in
 * Postgres, and a stream that misses it reads it there (see above); the producer's work never
 * fails for it.
 */
export async function publishOrderEvents(redis: RedisClient, events: OrderEvent[]): Promise<void> {
  if (events.length === 0) return;
  await redis.publish(ORDERS_CHANNEL, JSON.stringify(events)).catch(() => {});
}

/** How long a first stream waits for the subscription before answering 503. */
const SUBSCRIBE_WAIT_MS = 3000;

/** One API process's subscription to ORDERS_CHANNEL and the streams it feeds, within the stream limits. */
export class OrderFeed {
  private readonly byOrder = new Map<string, Set<OrderListener>>();
  private readonly slots: StreamSlots;
  private subscriber: RedisClient | undefined;
  private subscribed: Promise<unknown> | undefined;
  private closing: Promise<void> | undefined;

  constructor(
    private readonly redis: RedisClient,
    limits: Pick<Config, 'sseMaxStreams' | 'sseMaxStreamsPerBuyer'>,
    private readonly logger: Logger,
  ) {
    this.slots = new StreamSlots(
      () => ({ all: limits.sseMaxStreams, perBuyer: limits.sseMaxStreamsPerBuyer }),
      'order',
      'GET /api/orders/:orderId',
    );
  }

  /** Streams open now. */
  get streams(): number {
    return this.slots.streams;
  }

  /**
   * Takes a stream slot for `buyer` and registers `listener` for `orderId` (refused with 429 busy
   * past the limits), once the subscription is in place: anything published from then on reaches
   * it. Returns the function that gives both back; call it exactly once.
   */
  async join(orderId: string, buyer: string, listener: OrderListener): Promise<() => void> {
    const release = this.slots.take(buyer);
    let set = this.byOrder.get(orderId);
    if (!set) this.byOrder.set(orderId, (set = new Set()));
    set.add(listener);
    const leave = () => {
      release();
      set.delete(listener);
      if (set.size === 0 && this.byOrder.get(orderId) === set) this.byOrder.delete(orderId);
    };
    try {
      await this.subscribe();
    } catch (err) {
      leave();
      throw err;
    }
    return leave;
  }

  /** Hands one message of ORDERS_CHANNEL to the streams of the orders it names. */
  dispatch(message: string): void {
    let events: OrderEvent[];
    try {
      events = JSON.parse(message) as OrderEvent[];
      if (!Array.isArray(events)) throw new TypeError('not an array');
    } catch (err) {
      this.logger.warn({ err }, 'order events: a message that is not a batch of events, dropped');
      return;
    }
    for (const event of events) {
      const set = this.byOrder.get(event?.orderId);
      if (set) for (const listener of set) listener(event);
    }
  }

  /** Every stream reads its order again: messages published while the subscription was away are lost. */
  private resync(): void {
    for (const set of this.byOrder.values()) for (const listener of set) listener(null);
  }

  /** The subscription, made by the first stream (a process nobody streams from holds none). */
  private subscribe(): Promise<unknown> {
    if (this.closing) return Promise.reject(new HttpError('unavailable', 'The server is shutting down.'));
    if (!this.subscribed) {
      // It carries only hints: the streams re-read their orders once it is back.
      const sub = hintSubscriber(this.redis, this.logger, 'order events subscriber');
      this.subscriber = sub;
      let connectedBefore = false;
      sub.on('ready', () => {
        if (connectedBefore) this.resync();
        connectedBefore = true;
      });
      sub.on('message', (_channel: string, message: string) => this.dispatch(message));
      this.subscribed = sub.subscribe(ORDERS_CHANNEL);
      this.subscribed.catch(() => {}); // each stream hears of it through its own race below
    }
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise((_resolve, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new HttpError('unavailable', 'Order events are unavailable; poll GET /api/orders/:orderId meanwhile.'),
          ),
        SUBSCRIBE_WAIT_MS,
      );
    });
    return Promise.race([this.subscribed, timeout]).finally(() => clearTimeout(timer));
  }

  /** Drops the subscription; streams still open are the route's to end. May be called twice. */
  close(): Promise<void> {
    return (this.closing ??= this.subscriber ? quitRedis(this.subscriber) : Promise.resolve());
  }
}
