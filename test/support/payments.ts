// A payment as the signed webhook provider sends it, answered through `inject`.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { signPayload } from '../../shared/payments/providers/signed-webhook.js';
import type { Inject } from './http.js';
import { PAYMENT_WEBHOOK_SECRET } from './tokens.js';

/** Pays `orderId` (EUR, `amount` minor units) and asserts the webhook took it. */
export async function paySigned(call: Inject, orderId: string, amount = 1999): Promise<void> {
  const raw = JSON.stringify({
    id: `evt_${randomUUID()}`,
    type: 'payment.succeeded',
    orderId,
    amount,
    currency: 'EUR',
  });
  const signature = signPayload(PAYMENT_WEBHOOK_SECRET, raw, Math.floor(Date.now() / 1000));
  const r = await call('POST', '/api/payments/webhook', { body: raw, headers: { 'flashsale-signature': signature } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
}
