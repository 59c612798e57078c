// The payment-provider registry, proved with a second provider that costs one file and one
// registration line (support/stripe-provider.ts, Stripe-shaped): the API takes its events at
// /api/payments/stripe/webhook, upper-cases its `eur` before comparing it with the sale's EUR, counts
// them under provider="stripe", documents its route and security scheme, and refuses a forged one
// changing nothing. An unknown provider's webhook is 404 provider_not_found.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, test } from 'node:test';
import { ConfigError } from '../shared/config/index.js';
import { metrics } from '../shared/runtime/metrics.js';
import { createProviders, registerProvider } from '../shared/payments/providers/index.js';
import { signedWebhook, signPayload } from '../shared/payments/providers/signed-webhook.js';
import type { Sale } from '../shared/sales/sale.js';
import { apiSuite } from './support/api.js';
import { assertConserved, type TestEnv } from './support/env.js';
import { newSale, drainWriter } from './support/fixtures.js';
import type { Inject } from './support/http.js';
import { stateSnapshot } from './support/snapshot.js';
import { intentSucceeded, stripeProvider, stripeSignature } from './support/stripe-provider.js';
import { PAYMENT_WEBHOOK_SECRET } from './support/tokens.js';

registerProvider(stripeProvider);

let env: TestEnv;
let call: Inject;
const sales: Sale[] = [];

// Registered first, so it runs before the suite closes the env.
after(async () => {
  if (env) await assertConserved(env, sales);
});
apiSuite((s) => ({ env, call } = s));

/** One pending order of a new sale (1999 EUR a unit), written to Postgres. */
async function pendingOrder(user: string): Promise<string> {
  const sale = await newSale(env, { stock: 2, paymentWindowSeconds: 3600 });
  sales.push(sale);
  const r = await call('POST', `/api/sales/${sale.id}/purchases`, { body: { qty: 1 }, user });
  assert.equal(r.status, 202);
  await drainWriter(env, `w-${sale.id}`);
  return r.body.orderId as string;
}

const stripe = (raw: string, signature: string) =>
  call('POST', '/api/payments/stripe/webhook', { body: raw, headers: { 'stripe-signature': signature } });
const counted = async (provider: string, outcome: string) =>
  (await metrics.payments.get()).values.find((v) => v.labels.provider === provider && v.labels.outcome === outcome)
    ?.value ?? 0;
const status = async (orderId: string) =>
  (await env.pool.query<{ status: string }>('select status from orders where id = $1', [orderId])).rows[0]?.status;
const everything = async () => ({
  ...(await stateSnapshot(env)),
  payments: (
    await env.pool.query<{ r: string }>('select row_to_json(p)::text as r from payments p order by id')
  ).rows.map((x) => x.r),
});

test("payment registry: a Stripe-shaped event pays its order at /api/payments/stripe/webhook, its lower-case eur matching the sale's EUR", async () => {
  const orderId = await pendingOrder('sofia');
  const applied = await counted('stripe', 'applied');
  const raw = intentSucceeded(`evt_${randomUUID()}`, orderId, 1999, 'eur');
  const r = await stripe(raw, stripeSignature(raw));
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body, { id: JSON.parse(raw).id, outcome: 'applied' });
  assert.equal(await status(orderId), 'paid');
  const rows = await env.pool.query('select id, outcome, amount, currency from payments where order_id = $1', [
    orderId,
  ]);
  assert.deepEqual(rows.rows, [
    { id: `stripe:${JSON.parse(raw).id}`, outcome: 'applied', amount: 1999, currency: 'EUR' },
  ]);
  assert.equal(await counted('stripe', 'applied'), applied + 1);
  const exposed = (await call('GET', '/metrics')).body as string;
  assert.match(exposed, /^flashsale_payments_total\{provider="stripe",outcome="applied"\} 1$/m);
  // Another currency is still another currency, in whatever case it comes.
  const other = await pendingOrder('sam');
  const usd = intentSucceeded(`evt_${randomUUID()}`, other, 1999, 'usd');
  assert.deepEqual((await stripe(usd, stripeSignature(usd))).body, {
    id: JSON.parse(usd).id,
    outcome: 'refund_due',
    reason: 'currency_mismatch',
  });
  assert.equal(await status(other), 'pending');
});

