// A sale of several variants on the pages, in real headless Chromium against the real API: the
// buyer's size picker (live availability, the chosen size's price, the purchase naming it, a size
// refused as sold out) and /admin's table of variants. What the pages show is checked as text and
// state in the DOM; what they did, in Postgres and Redis. A one-variant sale's page is page.test.ts's.
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { AdmissionLoop } from '../shared/admission/loop.js';
import { saleKeys } from '../shared/redis/keys.js';
import type { Sale } from '../shared/sales/sale.js';
import { axeViolations, tooWide, VIEWPORTS } from './support/axe.js';
import { newWindow, openBrowser, see, shot } from './support/browser.js';
import { apiEnv } from './support/api.js';
import { assertConserved, type TestEnv } from './support/env.js';
import { drainWriter, newSale, refillRoom } from './support/fixtures.js';
import { http } from './support/http.js';
import { ADMIN_TOKEN } from './support/tokens.js';

let env: TestEnv;
let port: number;
let browser: Browser;
const sales: Sale[] = [];
const pageErrors: string[] = [];
const windows: Page[] = [];

apiEnv(
  (s) => {
    env = s.env;
    port = s.api.port;
  },
  { development: true },
);
before(async () => {
  browser = await openBrowser();
});
after(() => browser?.close());
afterEach(async () => {
  for (const page of windows.splice(0)) await page.context().close();
  assert.deepEqual(pageErrors.splice(0), [], 'the pages logged no errors');
  await assertConserved(env, sales);
});

/** Three sizes, the middle one dearer (EUR 24.99 against the sale's 19.99). */
const SIZES = [
  { sku: 'EU40', label: 'EU 40', stock: 2 },
  { sku: 'EU41', label: 'EU 41', stock: 2, priceCents: 2499 },
  { sku: 'EU42', label: 'EU 42', stock: 1 },
];

async function sale(fields: Record<string, unknown>): Promise<Sale> {
  const s = await newSale(env, { paymentWindowSeconds: 600, ...fields });
  sales.push(s);
  return s;
}

async function open(path: string, opts: Parameters<typeof newWindow>[3] = {}): Promise<Page> {
  const page = await newWindow(browser, `http://127.0.0.1:${port}${path}`, pageErrors, {
    viewport: VIEWPORTS.phone,
    ...opts,
  });
  windows.push(page);
  return page;
}

const buy = (s: Sale, user: string, variant: string) =>
  http(port, 'POST', `/api/sales/${s.id}/purchases`, { user, body: { qty: 1, variant } });

/** A size's chip as the buyer sees it: its words, and whether it is greyed, disabled and chosen. */
async function chip(page: Page, sku: string) {
  const label = page.getByTestId(`size-${sku}`);
  const input = label.locator('input');
  return {
    text: (await label.textContent())?.trim(),
    soldOut: await label.getAttribute('data-sold-out'),
    disabled: await input.isDisabled(),
    checked: await input.isChecked(),
  };
}

/** Waits until the size's chip is greyed (or not), as the page's poll or a refusal makes it. */
const soldOutShown = (page: Page, sku: string, soldOut = true) =>
  page.locator(`[data-testid="size-${sku}"][data-sold-out="${soldOut}"]`).waitFor();

const ordersOf = async (s: Sale) =>
  (
    await env.pool.query<{ user_id: string; sku: string; status: string }>(
      'select user_id, sku, status from orders where sale_id = $1 order by user_id',
      [s.id],
    )
  ).rows;

