// The operator's page's controls of a live sale in real headless Chromium against the real API:
// pause and resume, a new end, and the sale's audit list naming who did each, signed in with a
// named operator's secret. What the page shows is checked against Postgres and Redis directly.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import type { Browser, Page } from 'playwright-core';
import { addOperator } from '../shared/operators/operators.js';
import { saleKeys } from '../shared/redis/keys.js';
import { buildTestApp } from './support/api.js';
import { newWindow, openBrowser, see, shot } from './support/browser.js';
import { testEnv, type TestEnv } from './support/env.js';
import { HOUR, newSale, waitFor } from './support/fixtures.js';
import { http, outcome } from './support/http.js';

let env: TestEnv;
let app: FastifyInstance;
let built: Awaited<ReturnType<typeof buildTestApp>> | undefined;
let port: number;
let browser: Browser;
const pageErrors: string[] = [];

before(async () => {
  env = await testEnv();
  built = await buildTestApp(env);
  app = built.app;
  await app.listen({ port: 0, host: '127.0.0.1' });
  port = (app.server.address() as { port: number }).port;
  browser = await openBrowser();
});
after(async () => {
  await browser?.close();
  await built?.close();
  await env?.close();
});

async function open(path: string): Promise<Page> {
  const page = await newWindow(browser, `http://127.0.0.1:${port}${path}`, pageErrors);
  page.on('dialog', (dialog) => void dialog.accept());
  return page;
}

const buy = (saleId: string, user: string) =>
  http(port, 'POST', `/api/sales/${saleId}/purchases`, { user, body: { qty: 1 } });
const pausedAt = async (id: string) =>
  (await env.pool.query<{ paused_at: Date | null }>('select paused_at from sales where id = $1', [id])).rows[0]!
    .paused_at;

test('admin page: an operator pauses, resumes and moves the end of a live sale; each shows in its audit list with their name', {
  timeout: 90_000,
}, async () => {
  const { secret } = await addOperator(env.pool, 'erin', 'test');
  const sale = await newSale(env, { name: 'Audit drop', stock: 5, endsAt: new Date(Date.now() + HOUR).toISOString() });
  const page = await open(`/admin#${sale.id}`);
  await page.getByTestId('token').fill(secret);
  await page.getByTestId('sign-in-button').click();
  await see(page, 'live-name', /^Audit drop$/);
  await see(page, 'audit-empty', /Nothing recorded yet/);

  await page.getByTestId('pause-sale').click();
  await see(page, 'paused-badge', /^Paused$/);
  await see(page, 'audit', /erin paused/);
  assert.ok((await pausedAt(sale.id)) instanceof Date, 'Postgres records the pause');
  assert.equal(await env.redis.hexists(saleKeys(sale.id).meta, 'paused'), 1);
  assert.equal(outcome(await buy(sale.id, 'pat')), '409 paused');
  assert.equal(await page.getByTestId('pause-sale').isHidden(), true);

  await page.getByTestId('resume-sale').click();
  await see(page, 'audit', /erin resumed/);
  await page.getByTestId('paused-badge').waitFor({ state: 'hidden' });
  assert.equal(await pausedAt(sale.id), null);
  assert.equal(outcome(await buy(sale.id, 'pat')), '202 queued');

  // Two hours from now, as the browser's local time the input takes (the page's zone is the test's).
  const target = new Date(Date.now() + 2 * HOUR);
  target.setMilliseconds(0);
  const local = new Date(target.getTime() - target.getTimezoneOffset() * 60_000).toISOString().slice(0, 19);
  await page.getByTestId('end-time').fill(local);
  await page.getByTestId('end-time-button').click();
  await see(page, 'audit', /erin moved the end to /);
  await waitFor('the new end recorded', async () => {
    const { rows } = await env.pool.query<{ ends_at: Date }>('select ends_at from sales where id = $1', [sale.id]);
    return rows[0]!.ends_at.getTime() === target.getTime();
  });
  assert.equal(Number(await env.redis.hget(saleKeys(sale.id).meta, 'endsAt')), target.getTime());

  // A time gone is refused as the server says, and the operator stays signed in.
  const past = new Date(Date.now() - HOUR);
  await page
    .getByTestId('end-time')
    .fill(new Date(past.getTime() - past.getTimezoneOffset() * 60_000).toISOString().slice(0, 16));
  await page.getByTestId('end-time-button').click();
  await see(page, 'message', /is not to come/);
  assert.equal(await page.getByTestId('console').isVisible(), true);

  const items = await page.getByTestId('audit').locator('li').allTextContents();
  assert.equal(items.length, 3, items.join('\n'));
  assert.match(items[0]!, /erin moved the end/);
  assert.match(items[2]!, /erin paused/);
  await shot(page, 'admin-audit');
  await page.context().close();
  assert.deepEqual(pageErrors, [], 'the page logged no errors');
});

test("admin page: an operator restocks one size and removes another's unsold units; a removal beyond what is available is refused as the server says", {
  timeout: 90_000,
}, async () => {
  const { secret } = await addOperator(env.pool, 'finn', 'test');
  const sale = await newSale(env, {
    name: 'Sizes drop',
    variants: [
      { sku: 'S', label: 'Small', stock: 1 },
      { sku: 'L', label: 'Large', stock: 3 },
    ],
  });
  const page = await open(`/admin#${sale.id}`);
  await page.getByTestId('token').fill(secret);
  await page.getByTestId('sign-in-button').click();
  await see(page, 'live-name', /^Sizes drop$/);
  const buySize = (user: string, variant: string) =>
    http(port, 'POST', `/api/sales/${sale.id}/purchases`, { user, body: { qty: 1, variant } });
  assert.equal(outcome(await buySize('sam', 'S')), '202 queued');
  assert.equal(outcome(await buySize('sue', 'S')), '409 sold_out');

  await page.getByTestId('variant-units-S').fill('2');
  await page.getByTestId('restock-S').click();
  await see(page, 'variant-result-S', /^Added 2: stock 3, 2 available\.$/);
  await see(page, 'audit', /finn restocked 2 of S/);
  const stock = async (sku: string) =>
    (
      await env.pool.query<{ stock: number }>('select stock from sale_variants where sale_id = $1 and sku = $2', [
        sale.id,
        sku,
      ])
    ).rows[0]!.stock;
  assert.equal(await stock('S'), 3);
  assert.equal(await env.redis.hget(saleKeys(sale.id).variantsLeft, 'S'), '2');
  await waitFor('the size sells again', async () => outcome(await buySize('sue', 'S')) === '202 queued');

  await page.getByTestId('variant-units-L').fill('2');
  await page.getByTestId('remove-L').click();
  await see(page, 'variant-result-L', /^Removed 2: stock 1, 1 available\.$/);
  await see(page, 'audit', /finn removed unsold units: 2 of L/);
  await page.getByTestId('variant-units-L').fill('5');
  await page.getByTestId('remove-L').click();
  await see(page, 'message', /Variant L has 1 unit available: at most 1 can be removed/);
  assert.equal(await page.getByTestId('console').isVisible(), true);
  assert.equal(await stock('L'), 1);
  assert.equal(await env.redis.hget(saleKeys(sale.id).variantsLeft, 'L'), '1');
  await page.context().close();
  assert.deepEqual(pageErrors, [], 'the page logged no errors');
});
