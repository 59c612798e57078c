// A sale of several variants on the pages, in real headless Chromium against the real API: the
// buyer's size picker (live availability, the chosen size's price, the purchase naming it, a size
// refused as sold out) and /admin's table of variants. What the pages show is checked as text and
// state in the DOM; what they did, in Postgres and Redis. A one-variant sale's page is page.test.ts's.
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { AdmissionLoop } from '../shared/admission/loop.js';
import { addOperator } from '../shared/operators/operators.js';
import { saleKeys } from '../shared/redis/keys.js';
import { getSale, type Sale } from '../shared/sales/sale.js';
import { axeViolations, tooWide, VIEWPORTS } from './support/axe.js';
import { newWindow, openBrowser, see, shot } from './support/browser.js';
import { apiEnv } from './support/api.js';
import { assertConserved, type TestEnv } from './support/env.js';
import { drainWriter, newSale, refillRoom } from './support/fixtures.js';
import { http, outcome } from './support/http.js';
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

// The waiting room's loop, ticked by the tests; one for the file, as it holds the admission lease for a while.
let loop: AdmissionLoop | undefined;
async function admit(): Promise<void> {
  loop ??= new AdmissionLoop({ pool: env.pool, redis: env.redis, logger: env.logger });
  await loop.refreshSales();
  await loop.tick(Date.now());
}

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

  test('a 12-size drop from /admin: created with its sizes and a waiting room (a bad line refused as the server says), buyers admitted, a purchase refused while paused and made after the resume, a sold-out size restocked live on the buyer page, the sale ended; each step audited', {
    timeout: 180_000,
  }, async () => {
    const { secret } = await addOperator(env.pool, 'olga', 'test');
    // EU 36 to EU 47, EU 42 a single pair and EU 47 dearer: one line each, as the operator types them.
    const DROP = Array.from({ length: 12 }, (_, i) => {
      const size = 36 + i;
      return `EU${size}, EU ${size}, ${size === 42 ? 1 : 3}${size === 47 ? ', 2499' : ''}`;
    });
    const admin = await open('/admin', { viewport: { width: 1200, height: 900 } });
    admin.on('dialog', (dialog) => void dialog.accept());
    await admin.getByTestId('token').fill(secret);
    await admin.getByTestId('sign-in-button').click();
    await admin.getByTestId('create-form').waitFor();
    await admin.getByTestId('create-name').fill('Runner drop');
    await admin.getByTestId('create-id').fill('drop-12');
    await admin.getByTestId('create-price').fill('1999');
    await admin.getByTestId('create-currency').fill('EUR');
    await admin.getByTestId('create-admission').selectOption('queue');
    // The stock left empty: with sizes it is their sum. A stock that is not a number is the server's to refuse.
    const bad = [...DROP];
    bad[4] = 'EU40, EU 40, many';
    await admin.getByTestId('create-sizes').fill(bad.join('\n'));
    await admin.getByTestId('create-button').click();
    await see(admin, 'create-message', 'Sizes, line 5: stock must be an integer from 0 to 10000000');
    assert.equal((await env.pool.query("select 1 from sales where id = 'drop-12'")).rowCount, 0, 'no sale made');

    await admin.getByTestId('create-sizes').fill(DROP.join('\n'));
    await admin.getByTestId('create-button').click();
    await see(admin, 'live-name', 'Runner drop');
    let s = (await getSale(env.pool, 'drop-12'))!;
    assert.equal(s.admission, 'queue');
    assert.equal(s.stock, 34, 'eleven sizes of 3 and one of 1');
    assert.deepEqual(
      (
        await env.pool.query<{ sku: string; label: string; stock: number; price: number | null }>(
          "select sku, label, stock, price from sale_variants where sale_id = 'drop-12' order by position",
        )
      ).rows,
      Array.from({ length: 12 }, (_, i) => ({
        sku: `EU${36 + i}`,
        label: `EU ${36 + i}`,
        stock: i === 6 ? 1 : 3,
        price: i === 11 ? 2499 : null,
      })),
    );
    await admin.getByTestId('variant-EU47').waitFor();
    assert.equal(await admin.getByTestId('variants').locator('tbody tr').count(), 12, 'a row per size in /admin');

    // The waiting room, its loop ticked here: it opens, three buyers join (one on the buyer page), a second's worth is admitted.
    await admit();
    const page = await open(`/?sale=${s.id}`);
    await page.getByTestId('user-id').fill('zoe');
    await page.getByRole('group', { name: 'Size' }).waitFor();
    await page.getByTestId('join').click();
    await see(page, 'queue-status', /^(You are in the waiting room|You are number \d)$/);
    for (const user of ['yan', 'xia'])
      assert.equal((await http(port, 'POST', `/api/sales/${s.id}/queue`, { user })).status, 200);
    await refillRoom(env, s, 1000);
    await admit();
    await see(page, 'queue-status', 'It is your turn!');
    for (const user of ['yan', 'xia'])
      assert.equal((await http(port, 'GET', `/api/sales/${s.id}/queue/me`, { user })).body.state, 'admitted', user);

    // Paused from /admin: zoe's purchase of EU 42 is refused on the page and her pass kept.
    await admin.getByTestId('pause-sale').click();
    await see(admin, 'paused-badge', 'Paused');
    assert.ok((await env.pool.query("select paused_at from sales where id = 'drop-12'")).rows[0].paused_at);
    await page.getByTestId('size-EU42').click();
    await page.locator('[data-testid="buy"]:enabled').waitFor();
    await page.getByTestId('buy').click();
    await see(page, 'message', /paused by its operator/);
    assert.notEqual(await env.redis.zscore(saleKeys(s.id).passes, 'zoe'), '0', 'the pass was not spent');
    assert.equal(await env.redis.hget(saleKeys(s.id).variantsLeft, 'EU42'), '1');

    // Resumed: the same pass buys EU 42, its last pair; the page greys it.
    await admin.getByTestId('resume-sale').click();
    await admin.getByTestId('paused-badge').waitFor({ state: 'hidden' });
    assert.equal((await env.pool.query("select paused_at from sales where id = 'drop-12'")).rows[0].paused_at, null);
    await page.locator('[data-testid="buy"]:enabled').waitFor();
    await page.getByTestId('buy').click();
    await see(page, 'order-status', 'Queued…');
    await drainWriter(env, 'w-variant-drop');
    await see(page, 'order-status', 'Waiting for payment');
    assert.deepEqual(await ordersOf(s), [{ user_id: 'zoe', sku: 'EU42', status: 'pending' }]);
    assert.equal(await env.redis.zscore(saleKeys(s.id).passes, 'zoe'), '0', 'the pass bought, once');
    await soldOutShown(page, 'EU42');
    assert.equal(outcome(await buy(s, 'yan', 'EU42')), '403 admission_pass_required');

    // Restocked live from /admin: two more pairs of EU 42, shown on the buyer page at its next poll.
    await admin.getByTestId('variant-units-EU42').fill('2');
    await admin.getByTestId('restock-EU42').click();
    await see(admin, 'variant-result-EU42', 'Added 2: stock 3, 2 available.');
    await soldOutShown(page, 'EU42', false);
    assert.equal((await chip(page, 'EU42')).text, 'EU 42 2 left');
    await see(page, 'stock', '35 of 36 left');
    assert.equal(
      (await env.pool.query("select stock from sale_variants where sale_id = 'drop-12' and sku = 'EU42'")).rows[0]
        .stock,
      3,
    );

    // Ended from /admin: the buyer page says so, and Buy stays shut.
    await admin.getByTestId('end-sale').click();
    await see(admin, 'audit', /olga ended/);
    await see(page, 'sale-state', 'Ended');
    assert.equal(await page.getByTestId('buy').isDisabled(), true);
    assert.equal((await http(port, 'GET', `/api/sales/${s.id}`)).body.state, 'ended');
    assert.deepEqual(
      (
        await env.pool.query<{ operator: string; action: string; detail: object }>(
          "select operator, action, detail from audit where sale_id = 'drop-12' order by id",
        )
      ).rows.map((r) => [r.operator, r.action]),
      [
        ['olga', 'sale.create'],
        ['olga', 'sale.pause'],
        ['olga', 'sale.resume'],
        ['olga', 'sale.restock'],
        ['olga', 'sale.end'],
      ],
    );
    s = (await getSale(env.pool, s.id))!;
    assert.equal(s.stock, 36);
    sales.push(s); // conservation per variant, after the test
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
