// A payment provider, as the payment path sees it: something that turns one delivery (the exact
// bytes and the headers it came with) into a verified event, or refuses it. Deciding what an event
// does to its order (shared/payments/decide.ts) knows nothing of signatures or of a provider's format; a
// provider knows nothing of orders. Each provider is one file of shared/payments/providers/ and one
// line of its index.ts, which registers its definition: the webhook route, its OpenAPI security
// scheme and the settings it needs all derive from that.
import type { IncomingHttpHeaders } from 'node:http';
import type { Config } from '../config/index.js';
import type { ErrorCode } from '../runtime/errors.js';

/** What a verified delivery says. Only `succeeded` moves money onto an order; any other kind is acknowledged and ignored. */
export type PaymentEvent =
  | {
      kind: 'succeeded';
      /** The provider's own event id, as it sent it: what the webhook answers with. */
      id: string;
      orderId: string;
      /** In the currency's minor unit, as sent. */
      amount: number;
      /**
       * The ISO 4217 code in the provider's case (currencyCase); verifiedEvent turns it into upper
       * case, as sales hold it, and the decision compares it with the sale's exactly.
       */
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
  /**
   * How it writes currency codes: `upper` as ISO 4217 does (EUR: taken as sent, so `eur` is a
   * currency mismatch), or `lower` as Stripe does (eur: upper-cased before anything compares or records it).
   */
  readonly currencyCase: 'upper' | 'lower';
}

/** The provider's verified event, its currency in ISO 4217's upper case: the one place a provider's form is normalised. */
export function verifiedEvent(provider: PaymentProvider, raw: Buffer, headers: IncomingHttpHeaders): PaymentEvent {
  const event = provider.verify(raw, headers);
  if (event.kind !== 'succeeded' || provider.currencyCase === 'upper') return event;
  return { ...event, currency: event.currency.toUpperCase() };
}

/** The id a provider's event is recorded under, in the payments table and the refunds it lists. */
export const recordedId = (provider: PaymentProvider, eventId: string): string => `${provider.name}:${eventId}`;

/** A provider as the registry (shared/payments/providers/index.ts) holds it: everything the API derives from it. */
export interface ProviderDefinition<P extends PaymentProvider = PaymentProvider> {
  /** The provider's name: its route is `POST /api/payments/<name>/webhook`. */
  readonly name: string;
  /** The settings it cannot verify without: the API refuses to start while one is unset. */
  readonly settings: readonly (keyof Config)[];
  create(config: Config): P;
  /** Its OpenAPI security scheme (how its deliveries are signed), under `key` in components.securitySchemes. */
  readonly security: { key: string; scheme: Record<string, unknown> };
  /** The refusals its verify throws, besides invalid_event: documented on its route. */
  readonly refusals: readonly ErrorCode[];
  /** The events it sends: their body (documented, never validated: bytes are verified first) and what each type does. */
  readonly events: { body: Record<string, unknown>; types: Record<string, string> };
}
