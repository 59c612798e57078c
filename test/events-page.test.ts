// The endpoints of outbound events on the operator's page (/admin) in real headless Chromium against
// the real API: added (its secret shown once, the one Postgres holds, gone after a sign-out),
// rotated and disabled from the page, each step checked in Postgres's `endpoints` row.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import type { Browser } from 'playwright-core';
import { buildApp } from '../shared/http/app.js';
import { Purchaser } from '../shared/purchase/purchaser.js';
import { axeViolations, serious, tooWide } from './support/axe.js';
import { newWindow, openBrowser, see } from './support/browser.js';
import { testEnv, type TestEnv } from './support/env.js';
import { waitFor } from './support/fixtures.js';
import { ADMIN_TOKEN } from './support/tokens.js';

let env: TestEnv;
let app: FastifyInstance;
let port: number;
let browser: Browser;
const pageErrors: string[] = [];

before(async () => {
  env = await testEnv();
  app = buildApp({
    config: env.config,
    pool: env.pool,
    redis: env.redis,
    purchaser: new Purchaser(env.redis, env.config),
    logger: env.logger,
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  port = (app.server.address() as { port: number }).port;
  browser = await openBrowser();
});
after(async () => {
  await browser?.close();
  await app?.close();
  await env?.close();
});

interface Row {
  url: string;
  event_types: string[];
  secret: string;
  previous_secret: string | null;
  enabled: boolean;
  disabled_reason: string | null;
}
const rowOf = async (id: string) =>
  (
    await env.pool.query<Row>(
      'select url, event_types, secret, previous_secret, enabled, disabled_reason from endpoints where id = $1',
      [id],
    )
  ).rows[0];

test('admin page: an endpoint added from /admin shows its secret once, then is rotated and disabled; a sign-out forgets the secret', async () => {
  const page = await newWindow(browser, `http://127.0.0.1:${port}/admin`, pageErrors);
  await page.getByTestId('token').fill(ADMIN_TOKEN);
  await page.getByTestId('sign-in-button').click();
  await see(page, 'endpoints-empty', 'No endpoints yet: add one below.');

  // A private address is refused as the server says, and nothing is added.
  await page.getByTestId('endpoint-url').fill('http://10.0.0.7/hooks');
  await page.getByTestId('endpoint-id').fill('shop-page');
  await page.getByTestId('endpoint-add').click();
  await see(page, 'endpoint-message', /10\.0\.0\.7 is a loopback, link-local or private address/);
  assert.equal(await rowOf('shop-page'), undefined);

  await page.getByTestId('endpoint-url').fill('https://shop.example/hooks');
  await page.getByTestId('endpoint-types').fill('order.paid, order.expired');
  await page.getByTestId('endpoint-add').click();
  await see(page, 'endpoint-secret-for', 'shop-page');
  const secret = await see(page, 'endpoint-secret', /^whsec_/);
  const added = await rowOf('shop-page');
  assert.deepEqual(added, {
    url: 'https://shop.example/hooks',
    event_types: ['order.paid', 'order.expired'],
    secret,
    previous_secret: null,
    enabled: true,
    disabled_reason: null,
  });
  const row = page.locator('[data-testid="endpoint-row"][data-endpoint="shop-page"]');
  await row.getByTestId('endpoint-state').filter({ hasText: 'Enabled' }).waitFor();
  assert.equal(await row.getByTestId('endpoint-pending').innerText(), '0');
  assert.equal(await page.getByTestId('endpoint-message').isHidden(), true);
  assert.equal(await page.getByTestId('endpoint-url').inputValue(), '', 'the form is cleared once added');

  await row.getByTestId('endpoint-rotate').click();
  const rotated = await waitFor('the new secret shown', async () => {
    const shown = await page.getByTestId('endpoint-secret').innerText();
    return shown !== secret && shown.startsWith('whsec_') ? shown : undefined;
  });
  const afterRotation = await rowOf('shop-page');
  assert.deepEqual([afterRotation?.secret, afterRotation?.previous_secret], [rotated, secret]);

  await row.getByTestId('endpoint-disable').click();
  await see(page, 'endpoint-state', 'Disabled: disabled by an operator');
  assert.equal(await row.getByTestId('endpoint-enable').isVisible(), true);
  const disabled = await rowOf('shop-page');
  assert.deepEqual([disabled?.enabled, disabled?.disabled_reason], [false, 'disabled by an operator']);

  assert.deepEqual(serious(await axeViolations(page)), [], 'no serious accessibility barrier');
  assert.equal(await tooWide(page), null);

  // Signed out and in again: the secret is gone from the page, the endpoint listed as disabled.
  await page.getByTestId('sign-out').click();
  await page.getByTestId('token').fill(ADMIN_TOKEN);
  await page.getByTestId('sign-in-button').click();
  await see(page, 'endpoint-state', 'Disabled: disabled by an operator');
  assert.equal(await page.getByTestId('endpoint-secret-box').isHidden(), true);
  assert.equal(await page.getByTestId('endpoint-secret').textContent(), '');
  assert.deepEqual(pageErrors, [], 'the page logged no errors');
  await page.context().close();
});
