// A payment provider, as the payment path sees it: something that turns one delivery (the exact
// bytes and the headers it came with) into a verified event, or refuses it. Deciding what an event
// does to its order (shared/payments.ts) knows nothing of signatures or of a provider's format; a
// provider knows nothing of orders.
import type { IncomingHttpHeaders } from 'node:http';

/** What a verified delivery says. Only `succeeded` moves money onto an order; any other kind is acknowledged and ignored. */
export type PaymentEvent =
  | {
    kind: 'succeeded';
    /** The provider's own event id, as it sent it: what the webhook answers with. */
    id: string;
    orderId: string;
    /** In the currency's minor unit, as sent. */
    amount: number;
    /** As sent; the decision compares it with the sale's exactly. */
    currency: string;
  }
  | { kind: 'ignored'; id: string; type: string };

export type SucceededEvent = Extract<PaymentEvent, { kind: 'succeeded' }>;

export interface PaymentProvider {
  /** Its events are recorded as `<name>:<event id>` (sql/0010): two providers' ids never collide. */
  readonly name: string;
  /**
   * The event these exact bytes carry, or an HttpError: invalid_signature or stale_signature when
   * the provider cannot vouch for them, invalid_event when they do not make an event. Only bytes
   * it has verified are ever parsed.
   */
  verify(raw: Buffer, headers: IncomingHttpHeaders): PaymentEvent;
}

/** The id a provider's event is recorded under, in the payments table and the refunds it lists. */
export const recordedId = (provider: PaymentProvider, eventId: string): string => `${provider.name}:${eventId}`;