test('payment registry: a forged, unsigned or stale Stripe-shaped delivery is 400 and changes nothing; it counts as refused under provider="stripe"', async () => {
  const orderId = await pendingOrder('rhea');
  const raw = intentSucceeded(`evt_${randomUUID()}`, orderId, 1999, 'eur');
  const signedAsUs = signPayload(PAYMENT_WEBHOOK_SECRET, raw);
  const before = await everything();
  const refused = await counted('stripe', 'refused');
  const cases: [string, Promise<Awaited<ReturnType<typeof stripe>>>, string][] = [
    ['another secret', stripe(raw, stripeSignature(raw, undefined, 'whsec_not_the_secret_0123')), 'invalid_signature'],
    [
      "the signed webhook's header",
      call('POST', '/api/payments/stripe/webhook', { body: raw, headers: { 'flashsale-signature': signedAsUs } }),
      'invalid_signature',
    ],
    ['tampered amount', stripe(raw.replace('1999', '1'), stripeSignature(raw)), 'invalid_signature'],
    ['stale', stripe(raw, stripeSignature(raw, Math.floor(Date.now() / 1000) - 3600)), 'stale_signature'],
  ];
  for (const [name, reply, code] of cases) {
    const r = await reply;
    assert.equal(r.status, 400, name);
    assert.equal(r.body.error, code, name);
    assert.equal(typeof r.body.message, 'string', name);
  }
  assert.equal(await counted('stripe', 'refused'), refused + cases.length);
  // The same Stripe-shaped bytes at the signed webhook: another provider, another header, refused too.
  const atSigned = await call('POST', '/api/payments/signed/webhook', {
    body: raw,
    headers: { 'stripe-signature': stripeSignature(raw) },
  });
  assert.equal(atSigned.status, 400);
  assert.equal(atSigned.body.error, 'invalid_signature');
  assert.deepEqual(await everything(), before);
  assert.equal(await status(orderId), 'pending');
});

test('payment registry: the signed webhook answers at /api/payments/signed/webhook as at its first address; an unknown provider is 404 provider_not_found', async () => {
  const orderId = await pendingOrder('tomas');
  const event = JSON.stringify({
    id: `evt_${randomUUID()}`,
    type: 'payment.succeeded',
    orderId,
    amount: 1999,
    currency: 'EUR',
  });
  const before = await everything();
  const unknown = await call('POST', '/api/payments/paypal/webhook', {
    body: event,
    headers: { 'flashsale-signature': signPayload(PAYMENT_WEBHOOK_SECRET, event) },
  });
  assert.equal(unknown.status, 404);
  assert.equal(unknown.body.error, 'provider_not_found');
  assert.match(unknown.body.message as string, /\/api\/payments\/signed\/webhook, \/api\/payments\/stripe\/webhook/);
  assert.deepEqual(await everything(), before);
  const r = await call('POST', `/api/payments/${signedWebhook.name}/webhook`, {
    body: event,
    headers: { 'flashsale-signature': signPayload(PAYMENT_WEBHOOK_SECRET, event) },
  });
  assert.deepEqual(r.body, { id: JSON.parse(event).id, outcome: 'applied' });
  // The first address is the same provider: the same event there is its redelivery.
  const alias = await call('POST', '/api/payments/webhook', {
    body: event,
    headers: { 'flashsale-signature': signPayload(PAYMENT_WEBHOOK_SECRET, event) },
  });
  assert.deepEqual(alias.body, { id: JSON.parse(event).id, outcome: 'applied', duplicate: true });
  assert.equal(await status(orderId), 'paid');
});

test("payment registry: the OpenAPI document lists each provider's webhook with its security scheme, and the first address", async () => {
  const doc = (await call('GET', '/docs/json')).body as {
    paths: Record<string, { post?: { security?: unknown } }>;
    components: { securitySchemes: Record<string, { name?: string }> };
  };
  assert.deepEqual(doc.paths['/api/payments/stripe/webhook']?.post?.security, [{ stripeSignature: [] }]);
  assert.deepEqual(doc.paths['/api/payments/signed/webhook']?.post?.security, [{ webhook: [] }]);
  assert.deepEqual(doc.paths['/api/payments/webhook']?.post?.security, [{ webhook: [] }]);
  assert.equal(doc.components.securitySchemes.stripeSignature?.name, 'Stripe-Signature');
  assert.equal(doc.components.securitySchemes.webhook?.name, 'Flashsale-Signature');
  assert.equal(doc.paths['/api/payments/{provider}/webhook'], undefined, 'the unknown-provider answer is no operation');
});

test('payment registry: a provider is registered once, under a name that fits a path and a recorded id, and made only with the settings it needs', () => {
  assert.throws(() => registerProvider(stripeProvider), /registered twice/);
  assert.throws(() => registerProvider({ ...stripeProvider, name: 'Not/A name' }), /lower-case letters/);
  assert.throws(
    () => createProviders({ ...env.config, paymentWebhookSecret: undefined }),
    (err) =>
      err instanceof ConfigError &&
      err.message.startsWith('PAYMENT_WEBHOOK_SECRET is not set: the signed payment provider'),
  );
  assert.deepEqual([...createProviders(env.config).keys()], ['signed', 'stripe']);
});
