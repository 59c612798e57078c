// Prometheus series an operator watches during a sale. One registry per process; the API serves
// it at /metrics, each daemon on its ops port.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { BoundHistogram } from './bound-histogram.js';
import { backendOf, type Backend } from './errors.js';
import type { ClosedOrder } from '../orders/queries.js';

export const registry = new Registry();

class Tally {
  n = 0;
  inc(): void {
    this.n++;
  }
}
const outcomeTallies = new Map<string, Tally>();
collectDefaultMetrics({ register: registry, prefix: 'flashsale_process_' });

/** Who closed an order: the expiry paths, or `cancel`, the buyer (through the API). */
export type ClosedBy = 'listener' | 'replay' | 'writer' | 'cancel';

export const metrics = {
  purchases: new Counter({
    name: 'flashsale_purchases_total',
    help: 'Purchase attempts by outcome',
    labelNames: ['outcome'],
    registers: [registry],
    // Each purchase counts into its outcome's tally (purchaseOutcome); read, they are added here.
    collect() {
      for (const [outcome, tally] of outcomeTallies) {
        if (tally.n > 0) this.inc({ outcome }, tally.n);
        tally.n = 0;
      }
    },
  }),
  httpDuration: new BoundHistogram(
    'flashsale_http_request_duration_seconds',
    'HTTP request latency',
    ['route', 'method', 'status'],
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registry,
  ),
  winnersQueued: new Gauge({
    name: 'flashsale_winners_queued',
    help: 'Winners waiting for the order writer, per sale',
    labelNames: ['sale'],
    registers: [registry],
  }),
  ordersWritten: new Counter({
    name: 'flashsale_orders_written_total',
    help: 'Orders written to Postgres by the order writer',
    registers: [registry],
  }),
  writerSaleFailures: new Counter({
    name: 'flashsale_writer_sale_failures_total',
    help: 'Writer batches of one sale that failed while the other sales kept draining',
    labelNames: ['sale'],
    registers: [registry],
  }),
  ordersUnreplicated: new Counter({
    name: 'flashsale_writer_unreplicated_orders_total',
    help: 'Orders written while their Redis master had fewer replicas than REDIS_MIN_REPLICAS_ACK (the degraded mode): no replica confirmed their reservation',
    registers: [registry],
  }),
  mastersUnreplicated: new Gauge({
    name: 'flashsale_redis_masters_unreplicated',
    help: 'Redis masters with fewer replicas online than REDIS_MIN_REPLICAS_ACK, as this process last saw them: their purchases are answered 503',
    registers: [registry],
  }),
  batchSize: new Histogram({
    name: 'flashsale_writer_batch_size',
    help: 'Orders per writer batch',
    buckets: [1, 5, 10, 50, 100, 250, 500, 1000, 2500, 5000],
    registers: [registry],
  }),
  expiryEvents: new Counter({
    name: 'flashsale_expiry_events_total',
    help: 'Order expiry key events received',
    registers: [registry],
  }),
  ordersClosed: new Counter({
    name: 'flashsale_orders_closed_total',
    help: 'Unpaid orders closed (expired, or cancelled by the buyer: by="cancel"), by who closed them',
    labelNames: ['by'],
    registers: [registry],
  }),
  closeLateness: new Histogram({
    name: 'flashsale_close_lateness_seconds',
    help: 'From payment deadline to order closed',
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [registry],
  }),
  stockRestored: new Counter({
    name: 'flashsale_stock_restored_total',
    help: 'Units of stock given back by expired and cancelled orders',
    registers: [registry],
  }),
  reconciliationFailures: new Counter({
    name: 'flashsale_reconciliation_failures_total',
    help: 'Reconciliations where stock was not conserved',
    labelNames: ['sale'],
    registers: [registry],
  }),
  // applied | refund_due: recorded; duplicate: a redelivery, nothing changed; ignored: a type we do
  // not act on; refused: a bad or stale signature or a malformed event, nothing recorded. provider:
  // its name in the registry (shared/payments/providers/).
  payments: new Counter({
    name: 'flashsale_payments_total',
    help: 'Payment webhook events by provider and outcome',
    labelNames: ['provider', 'outcome'],
    registers: [registry],
  }),
  refundsOpen: new Gauge({
    name: 'flashsale_refunds_open',
    help: 'Payments recorded refund_due and not yet marked paid back, as the replay last counted them',
    registers: [registry],
  }),
  saleStock: new Gauge({
    name: 'flashsale_sale_stock',
    help: 'Units of a sale by where they are, as the replay last reconciled it (unsettled sales)',
    labelNames: ['sale', 'state'],
    registers: [registry],
  }),
  // One series per variant of a sale of several, as the replay last reconciled it: at most
  // MAX_VARIANTS (100) a sale, and gone with the sale once it settles. A sale of one variant has
  // none: its flashsale_sale_stock{state="available"} is that variant's.
  variantUnitsAvailable: new Gauge({
    name: 'flashsale_variant_units_available',
    help: 'Units left to sell of each variant of a sale of several, as the replay last reconciled it (unsettled sales)',
    labelNames: ['sale', 'sku'],
    registers: [registry],
  }),
  replayPasses: new Counter({
    name: 'flashsale_replay_passes_total',
    help: 'Replay passes run to the end (the heartbeat an alert watches)',
    registers: [registry],
  }),
  // Waiting rooms, as the admission loop's last step saw each (shared/admission/loop.ts).
  queueWaiting: new Gauge({
    name: 'flashsale_queue_waiting',
    help: 'Buyers in a waiting room not yet admitted',
    labelNames: ['sale'],
    registers: [registry],
  }),
  queueAvailable: new Gauge({
    name: 'flashsale_queue_available',
    help: "Units left of a waiting room's sale (pending orders hold theirs)",
    labelNames: ['sale'],
    registers: [registry],
  }),
  queuePassesOutstanding: new Gauge({
    name: 'flashsale_queue_passes_outstanding',
    help: 'Admission passes handed out, unused and unexpired',
    labelNames: ['sale'],
    registers: [registry],
  }),
  queueAdmittable: new Gauge({
    name: 'flashsale_queue_admittable',
    help: 'Waiting buyers a room could admit now within its pass budget (units left x overbook - outstanding); 0 before the start, sold out or ended',
    labelNames: ['sale'],
    registers: [registry],
  }),
  queueAdmitted: new Counter({
    name: 'flashsale_queue_admitted_total',
    help: 'Buyers admitted from a waiting room (given a pass)',
    labelNames: ['sale'],
    registers: [registry],
  }),
  queuePassesExpired: new Counter({
    name: 'flashsale_queue_passes_expired_total',
    help: 'Admission passes that expired unused (no-shows)',
    labelNames: ['sale'],
    registers: [registry],
  }),
  // Outbound events (docs/events.md), as `flashsale events` last counted them (every process of it
  // counts the same table; every other process exports nothing).
  eventsPending: new Gauge({
    name: 'flashsale_events_pending',
    help: 'Deliveries of outbound events due to an enabled endpoint and not yet delivered, per endpoint',
    labelNames: ['endpoint'],
    registers: [registry],
  }),
  eventsOldestPending: new Gauge({
    name: 'flashsale_events_oldest_pending_seconds',
    help: 'Age of the oldest event not yet delivered to an enabled endpoint, per endpoint',
    labelNames: ['endpoint'],
    registers: [registry],
  }),
  eventDeliveries: new Counter({
    name: 'flashsale_event_deliveries_total',
    help: 'Delivery attempts of outbound events by outcome: delivered, retry (failed, tried again later), failed (past the retry horizon)',
    labelNames: ['outcome'],
    registers: [registry],
  }),
  backendErrors: new Counter({
    name: 'flashsale_backend_errors_total',
    help: 'Redis and Postgres errors',
    labelNames: ['backend'],
    registers: [registry],
  }),
};

/** flashsale_purchases_total{outcome}: a number each, added to the counter when it is read (a counter's inc hashes its labels every time). */
export function purchaseOutcome(outcome: string): { inc(): void } {
  let tally = outcomeTallies.get(outcome);
  if (tally === undefined) outcomeTallies.set(outcome, (tally = new Tally()));
  return tally;
}
/** flashsale_http_request_duration_seconds{route, method, status}. */
export const httpDurationOf = (route: string, method: string, status: string) =>
  metrics.httpDuration.of(route, method, status);

export function observeClosed(by: ClosedBy, closed: ClosedOrder[]): void {
  if (closed.length > 0) metrics.ordersClosed.inc({ by }, closed.length);
  // A cancel comes before the deadline by design: it is no late or early close.
  if (by !== 'cancel') for (const o of closed) metrics.closeLateness.observe(Math.max(0, o.lateMs) / 1000);
}

/** Counts a failure against the backend it came from, as errors.ts tells it. */
/** Counts a failure against its backend; a connection's own error handler knows which it is. */
export function countBackendError(err: unknown, backend: Backend = backendOf(err)): void {
  metrics.backendErrors.inc({ backend });
}
