// The buyer's page in real headless Chromium (Debian's, through playwright-core) against the real
// API, order writer and expiry listener. Assertions are on what a person sees: visible text.
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { after, afterEach, before, describe, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { startApi } from '../daemons/api.js';
import { AdmissionLoop } from '../shared/admission/loop.js';
import { POSITION_EVERY_MS } from '../shared/http/routes/admission/room-events.js';
import { buildApp } from '../shared/http/app.js';
import { saleKeys } from '../shared/redis/keys.js';
import { ExpiryListener } from '../shared/pipeline/listener.js';
import { signPayload } from '../shared/payments/providers/signed-webhook.js';
import { Purchaser } from '../shared/purchase/purchaser.js';
import type { Sale } from '../shared/sales/sale.js';
import { OrderWriter } from '../shared/pipeline/writer.js';
import { axeViolations, tooWide, VIEWPORTS, type Violation } from './support/axe.js';
import { newWindow, openBrowser, see, shot, WAIT_MS } from './support/browser.js';
import { assertConserved, testEnv, type TestEnv } from './support/env.js';
import {
  closeEntries as closeEntriesOf,
  endBackfillIn,
  HOUR,
  newSale,
  openDraw,
  redisNow,
  refillRoom,
  startNow,
  waitFor,
} from './support/fixtures.js';
import { http } from './support/http.js';
import { tokenId } from './support/pow.js';
import { PAYMENT_WEBHOOK_SECRET, token } from './support/tokens.js';
import { PURCHASE_TOKEN_HEADER } from '../shared/http/routes/purchase.js';

let env: TestEnv;
let api: Awaited<ReturnType<typeof startApi>>;
let browser: Browser;
let listener: ExpiryListener;
const sales: Sale[] = [];
const stops: (() => Promise<unknown>)[] = [];
const pageErrors: string[] = [];

before(async () => {
  // The writer and the listener at their usual pace, not faster: each empty pass reads every sale of
  // the file, and the page follows them at its own (a poll a second, or an event).
  env = await testEnv({ development: true, writerLeaseMs: 1000 });
  api = await startApi(env.config, env.logger);
  listener = new ExpiryListener({ pool: env.pool, redis: env.redis, logger: env.logger, config: env.config });
  await listener.start();
  browser = await openBrowser();
});
after(async () => {
  await browser?.close();
  await listener?.stop();
  await api?.stop();
  await env?.close();
});
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
  assert.deepEqual(pageErrors.splice(0), [], 'the page logged no errors');
  await assertConserved(env, sales);
});

async function sale(fields: Record<string, unknown>): Promise<Sale> {
  const s = await newSale(env, fields);
  sales.push(s);
  return s;
}

function writer(): void {
  const w = new OrderWriter({
    pool: env.pool,
    redis: env.redis,
    logger: env.logger,
    config: { ...env.config, writerId: `w-${randomUUID()}` },
  });
  w.start();
  stops.push(() => w.stop());
}

/** A buyer's own browser window (its own context: storage and, if asked, a clock that is paused or one the test can move forward). */
async function open(
  path: string,
  opts: { port?: number; clock?: 'paused' | 'movable'; viewport?: { width: number; height: number } } = {},
): Promise<Page> {
  const page = await newWindow(browser, `http://127.0.0.1:${opts.port ?? api.port}${path}`, pageErrors, {
    viewport: opts.viewport ?? { width: 520, height: 820 },
    clock: opts.clock,
  });
  stops.push(() => page.context().close());
  return page;
}

const saleUrl = (s: Sale) => `http://127.0.0.1:${api.port}/?sale=${s.id}`;
const buyEnabled = (page: Page, timeout = WAIT_MS) => page.locator('[data-testid="buy"]:enabled').waitFor({ timeout });
/** A buyer's window on the sale, one click on Buy made. */
async function buyOne(s: Sale, user: string): Promise<Page> {
  const page = await open(`/?sale=${s.id}`);
  await page.getByTestId('user-id').fill(user);
  await buyEnabled(page);
  await page.getByTestId('buy').click();
  return page;
}

async function ordersOf(saleId: string): Promise<{ user_id: string; status: string }[]> {
  const res = await env.pool.query<{ user_id: string; status: string }>(
    'select user_id, status from orders where sale_id = $1',
    [saleId],
  );
  return res.rows;
}

/**
 * An order's payment deadline comes now, as at the end of its window: in Postgres (what the close
 * checks) and by its expiry key in Redis, whose `expired` event the listener closes it on. A test
 * sees the countdown of a long window, then ends it, rather than racing a short one.
 */
async function deadlineNow(s: Sale): Promise<void> {
  const moved = await env.pool.query<{ id: string }>(
    "update orders set expires_at = now() where sale_id = $1 and status = 'pending' returning id",
    [s.id],
  );
  assert.equal(moved.rowCount, 1, 'one pending order');
  assert.equal(await env.redis.pexpire(saleKeys(s.id).expiry(moved.rows[0]!.id), 1), 1, 'its expiry key was set');
}

