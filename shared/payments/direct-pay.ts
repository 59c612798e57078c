// An order's direct payment (DIRECT_PAY, development and demos): the event a provider would send,
// made, signed and received by the API itself through the real payment path.
import { HttpError } from '../runtime/errors.js';
import { checkOrderId, queuedOrder } from '../orders/view.js';
import { findOrder } from '../orders/queries.js';
import { getSale } from '../sales/sale.js';
import { NotCharged, receivePayment, type PaymentDeps } from './decide.js';
import type { RefundReason } from './queries.js';
import { PAYMENT_SUCCEEDED, type SignedWebhook } from './providers/signed-webhook.js';

/** What DIRECT_PAY needs: the payment path, and the provider whose events it makes. */
export interface DirectPayDeps extends PaymentDeps {
  signed: SignedWebhook;
}

/**
 * DIRECT_PAY (development and demos): the owner pays from the page, and the API makes the event a
 * provider would send, signs it with the webhook secret and receives it like any other, so a demo
 * runs the real payment path and records a payment. It pays what a provider would charge: the
 * sale's price times qty in its currency (a sale made before prices: 0 XXX, ISO's "no currency").
 * One event id per order, with the same bytes each time: a second click is a redelivery and changes nothing.
 * An order it cannot pay (paid by another payment, cancelled, expired) is 409, with nothing recorded.
 */
export async function payOrder(
  deps: DirectPayDeps,
  orderId: string,
  userId: string,
): Promise<{ orderId: string; status: 'paid' }> {
  const { pool, redis } = deps;
  const saleId = checkOrderId(orderId);
  let row = await findOrder(pool, orderId);
  if (row?.user_id !== userId) {
    if (await queuedOrder(redis, saleId, orderId, userId)) throw new HttpError('order_not_ready');
    // The writer forgets a queued winner only after its row is committed: look once more.
    row = await findOrder(pool, orderId);
    if (row?.user_id !== userId) throw new HttpError('order_not_found');
  }
  const sale = await getSale(pool, row.sale_id);
  // The order's variant's price, else the sale's.
  const price = sale?.variants.find((v) => v.sku === row.sku)?.priceCents ?? sale?.price;
  const amount = price == null ? 0 : price * row.qty;
  const raw = JSON.stringify({
    id: `direct.${orderId}`,
    type: PAYMENT_SUCCEEDED,
    orderId,
    amount,
    currency: sale?.currency ?? 'XXX',
  });
  try {
    // chargedOnly: a provider would never have charged an order it could not pay, so no refund is due.
    const answer = await receivePayment(deps, deps.signed, Buffer.from(raw), deps.signed.headersFor(raw), {
      chargedOnly: true,
    });
    // Applied now, or a second click (the same event, recorded applied).
    if (answer.outcome === 'applied') return { orderId, status: 'paid' };
    throw new Error(`direct payment of ${orderId} recorded ${answer.outcome}: ${answer.reason ?? 'no reason'}`);
  } catch (err) {
    if (err instanceof NotCharged)
      throw UNCHARGED[err.reason]?.() ?? new Error(`direct payment of ${orderId} refused: ${err.reason}`);
    throw err;
  }
}

/** DIRECT_PAY's answer for an order it cannot pay: nothing charged, nothing recorded. */
const UNCHARGED: Partial<Record<RefundReason, () => HttpError>> = {
  already_paid: () =>
    new HttpError('order_paid', 'This order is paid already, by another payment: nothing was charged.'),
  order_cancelled: () =>
    new HttpError('order_cancelled', 'This order was cancelled: it can no longer be paid. Nothing was charged.'),
  order_expired: () =>
    new HttpError('order_expired', 'The payment window of this order has closed. Nothing was charged.'),
};
