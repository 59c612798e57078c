// A payment provider, as the payment path sees it: something that turns one delivery (the exact
// bytes and the headers it came with) into a verified event, or refuses it. Deciding what an event
// does to its order (shared/payments/decide.ts) knows nothing of signatures or of a provider's format; a
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

/**
 * The longest event id taken from any provider: far above what real ones send (Stripe's are about
 * 30 characters), and every id taken can be refunded by its recorded id over HTTP (PAYMENT_ID_MAX).
 */
export const EVENT_ID_MAX = 1024;
/** An event id: 1 to EVENT_ID_MAX printable ASCII characters, no space. */
export const EVENT_ID_PATTERN = new RegExp(`^[\\x21-\\x7e]{1,${EVENT_ID_MAX}}$`);
/** A provider's name is a short word. */
export const PROVIDER_NAME_MAX = 16;
/** The longest recorded payment id, `<provider>:<event id>`: what the refund route and the router take. */
export const PAYMENT_ID_MAX = PROVIDER_NAME_MAX + 1 + EVENT_ID_MAX;

export interface PaymentProvider {
  /** Its events are recorded as `<name>:<event id>` (sql/0010): two providers' ids never collide. At most PROVIDER_NAME_MAX characters. */
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