describe('buyer page', () => {
  test('page: countdown to the start, one click buys once, queued, payment countdown, paid', {
    timeout: 60_000,
  }, async () => {
    // Its start five minutes away: the test opens it when it has seen the countdown (startNow), so a
    // slow machine cannot miss the wait.
    const s = await sale({
      name: 'Midnight sneaker drop',
      stock: 3,
      paymentWindowSeconds: 120,
      startsAt: new Date(Date.now() + 5 * 60_000).toISOString(),
      endsAt: new Date(Date.now() + 10 * 60_000).toISOString(),
    });
    const page = await open(`/?sale=${s.id}`);
    await see(page, 'sale-name', 'Midnight sneaker drop');
    await see(page, 'sale-state', 'Upcoming');
    await see(page, 'countdown', /^Starts in (4:[0-5]\d|5:00)$/);
    await see(page, 'stock', '3 of 3 left');
    await see(page, 'price', '€19.99');
    await see(page, 'buy-hint', 'The button opens when the countdown ends.');
    await page.getByTestId('user-id').fill('alice');
    assert.equal(await page.getByTestId('buy').isDisabled(), true, 'no buying before the start');
    await shot(page, '01-countdown');

    await startNow(env, s);
    await see(page, 'sale-state', 'Open', 10_000);
    await see(page, 'countdown', /^Ends in (9:[0-5]\d|10:00)$/);
    await buyEnabled(page);
    await shot(page, '02-open');

    // No writer yet, so the order stays queued long enough to be seen.
    const box = (await page.getByTestId('buy').boundingBox())!;
    await page.mouse.dblclick(box.x + box.width / 2, box.y + box.height / 2);
    assert.equal(await page.getByTestId('buy').isDisabled(), true, 'disabled right after the click');
    await see(page, 'order-status', 'Queued…');
    await see(page, 'order-detail', 'You are in line; your order is being confirmed.');
    await see(page, 'stock', '2 of 3 left');
    assert.equal(await env.redis.hlen(saleKeys(s.id).queued), 1, 'a double click queues one order');
    assert.equal(await page.getByTestId('buy').isDisabled(), true, 'stays disabled while queued');
    assert.equal(await page.getByTestId('user-id').isDisabled(), true, 'the buyer cannot change mid-order');
    await shot(page, '03-queued');

    writer();
    await see(page, 'order-status', 'Waiting for payment');
    await see(page, 'order-detail', 'Pay before the timer runs out to keep your item.');
    await see(page, 'payment-countdown', /^(1:[0-5]\d|2:00)$/);
    assert.equal(await page.getByTestId('buy').isDisabled(), true, 'stays disabled while waiting for payment');
    await shot(page, '04-pending-payment');

    await page.getByTestId('pay').click();
    await see(page, 'order-status', 'Paid');
    await see(page, 'order-detail', 'Thank you! Your order is paid.');
    assert.equal(await page.getByTestId('pay').isHidden(), true);
    assert.equal(await page.getByTestId('payment-countdown').isHidden(), true);
    assert.equal(await page.getByTestId('buy').isDisabled(), true, 'stays disabled after winning');
    assert.equal(await page.getByTestId('message').isHidden(), true, 'no error shown');
    await shot(page, '05-paid');
    assert.deepEqual(await ordersOf(s.id), [{ user_id: 'alice', status: 'paid' }]);
    // The Pay button (DIRECT_PAY, on in development) went through the webhook path: a signed event, recorded.
    const payments = await env.pool.query<{ id: string; order_id: string; outcome: string }>(
      'select p.id, p.order_id, p.outcome from payments p join orders o on o.id = p.order_id where o.sale_id = $1',
      [s.id],
    );
    assert.equal(payments.rows.length, 1);
    assert.deepEqual(payments.rows[0], {
      id: `signed:direct.${payments.rows[0]!.order_id}`,
      order_id: payments.rows[0]!.order_id,
      outcome: 'applied',
    });
  });

  test('page: an unpaid order shows the payment countdown, then "Expired", and the stock is back on sale', {
    timeout: 60_000,
  }, async () => {
    const s = await sale({ name: 'Limited vinyl', stock: 1, paymentWindowSeconds: 120 });
    writer();
    const page = await open(`/?sale=${s.id}`);
    await see(page, 'countdown', 'No end time');
    await page.getByTestId('user-id').fill('bob');
    await buyEnabled(page);
    await page.getByTestId('buy').click();
    await see(page, 'order-status', 'Waiting for payment');
    await see(page, 'payment-countdown', /^(1:[0-5]\d|2:00)$/);
    await see(page, 'sale-state', 'Sold out');
    await see(page, 'stock', '0 of 1 left');

    await deadlineNow(s);
    await see(page, 'order-status', 'Expired', 10_000);
    await see(page, 'order-detail', 'The payment window closed, so the item went back on sale.');
    assert.equal(await page.getByTestId('pay').isHidden(), true, 'no Pay button on an expired order');
    assert.equal(await page.getByTestId('payment-countdown').isHidden(), true);
    await see(page, 'stock', '1 of 1 left');
    await see(page, 'sale-state', 'Open');
    await buyEnabled(page);
    await shot(page, '06-expired');
    assert.deepEqual(await ordersOf(s.id), [{ user_id: 'bob', status: 'expired' }]);
  });

  test('page: a buyer clicking on a stale page after the last item went sees "sold out"; so does anyone arriving later', {
    timeout: 60_000,
  }, async () => {
    const s = await sale({ name: 'Last one standing', stock: 1, paymentWindowSeconds: 60 });
    writer();
    const late = await open(`/?sale=${s.id}`, { clock: 'paused' });
    await late.getByTestId('user-id').fill('carol');
    await see(late, 'stock', '1 of 1 left');
    await buyEnabled(late);

    const winner = await open(`/?sale=${s.id}`);
    await winner.getByTestId('user-id').fill('alice');
    await buyEnabled(winner);
    await winner.getByTestId('buy').click();
    await see(winner, 'order-status', 'Waiting for payment');
    // A second click from the winner goes nowhere.
    await winner.getByTestId('buy').click({ force: true });
    assert.equal(await winner.getByTestId('buy').isDisabled(), true);

    // Carol's page has not polled since: it still offers the item, and she clicks.
    assert.equal(await late.getByTestId('stock').innerText(), '1 of 1 left');
    await late.getByTestId('buy').click();
    await see(late, 'message', 'Sold out: every item has been claimed.');
    await see(late, 'sale-state', 'Sold out');
    await see(late, 'stock', '0 of 1 left');
    await see(late, 'buy-hint', 'Items come back if a buyer does not pay in time.');
    assert.equal(await late.getByTestId('buy').isDisabled(), true);
    assert.equal(await late.getByTestId('order').isHidden(), true, 'no order for the refused buyer');
    await shot(late, '07-sold-out');

    const fresh = await open(`/?sale=${s.id}`);
    await fresh.getByTestId('user-id').fill('dave');
    await see(fresh, 'sale-state', 'Sold out');
    await see(fresh, 'stock', '0 of 1 left');
    assert.equal(await fresh.getByTestId('buy').isDisabled(), true);
    assert.deepEqual(await ordersOf(s.id), [{ user_id: 'alice', status: 'pending' }]);
  });

  test('page: outside development the buyer pastes a token; a bad token is refused in plain words; the provider\'s webhook shows "Paid"', {
    timeout: 60_000,
  }, async () => {
    const s = await sale({ name: 'Production mode', stock: 2, paymentWindowSeconds: 60 });
    writer();
    const config = { ...env.config, development: false, directPay: false };
    const app = buildApp({
      config,
      pool: env.pool,
      redis: env.redis,
      purchaser: new Purchaser(env.redis, config),
      logger: env.logger,
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    stops.push(() => app.close());
    const port = (app.server.address() as { port: number }).port;
    const page = await open(`/?sale=${s.id}`, { port });
    await see(page, 'sale-name', 'Production mode');
    assert.equal(await page.getByTestId('user-id').isHidden(), true, 'no user picker without dev tokens');
    await page
      .getByText('Paste the buyer token (a JWT) your sign-in gave you.', { exact: false })
      .waitFor({ state: 'visible', timeout: WAIT_MS });
    await see(page, 'buy-hint', 'Paste your buyer token to buy.');
    assert.equal(await page.getByTestId('buy').isDisabled(), true);

    await page.getByTestId('token').fill(token('erin', 'not-the-secret-0123456789'));
    await page.getByTestId('buy').click();
    await see(page, 'message', 'Your token was not accepted: paste a fresh buyer token.');
    await page.getByTestId('token').fill(token('erin'));
    await buyEnabled(page);
    await page.getByTestId('buy').click();
    await see(page, 'order-status', 'Waiting for payment');
    await see(
      page,
      'order-detail',
      'Complete the payment with the payment provider before the timer runs out; this page updates by itself.',
    );
    assert.equal(await page.getByTestId('pay').isHidden(), true, 'no Pay button without DIRECT_PAY');
    assert.equal(await page.getByTestId('message').isHidden(), true);
    assert.deepEqual(await ordersOf(s.id), [{ user_id: 'erin', status: 'pending' }]);

    // The provider confirms: a signed event to the webhook, and the page follows it to "Paid".
    const orderId = (await env.pool.query<{ id: string }>('select id from orders where sale_id = $1', [s.id])).rows[0]!
      .id;
    const raw = JSON.stringify({
      id: `evt_${randomUUID()}`,
      type: 'payment.succeeded',
      orderId,
      amount: 1999,
      currency: 'EUR',
    });
    const delivered = await http(port, 'POST', '/api/payments/webhook', {
      body: raw,
      headers: { 'flashsale-signature': signPayload(PAYMENT_WEBHOOK_SECRET, raw) },
    });
    assert.equal(delivered.status, 200, JSON.stringify(delivered.body));
    await see(page, 'order-status', 'Paid');
    await see(page, 'order-detail', 'Thank you! Your order is paid.');
    assert.deepEqual(await ordersOf(s.id), [{ user_id: 'erin', status: 'paid' }]);
  });

  test('page: a reload shows the order as it was, from the buyer\'s list; Cancel gives the item back, and a reload still shows "Cancelled"', {
    timeout: 60_000,
  }, async () => {
    const s = await sale({ name: 'Reload-proof drop', stock: 2, paymentWindowSeconds: 120 });
    writer();
    const page = await buyOne(s, 'hana');
    await see(page, 'order-status', 'Waiting for payment');
    await see(page, 'stock', '1 of 2 left');

    await page.reload();
    await see(page, 'order-status', 'Waiting for payment');
    await see(page, 'order-detail', 'Pay before the timer runs out to keep your item.');
    await see(page, 'payment-countdown', /^(1:[5-9]\d|2:00)$/);
    await see(page, 'cancel', 'Cancel order');
    await see(page, 'order-list', /^Waiting for payment · 1 item · bought .+$/);
    assert.equal(await page.getByTestId('pay').isVisible(), true, 'Pay is back too');
    assert.equal(await page.getByTestId('buy').isDisabled(), true, 'the order is still held');
    assert.equal(await page.getByTestId('user-id').inputValue(), 'hana');
    await shot(page, '08-reloaded');

    await page.getByTestId('cancel').click();
    await see(page, 'order-status', 'Cancelled');
    await see(page, 'order-detail', 'You cancelled this order, so the item went back on sale.');
    await see(page, 'stock', '2 of 2 left');
    await see(page, 'order-list', /^Cancelled · 1 item · bought .+$/);
    assert.equal(await page.getByTestId('pay').isHidden(), true);
    assert.equal(await page.getByTestId('cancel').isHidden(), true);
    assert.equal(await page.getByTestId('payment-countdown').isHidden(), true);
    await buyEnabled(page);
    await shot(page, '09-cancelled');
    assert.deepEqual(await ordersOf(s.id), [{ user_id: 'hana', status: 'cancelled' }]);
    assert.equal(await env.redis.get(saleKeys(s.id).available), '2');

    await page.reload();
    await see(page, 'order-status', 'Cancelled');
    await buyEnabled(page);
    assert.equal(await page.getByTestId('message').isHidden(), true, 'no error shown');
  });

  test('page: an order still queued can be cancelled from the page', { timeout: 60_000 }, async () => {
    const s = await sale({ name: 'Changed my mind', stock: 1, paymentWindowSeconds: 60 });
    const page = await buyOne(s, 'ivan'); // no writer: the order stays queued
    await see(page, 'order-status', 'Queued…');
    await see(page, 'stock', '0 of 1 left');
    await page.getByTestId('cancel').click();
    await see(page, 'order-status', 'Cancelled');
    await see(page, 'stock', '1 of 1 left');
    assert.deepEqual(await ordersOf(s.id), [{ user_id: 'ivan', status: 'cancelled' }]);
    writer(); // the queued winner is drained and stays cancelled
    await waitFor('drained', async () => (await env.redis.hlen(saleKeys(s.id).queued)) === 0);
    assert.deepEqual(await ordersOf(s.id), [{ user_id: 'ivan', status: 'cancelled' }]);
  });

  test('page: a sale with a proof-of-work challenge: the widget solves it, the purchase carries the token it earned', {
    timeout: 60_000,
  }, async () => {
    const s = await sale({ name: 'Bot-proof drop', stock: 2, challenge: 'pow', challengeComplexity: 20_000 });
    const requests: { url: string; token?: string }[] = [];
    const page = await open(`/?sale=${s.id}`);
    page.on('request', (r) => requests.push({ url: r.url(), token: r.headers()['flashsale-purchase-token'] }));
    await page.getByTestId('user-id').fill('jill');
    await buyEnabled(page);
    await page.getByTestId('buy').click();
    await see(page, 'order-status', 'Queued…', 20_000);
    assert.equal(await page.getByTestId('challenge').isVisible(), true, 'the widget showed its work');
    await shot(page, 'pow-solved');
    const purchase = requests.find((r) => r.url.endsWith(`/api/sales/${s.id}/purchases`));
    assert.ok(purchase?.token, 'the purchase carried a purchase token');
    assert.ok(
      requests.some((r) => r.url.endsWith('/altcha-sha.js')),
      "solved in the widget's worker",
    );
    await see(page, 'stock', '1 of 2 left');
    const queued = await env.redis.hvals(saleKeys(s.id).queued);
    assert.equal(queued.length, 1);
    assert.match(queued[0]!, /jill/);
  });

  test("page: a proof-of-work sale not yet open: the buyer's browser solves the challenge while waiting; the click only exchanges it and buys", {
    timeout: 60_000,
  }, async () => {
    // The sale opens once the page has solved (startNow), however long solving takes here.
    const s = await sale({
      name: 'Pre-solved drop',
      stock: 1,
      challenge: 'pow',
      challengeComplexity: 5_000,
      startsAt: new Date(Date.now() + HOUR).toISOString(),
    });
    const page = await open(`/?sale=${s.id}`);
    const asked: string[] = [];
    page.on('request', (r) => asked.push(new URL(r.url()).pathname));
    await page.getByTestId('user-id').fill('kim');
    await page.getByTestId('user-id').press('Tab'); // the buyer is known: the page starts solving
    await page.locator('[data-testid="challenge"] .altcha[data-state="verified"]').waitFor({ timeout: 20_000 });
    assert.equal(await page.getByTestId('buy').isDisabled(), true, 'solved before the sale opened');
    await see(page, 'sale-state', 'Upcoming');
    assert.equal(asked.filter((p) => p.endsWith('/challenge')).length, 1);
    await startNow(env, s);
    await buyEnabled(page, 10_000);
    const clickedAt = asked.length;
    await page.getByTestId('buy').click();
    await see(page, 'order-status', 'Queued…');
    const afterClick = asked.slice(clickedAt).filter((p) => p.startsWith(`/api/sales/${s.id}/`));
    assert.deepEqual(afterClick.slice(0, 2), [`/api/sales/${s.id}/purchase-token`, `/api/sales/${s.id}/purchases`]);
    assert.ok(!afterClick.some((p) => p.endsWith('/challenge')), 'no challenge fetched at the click');
    assert.equal(await env.redis.hlen(saleKeys(s.id).queued), 1);
  });

  test('page: a sale for buyers with a verified email: without the box ticked the buyer is told in plain words and buys nothing; ticked, the click buys', {
    timeout: 60_000,
  }, async () => {
    const s = await sale({ name: 'Members only', stock: 2, buyers: 'verified-email' });
    const page = await open(`/?sale=${s.id}`);
    await page.getByTestId('user-id').fill('vera');
    assert.equal(await page.getByTestId('email-verified').isChecked(), false);
    await see(page, 'buy-hint', 'This sale is only for buyers whose email address is verified.');
    await buyEnabled(page);
    await page.getByTestId('buy').click();
    await see(page, 'message', 'This sale is only for buyers whose email address is verified.');
    assert.equal(await env.redis.get(saleKeys(s.id).available), '2', 'nothing reserved');
    assert.equal(await env.redis.hlen(saleKeys(s.id).queued), 0);

    await page.getByTestId('email-verified').check();
    await buyEnabled(page);
    await page.getByTestId('buy').click();
    await see(page, 'order-status', 'Queued…');
    assert.equal(await page.getByTestId('email-verified').isDisabled(), true, 'the claim cannot change mid-order');
    assert.equal(await env.redis.get(saleKeys(s.id).available), '1');
    await shot(page, '10-verified-email');
  });

  test('page: an unknown sale says so', async () => {
    const page = await open('/?sale=no-such-sale');
    await see(page, 'sale-name', 'No such sale');
    await see(page, 'message', 'There is no sale called "no-such-sale".');
    assert.equal(await page.getByTestId('buy').isDisabled(), true);
  });
});

// The admission loop of the waiting room, ticked by the test (as test/queue.test.ts does): a room
// is judged by Redis's clock, a draw by the test's `at`. The page follows what each tick publishes.
let admission: AdmissionLoop | undefined;
async function admitAt(at = Date.now()): Promise<void> {
  admission ??= new AdmissionLoop({ pool: env.pool, redis: env.redis, logger: env.logger });
  await admission.refreshSales();
  await admission.tick(at);
}
/** A tick after the room's bucket has refilled for a second (the rate's worth of passes). */
async function admitASecondOn(s: Sale): Promise<void> {
  await refillRoom(env, s, 1000);
  await admitAt();
}
const joinRoom = (s: Sale, user: string) => http(api.port, 'POST', `/api/sales/${s.id}/queue`, { user });
/**
 * A stream writes a new position at most once per POSITION_EVERY_MS and drops one that comes
 * sooner (the live loop republishes every second, so it is caught up then; these tests tick by
 * hand): before a tick that only moves the place, let that long pass since the stream's last write.
 */
const streamMayMove = () => new Promise((r) => setTimeout(r, POSITION_EVERY_MS + 100));
const streamOpened = (page: Page) => page.waitForResponse((r) => r.url().includes('/queue/events'));
const progressOf = async (page: Page) => Number(await page.getByTestId('queue-progress').getAttribute('aria-valuenow'));
const queueSale = (fields: Record<string, unknown>) =>
  sale({ admission: 'queue', admitOverbook: 1, passSeconds: 60, ...fields });

describe('waiting room page', () => {
  test('page: a queue sale: join, see the place, the wait and the progress, move up as the loop admits, then buy with the pass', {
    timeout: 60_000,
  }, async () => {
    const s = await queueSale({ name: 'Console restock', stock: 5, admitRatePerSecond: 1 });
    writer();
    // The room opens before anyone joins: nobody admitted yet. Three buyers are in line before the
    // page's buyer; at one pass a second, each step admits one at most.
    await admitAt();
    for (const user of ['q1', 'q2', 'q3']) assert.equal((await joinRoom(s, user)).status, 200);

    const page = await open(`/?sale=${s.id}`);
    await page.getByTestId('user-id').fill('zoe');
    await see(
      page,
      'buy-hint',
      'This sale has a waiting room: join it, and the Buy button appears when it is your turn.',
    );
    assert.equal(await page.getByTestId('buy').isHidden(), true, 'no Buy button before the turn');
    const streaming = streamOpened(page);
    await page.getByTestId('join').click();
    await see(page, 'queue-status', 'You are number 4');
    await see(page, 'queue-ahead', '3 people');
    await see(page, 'queue-wait', 'about 3 s');
    await see(page, 'queue-progress-hint', '0 of the 3 people ahead of you have gone in.');
    assert.equal(await progressOf(page), 0);
    assert.equal(await page.getByTestId('join').isHidden(), true, 'joined once');
    assert.equal(await env.redis.zrank(saleKeys(s.id).queue, 'zoe'), 3, 'zoe holds the fourth place');

    // One admitted: the stream moves zoe up.
    await streaming;
    await streamMayMove();
    await admitASecondOn(s);
    await see(page, 'queue-status', 'You are number 3');
    await see(page, 'queue-ahead', '2 people');
    await see(page, 'queue-progress-hint', '1 of the 3 people ahead of you has gone in.');
    // One step of the four (three ahead, then her own turn).
    assert.equal(await progressOf(page), 25);
    await shot(page, 'queue-01-waiting', 'queue-page.png');

    await streamMayMove();
    await admitASecondOn(s);
    await see(page, 'queue-status', 'You are number 2');
    await streamMayMove();
    await admitASecondOn(s);
    await see(page, 'queue-status', /^You are number 1$/);
    await admitASecondOn(s);
    await see(page, 'queue-status', 'It is your turn!');
    await see(page, 'pass-countdown', /^Your pass buys for (0:[1-5]\d|1:00)$/);
    assert.equal(await progressOf(page), 100);
    await buyEnabled(page);
    await shot(page, 'queue-02-admitted');
    const passExpiry = Number(await env.redis.zscore(saleKeys(s.id).passes, 'zoe'));
    assert.ok(passExpiry > Date.now(), 'zoe holds a live pass');

    await page.getByTestId('buy').click();
    await see(page, 'order-status', 'Waiting for payment');
    assert.equal(await page.getByTestId('queue').isHidden(), true, 'the order takes over from the room');
    assert.equal(await env.redis.zscore(saleKeys(s.id).passes, 'zoe'), '0', 'the pass bought, once');
    assert.deepEqual(await ordersOf(s.id), [{ user_id: 'zoe', status: 'pending' }]);
    assert.equal(await env.redis.get(saleKeys(s.id).available), '4');
    assert.equal(await page.getByTestId('message').isHidden(), true, 'no error shown');
  });

  test('page: a proof-of-work queue sale: the join carries the purchase token the widget earned, the purchase the pass', {
    timeout: 60_000,
  }, async () => {
    const s = await queueSale({
      name: 'Bot-proof room',
      stock: 2,
      admitRatePerSecond: 1000,
      challenge: 'pow',
      challengeComplexity: 5_000,
    });
    const sent: { path: string; token?: string }[] = [];
    const page = await open(`/?sale=${s.id}`);
    page.on('request', (r) =>
      sent.push({ path: new URL(r.url()).pathname, token: r.headers()['flashsale-purchase-token'] }),
    );
    await page.getByTestId('user-id').fill('pia');
    await page.locator('[data-testid="join"]:enabled').waitFor();
    await page.getByTestId('join').click();
    await see(page, 'queue-status', /^(You are in the waiting room|You are number 1)$/, 20_000);
    const joined = sent.find((r) => r.path === `/api/sales/${s.id}/queue`);
    assert.ok(joined?.token, 'the join carried a purchase token');
    // A pow room refuses a join without one (test/queue.test.ts): pia is in.
    assert.notEqual(await env.redis.zscore(saleKeys(s.id).queue, 'pia'), null);

    await admitAt();
    await see(page, 'queue-status', 'It is your turn!');
    await page.getByTestId('buy').click();
    await see(page, 'order-status', 'Queued…');
    const bought = sent.find((r) => r.path === `/api/sales/${s.id}/purchases`);
    const pass = (await http(api.port, 'GET', `/api/sales/${s.id}/queue/me`, { user: 'pia' })).body;
    assert.equal(pass.state, 'used');
    assert.ok(bought?.token && bought.token !== joined.token, 'the purchase carried the pass, not the spent token');
    assert.equal(await env.redis.zscore(saleKeys(s.id).passes, 'pia'), '0');
    const queued = await env.redis.hvals(saleKeys(s.id).queued);
    assert.equal(queued.length, 1);
    assert.match(queued[0]!, /pia/);
    writer();
    await waitFor('drained', async () => (await env.redis.hlen(saleKeys(s.id).queued)) === 0);
  });

  test('page: an admitted buyer who does not buy before the pass runs out is told the turn has passed', {
    timeout: 60_000,
  }, async () => {
    const s = await queueSale({
      name: 'Slow hands',
      stock: 1,
      admitRatePerSecond: 1000,
      passSeconds: 60,
      startsAt: new Date(Date.now() - 60_000).toISOString(),
    });
    const page = await open(`/?sale=${s.id}`, { clock: 'movable' });
    await page.getByTestId('user-id').fill('tom');
    await page.locator('[data-testid="join"]:enabled').waitFor();
    await page.getByTestId('join').click();
    await see(page, 'queue-status', 'You are in the waiting room');
    await admitAt();
    await see(page, 'queue-status', 'It is your turn!');
    await buyEnabled(page);
    // The pass runs out now, however long the page took to show it: in Redis, the authority (by
    // its own clock), and on the page's clock, which then asks.
    await env.redis.zadd(saleKeys(s.id).passes, await redisNow(env.redis), 'tom');
    await page.clock.fastForward(61_000);
    await see(page, 'queue-status', 'Your turn has passed', 10_000);
    await see(page, 'queue-detail', 'Your pass ran out before you bought, so the next buyer in line was let in.');
    assert.equal(await page.getByTestId('buy').isHidden(), true, 'no Buy button without a live pass');
    assert.equal(await page.getByTestId('pass-countdown').isHidden(), true);
    assert.ok(
      Number(await env.redis.zscore(saleKeys(s.id).passes, 'tom')) < (await redisNow(env.redis)),
      'the pass is past its expiry',
    );
    assert.deepEqual(await ordersOf(s.id), []);
    assert.equal(await env.redis.get(saleKeys(s.id).available), '1');
  });

  test('page: a buyer waiting in a room that sells out is told so, and keeps the place', {
    timeout: 60_000,
  }, async () => {
    const s = await queueSale({ name: 'Single unit', stock: 1, admitRatePerSecond: 1000 });
    await admitAt(); // open, nobody in line yet
    assert.equal((await joinRoom(s, 'first')).status, 200);
    const page = await open(`/?sale=${s.id}`);
    await page.getByTestId('user-id').fill('sam');
    const streaming = streamOpened(page);
    await page.getByTestId('join').click();
    await see(page, 'queue-status', 'You are number 2');

    // `first` is admitted (one pass for the one unit) and buys with it.
    await streaming;
    await streamMayMove();
    await admitASecondOn(s);
    await see(page, 'queue-status', 'You are number 1');
    const pass = (await http(api.port, 'GET', `/api/sales/${s.id}/queue/me`, { user: 'first' })).body.pass as string;
    const bought = await http(api.port, 'POST', `/api/sales/${s.id}/purchases`, {
      user: 'first',
      body: { qty: 1 },
      headers: { [PURCHASE_TOKEN_HEADER]: pass },
    });
    assert.equal(bought.status, 202, JSON.stringify(bought.body));
    await admitAt();
    await see(page, 'queue-status', 'Sold out for now');
    await see(
      page,
      'queue-detail',
      'Every item is claimed. You keep your place: if a buyer does not pay in time, the line moves again.',
    );
    assert.equal(await page.getByTestId('buy').isHidden(), true);
    assert.equal(await page.getByTestId('queue-facts').isHidden(), true);
    await see(page, 'stock', '0 of 1 left');
    await see(page, 'sale-state', 'Sold out');
    await shot(page, 'queue-03-sold-out');
    assert.equal(await env.redis.get(saleKeys(s.id).available), '0');
    assert.equal(await env.redis.zscore(saleKeys(s.id).passes, 'sam'), null, 'sam was never given a pass');
    writer();
    await waitFor('drained', async () => (await env.redis.hlen(saleKeys(s.id).queued)) === 0);
  });
});

// A draw, made by the admission loop's tick at the test's clock (as test/draw.test.ts does): the
// page follows the entry the tick moves.
/** A draw whose entries are open (support/fixtures.ts openDraw). */
const drawSale = (fields: Record<string, unknown>) => sale({ ...openDraw(), ...fields });
const closeEntries = (s: Sale) => closeEntriesOf(env, s);
const entryRows = async (s: Sale) =>
  (
    await env.pool.query<{
      buyer: string;
      secret: string;
      status: string;
      draw_rank: number | null;
      order_id: string | null;
    }>(
      'select buyer, secret, status, draw_rank, order_id from draw_entries where sale_id = $1 order by draw_rank nulls last, buyer',
      [s.id],
    )
  ).rows;
const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');
const enterEnabled = (page: Page, timeout = WAIT_MS) =>
  page.locator('[data-testid="enter"]:enabled').waitFor({ timeout });

describe('draw page', () => {
  test('page: a draw: enter, "in the draw", the loop makes the draw: the winner\'s page shows the order to pay, the other\'s "waiting", then "not drawn" after backfillUntil', {
    timeout: 90_000,
  }, async () => {
    let s = await drawSale({ name: 'Festival tickets', stock: 1, paymentWindowSeconds: 120 });
    writer(); // the draw's orders are written as any winner's
    const pages = new Map<string, Page>();
    for (const [user, entries] of [
      ['ada', '1 entry'],
      ['ben', '2 entries'],
    ] as const) {
      const page = await open(`/?sale=${s.id}`);
      pages.set(user, page);
      await page.getByTestId('user-id').fill(user);
      await see(
        page,
        'buy-hint',
        /^Entries close at .+, \d{1,2}:\d\d [AP]M; then the draw is made, and the first entrant drawn gets an order\.$/,
      );
      assert.equal(await page.getByTestId('buy').isHidden(), true, 'a draw has no Buy button');
      await see(page, 'countdown', /^Draw in (59:\d\d|1:00:00)$/);
      await see(page, 'draw-seed-hash', s.seedSha256!);
      assert.equal(
        await page.getByTestId('draw-seed-row').isHidden(),
        true,
        'the seed stays secret until entries close',
      );
      await enterEnabled(page);
      await page.getByTestId('enter').click();
      await see(page, 'draw-status', "You're in the draw");
      await see(
        page,
        'draw-detail',
        new RegExp(`^${entries}; the draw is made at .+\\. Keep this page open, or come back then\\.$`),
      );
      const secret = (await entryRows(s)).find((r) => r.buyer === user)!.secret;
      await see(page, 'draw-secret', secret);
      await see(page, 'draw-ticket', sha256(`${s.id}:${user}:${secret}`));
      assert.equal(await page.getByTestId('enter').isHidden(), true, 'entered once');
    }
    await shot(pages.get('ben')!, 'draw-01-entered');
    assert.deepEqual(
      (await entryRows(s)).map((r) => [r.buyer, r.status]),
      [
        ['ada', 'entered'],
        ['ben', 'entered'],
      ],
    );

    s = await closeEntries(s);
    await admitAt(Date.now());
    const [won, waiting] = await entryRows(s);
    assert.deepEqual([won!.status, won!.draw_rank, waiting!.status, waiting!.draw_rank], ['won', 1, 'waiting', 2]);
    const winner = pages.get(won!.buyer)!;
    const other = pages.get(waiting!.buyer)!;

    await see(winner, 'draw-status', 'You were drawn!');
    await see(
      winner,
      'draw-detail',
      'Drawn at rank 1 of 2: your order is below. Pay before its timer runs out, or it goes to the next in line.',
    );
    await see(winner, 'order-status', 'Waiting for payment');
    await see(winner, 'payment-countdown', /^(1:[0-5]\d|2:00)$/);
    await see(other, 'draw-status', 'Drawn at rank 2; not yet');
    await see(
      other,
      'draw-detail',
      /^Units that come back \(an order not paid in time, or cancelled\) go to the next in line until .+\. Keep this page open\.$/,
    );
    assert.equal(await other.getByTestId('order').isHidden(), true, 'no order for the one waiting');
    // The fairness facts, once entries have closed: the seed, which hashes to what was published.
    for (const page of [winner, other]) {
      await see(page, 'draw-seed', s.seed!);
      await see(page, 'draw-check', /^To check: sha256\(seed\) is the hash above;/);
      assert.equal(await page.getByTestId('draw-record').getAttribute('href'), `/api/sales/${s.id}/draw`);
    }
    assert.equal(sha256(s.seed!), s.seedSha256);
    assert.deepEqual(await ordersOf(s.id), [{ user_id: won!.buyer, status: 'pending' }]);
    assert.equal(
      (await entryRows(s))[0]!.order_id,
      (await env.pool.query<{ id: string }>('select id from orders where sale_id = $1', [s.id])).rows[0]!.id,
    );
    await shot(winner, 'draw-02-won', 'draw-page.png');
    await shot(other, 'draw-03-waiting');

    // Backfill over: the one waiting has lost, and a reload says the same.
    // Backfill ends by Postgres's clock, which judges it.
    s = await endBackfillIn(env, s);
    await admitAt(Date.now());
    await see(other, 'draw-status', 'Not drawn this time');
    await see(other, 'draw-detail', /^Drawn at rank 2 of 2; no unit came back to your place before .+\.$/);
    await shot(other, 'draw-04-lost');
    assert.deepEqual(
      (await entryRows(s)).map((r) => r.status),
      ['won', 'lost'],
    );
    await other.reload();
    await see(other, 'draw-status', 'Not drawn this time');
    assert.equal(await other.getByTestId('enter').isHidden(), true);
    assert.equal(await other.getByTestId('buy-hint').isHidden(), true, 'the panel says it all: no hint for an entrant');

    await winner.getByTestId('pay').click();
    await see(winner, 'order-status', 'Paid');
    assert.deepEqual(await ordersOf(s.id), [{ user_id: won!.buyer, status: 'paid' }]);
    assert.equal(await winner.getByTestId('message').isHidden(), true, 'no error shown');
  });

  test('page: a drawn winner who cancels is told the unit went to the next in line, whose page then shows the order', {
    timeout: 60_000,
  }, async () => {
    let s = await drawSale({ name: 'Second chance', stock: 1, paymentWindowSeconds: 120 });
    writer();
    // Entered elsewhere: each page finds its entry on load (GET .../entries/me).
    for (const user of ['cal', 'dee'])
      assert.equal((await http(api.port, 'POST', `/api/sales/${s.id}/entries`, { user })).status, 200);
    s = await closeEntries(s);
    await admitAt(Date.now());
    const [first, second] = await entryRows(s);
    const pages = new Map<string, Page>();
    for (const user of ['cal', 'dee']) {
      const page = await open(`/?sale=${s.id}`);
      await page.getByTestId('user-id').fill(user);
      await page.getByTestId('user-id').press('Tab');
      pages.set(user, page);
    }
    const winner = pages.get(first!.buyer)!;
    const next = pages.get(second!.buyer)!;
    await see(winner, 'order-status', 'Waiting for payment');
    await see(winner, 'draw-status', 'You were drawn!');
    await see(next, 'draw-status', 'Drawn at rank 2; not yet');

    await winner.getByTestId('cancel').click();
    await see(winner, 'order-status', 'Cancelled');
    await see(winner, 'draw-status', 'You were drawn');
    await see(
      winner,
      'draw-detail',
      'Drawn at rank 1 of 2; your order was cancelled, so its unit went to the next in line.',
    );
    await see(winner, 'order-detail', 'You cancelled this order.');
    await shot(winner, 'draw-05-cancelled');
    await admitAt(Date.now());
    await see(next, 'draw-status', 'You were drawn!');
    await see(next, 'order-status', 'Waiting for payment');
    assert.deepEqual(
      (await entryRows(s)).map((r) => [r.buyer, r.status]),
      [
        [first!.buyer, 'won'],
        [second!.buyer, 'won'],
      ],
    );
    assert.deepEqual(
      (await ordersOf(s.id)).sort((a, b) => a.user_id.localeCompare(b.user_id)),
      [
        { user_id: first!.buyer, status: 'cancelled' },
        { user_id: second!.buyer, status: 'pending' },
      ].sort((a, b) => a.user_id.localeCompare(b.user_id)),
    );
  });

  test('page: a draw before its entries open says when they open; after they close, a buyer who did not enter is told so', {
    timeout: 60_000,
  }, async () => {
    const early = await drawSale({
      name: 'Not yet',
      stock: 1,
      entriesOpenAt: new Date(Date.now() + HOUR).toISOString(),
      entriesCloseAt: new Date(Date.now() + 2 * HOUR).toISOString(),
    });
    const page = await open(`/?sale=${early.id}`);
    await page.getByTestId('user-id').fill('cy');
    await see(page, 'buy-hint', /^Entries open at .+\.$/);
    await see(page, 'countdown', /^Entries open in (59:\d\d|1:00:00)$/);
    assert.equal(await page.getByTestId('enter').isDisabled(), true);
    const late = await drawSale({
      name: 'Too late',
      stock: 1,
      startsAt: new Date(Date.now() - 2 * HOUR).toISOString(),
      entriesCloseAt: new Date(Date.now() - HOUR).toISOString(),
    });
    // The same window, led to the other sale: it loads afresh.
    const closed = page;
    await closed.goto(saleUrl(late));
    await closed.getByTestId('user-id').fill('cy');
    await see(closed, 'buy-hint', 'Entries are closed.');
    assert.equal(await closed.getByTestId('enter').isHidden(), true);
    // Closed, but the draw is not made: the seed stays secret until Postgres says it is.
    assert.equal(await closed.getByTestId('draw-seed-row').isHidden(), true, 'no seed before the draw is made');
    assert.equal(await closed.getByTestId('draw-ticket-row').isHidden(), true, 'no ticket without an entry');
    assert.equal(
      (await env.pool.query('select 1 from draw_entries where sale_id = any($1::text[])', [[early.id, late.id]]))
        .rowCount,
      0,
    );
  });

  test('page: a proof-of-work draw: the entry carries the purchase token the widget earned, and spends it', {
    timeout: 60_000,
  }, async () => {
    const s = await drawSale({ name: 'Bot-proof draw', stock: 1, challenge: 'pow', challengeComplexity: 5_000 });
    const sent: { path: string; token?: string }[] = [];
    const page = await open(`/?sale=${s.id}`);
    page.on('request', (r) =>
      sent.push({ path: new URL(r.url()).pathname, token: r.headers()['flashsale-purchase-token'] }),
    );
    await page.getByTestId('user-id').fill('pat');
    await enterEnabled(page);
    await page.getByTestId('enter').click();
    await see(page, 'draw-status', "You're in the draw", 20_000);
    const entry = sent.find((r) => r.path === `/api/sales/${s.id}/entries`);
    assert.ok(entry?.token, 'the entry carried a purchase token');
    assert.equal(await env.redis.get(saleKeys(s.id).tokenUsed(tokenId(entry.token))), 'entry', 'the entry spent it');
    assert.deepEqual(
      (await entryRows(s)).map((r) => [r.buyer, r.status]),
      [['pat', 'entered']],
    );
  });
});

describe('buyer page accessibility', () => {
  /** axe-core's findings on the page as shown, and whether it is wider than the window, under `where`. */
  async function audit(page: Page, where: string, found: Record<string, Violation[] | string>): Promise<void> {
    const violations = await axeViolations(page);
    if (violations.length > 0) found[where] = violations;
    const width = await tooWide(page);
    if (width) found[`${where}: width`] = width;
  }

  test('page: axe-core finds no violation at desktop and phone sizes (a sale open, an order to pay, a waiting room, a draw entered), and nothing is wider than a 390 px phone', {
    timeout: 120_000,
  }, async () => {
    const open1 = await sale({
      name: 'Accessible drop with a rather long name for a phone screen',
      stock: 2,
      paymentWindowSeconds: 120,
    });
    const room = await queueSale({ name: 'Accessible room', stock: 2, admitRatePerSecond: 1 });
    const draw = await drawSale({ name: 'Accessible draw', stock: 1 });
    writer();
    const found: Record<string, Violation[] | string> = {};
    for (const [size, viewport] of Object.entries(VIEWPORTS)) {
      // One window per size, led from sale to sale: each page loads afresh, and its storage holds
      // only the buyer's name, typed again on each.
      const page = await open(`/?sale=${open1.id}`, { viewport });
      await page.getByTestId('user-id').fill(`a11y-${size}`);
      await buyEnabled(page);
      await audit(page, `${size}, open`, found);
      await page.getByTestId('buy').click();
      await see(page, 'order-status', 'Waiting for payment');
      await audit(page, `${size}, waiting for payment`, found);
      if (size === 'phone') await shot(page, 'a11y-phone-order');

      await page.goto(saleUrl(room));
      await page.getByTestId('user-id').fill(`a11y-${size}`);
      await page.getByTestId('join').click();
      await see(page, 'queue-status', /^(You are in the waiting room|You are number 1)$/);
      await audit(page, `${size}, in a waiting room`, found);

      await page.goto(saleUrl(draw));
      await page.getByTestId('user-id').fill(`a11y-${size}`);
      await enterEnabled(page);
      await page.getByTestId('enter').click();
      await see(page, 'draw-status', "You're in the draw");
      await audit(page, `${size}, in a draw`, found);
      await page.context().close(); // done with: its polling would only slow the window that follows
    }
    assert.deepEqual(found, {}, `accessibility and fit:\n${JSON.stringify(found, null, 2)}`);
    await waitFor('drained', async () => (await env.redis.hlen(saleKeys(open1.id).queued)) === 0);
  });
});