describe('a sale of several variants on the pages', () => {
  test('buyer page: the sizes as a picker with their units left, the chosen size priced and bought (the order has its sku), a size selling out greys live, a stale click on a sold-out size says which are left; /admin shows each variant', {
    timeout: 120_000,
  }, async () => {
    const one = await sale({ name: 'One-size tee', stock: 3 });
    const s = await sale({ name: 'Runner, three sizes', variants: SIZES });

    // A one-variant sale first, in the same window: no picker, the sale's price, Buy open as before variants.
    const page = await open(`/?sale=${one.id}`);
    await page.getByTestId('user-id').fill('alice');
    await see(page, 'sale-name', 'One-size tee');
    await see(page, 'price', '€19.99');
    await page.locator('[data-testid="buy"]:enabled').waitFor();
    assert.equal(await page.getByTestId('sizes').isHidden(), true, 'no picker on a sale of one variant');

    await page.goto(`http://127.0.0.1:${port}/?sale=${s.id}`);
    await page.getByTestId('user-id').fill('alice');
    await see(page, 'sale-name', 'Runner, three sizes');
    await see(page, 'stock', '5 of 5 left');
    // The sizes differ in price: before a choice, the lowest.
    await see(page, 'price', 'from €19.99');
    await page.getByRole('group', { name: 'Size' }).waitFor();
    assert.deepEqual(await chip(page, 'EU40'), {
      text: 'EU 40 2 left',
      soldOut: 'false',
      disabled: false,
      checked: false,
    });
    assert.deepEqual(await chip(page, 'EU42'), {
      text: 'EU 42 1 left',
      soldOut: 'false',
      disabled: false,
      checked: false,
    });
    await see(page, 'buy-hint', 'Choose a size to buy.');
    assert.equal(await page.getByTestId('buy').isDisabled(), true, 'no purchase before a size is chosen');
    assert.equal(await page.getByTestId('second-sizes').isHidden(), true, 'a second choice is a draw’s only');

    // Chosen with a click, then moved with the keyboard: the arrow key picks the next size, and its price.
    await page.getByTestId('size-EU40').click();
    await see(page, 'price', '€19.99');
    await page.keyboard.press('ArrowRight');
    await see(page, 'price', '€24.99');
    assert.equal((await chip(page, 'EU41')).checked, true, 'the arrow key chose the next size');
    await page.locator('[data-testid="buy"]:enabled').waitFor();

    // Another buyer takes the last EU 42: the open page greys it at its next poll, and cannot choose it.
    assert.equal((await buy(s, 'bob', 'EU42')).status, 202);
    await soldOutShown(page, 'EU42');
    assert.deepEqual(await chip(page, 'EU42'), {
      text: 'EU 42 Sold out',
      soldOut: 'true',
      disabled: true,
      checked: false,
    });
    await see(page, 'stock', '4 of 5 left');
    const violations = await axeViolations(page);
    assert.deepEqual(violations, [], 'axe-core: the picker, a size greyed, one chosen');
    assert.equal(await tooWide(page), null, 'the picker fits a 390 px phone');
    await shot(page, 'variants-picker');

    // Buy sends the chosen size: the order is EU 41's, in Postgres, and paid from the page.
    await page.getByTestId('buy').click();
    await see(page, 'order-status', 'Queued…');
    await drainWriter(env, 'w-variant-pages');
    await see(page, 'order-status', 'Waiting for payment');
    await page.getByTestId('pay').click();
    await see(page, 'order-status', 'Paid');
    assert.deepEqual(
      (await ordersOf(s)).find((o) => o.user_id === 'alice'),
      { user_id: 'alice', sku: 'EU41', status: 'paid' },
    );
    assert.equal(await env.redis.hget(saleKeys(s.id).variantsLeft, 'EU41'), '1', 'the unit came off EU 41');

    // A buyer whose page stopped polling (its clock paused) chooses EU 40, which two others then sell
    // out: the click is refused, EU 40 greys at once, and the page says what is left, with labels.
    const stale = await open(`/?sale=${s.id}`, { clock: 'paused' });
    await stale.getByTestId('user-id').fill('carol');
    await see(stale, 'price', 'from €19.99');
    await stale.getByTestId('size-EU40').click();
    await stale.locator('[data-testid="buy"]:enabled').waitFor();
    assert.equal((await buy(s, 'dave', 'EU40')).status, 202);
    assert.equal((await buy(s, 'erin', 'EU40')).status, 202);
    assert.deepEqual(await chip(stale, 'EU40'), {
      text: 'EU 40 2 left',
      soldOut: 'false',
      disabled: false,
      checked: true,
    });
    await stale.getByTestId('buy').click();
    await see(stale, 'message', 'Size EU 40 is sold out. Still available: EU 41.');
    assert.deepEqual(await chip(stale, 'EU40'), {
      text: 'EU 40 Sold out',
      soldOut: 'true',
      disabled: true,
      checked: true,
    });
    assert.equal(await stale.getByTestId('buy').isDisabled(), true, 'a sold-out size cannot be bought');
    assert.equal(await stale.getByTestId('order').isHidden(), true, 'no order for the refused buyer');
    // Choosing the size left clears the refusal and opens Buy again.
    await stale.getByTestId('size-EU41').click();
    assert.equal(await stale.getByTestId('message').isHidden(), true);
    await stale.locator('[data-testid="buy"]:enabled').waitFor();
    assert.equal(
      (await ordersOf(s)).some((o) => o.user_id === 'carol'),
      false,
      'carol bought nothing',
    );
    await shot(stale, 'variants-refused');

    // /admin in the first window: a row per variant, its price, stock and units by place.
    await drainWriter(env, 'w-variant-pages');
    await page.setViewportSize({ width: 1200, height: 900 });
    await page.goto(`http://127.0.0.1:${port}/admin#${s.id}`);
    await page.getByTestId('token').fill(ADMIN_TOKEN);
    await page.getByTestId('sign-in-button').click();
    await see(page, 'live-name', 'Runner, three sizes');
    await page.getByTestId('variants').waitFor();
    const rows = async () =>
      Promise.all(SIZES.map(async ({ sku }) => page.getByTestId(`variant-${sku}`).locator('td').allInnerTexts()));
    // Variant, SKU, price, stock, available, queued, pending, paid.
    const expected = [
      ['EU 40', 'EU40', '€19.99', '2', '0', '0', '2', '0'],
      ['EU 41', 'EU41', '€24.99', '2', '1', '0', '0', '1'],
      ['EU 42', 'EU42', '€19.99', '1', '0', '0', '1', '0'],
    ];
    await page.waitForFunction(
      (want) =>
        want.every((row) =>
          [...document.querySelectorAll(`[data-testid="variant-${row[1]}"] td`)]
            .map((td) => td.textContent)
            .every((text, i) => text === row[i]),
        ),
      expected,
    );
    assert.deepEqual(await rows(), expected);
    await see(page, 'reconciliation', 'Holds');
    assert.deepEqual(await axeViolations(page), [], "axe-core: /admin's table of variants");
    await shot(page, 'variants-admin');
  });

  test('buyer page: a waiting room of several sizes: the admitted buyer is asked for a size, and the pass buys the one chosen', {
    timeout: 60_000,
  }, async () => {
    const s = await sale({
      name: 'Room of sizes',
      variants: SIZES,
      admission: 'queue',
      admitOverbook: 1,
      passSeconds: 60,
      admitRatePerSecond: 1,
    });
    // The loop of the waiting room, ticked here: the room opens, then a second's worth of passes.
    const loop = new AdmissionLoop({ pool: env.pool, redis: env.redis, logger: env.logger });
    const admit = async () => {
      await loop.refreshSales();
      await loop.tick(Date.now());
    };
    await admit();
    const page = await open(`/?sale=${s.id}`);
    await page.getByTestId('user-id').fill('zoe');
    await page.getByRole('group', { name: 'Size' }).waitFor();
    await page.getByTestId('join').click();
    await see(page, 'queue-status', /^(You are in the waiting room|You are number 1)$/);
    await refillRoom(env, s, 1000);
    await admit();
    await see(page, 'queue-status', 'It is your turn!');
    await see(page, 'buy-hint', 'Choose a size to buy.');
    assert.equal(await page.getByTestId('buy').isDisabled(), true, 'the pass waits for a size');
    await page.getByTestId('size-EU42').click();
    await see(page, 'price', '€19.99');
    await page.locator('[data-testid="buy"]:enabled').waitFor();
    await page.getByTestId('buy').click();
    await see(page, 'order-status', 'Queued…');
    await drainWriter(env, 'w-variant-room');
    await see(page, 'order-status', 'Waiting for payment');
    assert.deepEqual(await ordersOf(s), [{ user_id: 'zoe', sku: 'EU42', status: 'pending' }]);
    assert.equal(await env.redis.zscore(saleKeys(s.id).passes, 'zoe'), '0', 'the pass bought, once');
    await soldOutShown(page, 'EU42');
  });

  test("live: a sale's variants come with their stock, price and units by place; a sale of one has its one row as the sale's", async () => {
    const s = await sale({ name: 'Live sizes', variants: SIZES });
    const one = await sale({ name: 'Live one', stock: 4 });
    assert.equal((await buy(s, 'ann', 'EU41')).status, 202);
    assert.equal((await buy(s, 'ben', 'EU42')).status, 202);
    await drainWriter(env, 'w-variant-live');
    assert.equal((await buy(s, 'cat', 'EU41')).status, 202); // left queued
    assert.equal((await buy(one, 'ann', 'default')).status, 202);
    const ADMIN = { authorization: `Bearer ${ADMIN_TOKEN}` };
    const live = await http(port, 'GET', `/api/sales/${s.id}/live`, { headers: ADMIN });
    assert.equal(live.status, 200);
    assert.deepEqual(live.body.variants, [
      { sku: 'EU40', label: 'EU 40', stock: 2, price: 1999, available: 2, queued: 0, pending: 0, paid: 0 },
      { sku: 'EU41', label: 'EU 41', stock: 2, price: 2499, available: 0, queued: 1, pending: 1, paid: 0 },
      { sku: 'EU42', label: 'EU 42', stock: 1, price: 1999, available: 0, queued: 0, pending: 1, paid: 0 },
    ]);
    const single = await http(port, 'GET', `/api/sales/${one.id}/live`, { headers: ADMIN });
    assert.deepEqual(single.body.variants, [
      { sku: 'default', label: 'Live one', stock: 4, price: 1999, available: 3, queued: 1, pending: 0, paid: 0 },
    ]);
    await drainWriter(env, 'w-variant-live');
  });
});
