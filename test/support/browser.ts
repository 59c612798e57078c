// The pages in real headless Chromium (Debian's, through playwright-core): one browser per test
// file, and a context per window (a buyer's or an operator's own storage), closed when done with.
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';

/**
 * How long a wait for what the page should show may take before the test fails: a bound for a
 * busy machine, not a speed the test asserts (a state that never comes still fails).
 */
export const WAIT_MS = 20_000;

// What a test page never uses: each is work Chromium would otherwise do in every window.
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-quic',
  '--no-first-run',
  '--disable-component-update',
  '--disable-sync',
  '--disable-extensions',
  '--mute-audio',
  '--disable-breakpad',
  '--disable-default-apps',
  '--disable-domain-reliability',
  '--metrics-recording-only',
];

export const openBrowser = (): Promise<Browser> =>
  chromium.launch({ executablePath: '/usr/bin/chromium', args: CHROMIUM_ARGS });

export interface WindowOptions {
  viewport?: { width: number; height: number };
  /** `paused`: no timer fires, the page stays as it loaded; `movable`: runs as the real one until page.clock.fastForward. */
  clock?: 'paused' | 'movable';
}

/**
 * A page at `url` in a window of its own. What it logs as an error goes to `errors` (a 4xx answer
 * is expected: the refusals are what some tests ask for), and so does any request to another origin:
 * the pages are served by the app alone, nothing from a CDN.
 */
export async function newWindow(
  browser: Browser,
  url: string,
  errors: string[],
  opts: WindowOptions = {},
): Promise<Page> {
  const context = await browser.newContext({
    viewport: opts.viewport ?? { width: 1200, height: 900 },
    locale: 'en-US',
  });
  context.setDefaultTimeout(WAIT_MS);
  // A new window's first load (its renderer started, the page's scripts run) takes seconds on a busy machine.
  context.setDefaultNavigationTimeout(30_000);
  const page = await context.newPage();
  const { origin, pathname, search } = new URL(url);
  const where = `${pathname}${search}`;
  page.on('pageerror', (err) => errors.push(`${where}: ${err.message}`));
  page.on('console', (msg) => {
    if (
      msg.type() === 'error' &&
      !/^Failed to load resource: the server responded with a status of 4\d\d/.test(msg.text())
    )
      errors.push(`${where}: ${msg.text()}`);
  });
  page.on('request', (req) => {
    if (!req.url().startsWith(`${origin}/`)) errors.push(`${where}: a request elsewhere: ${req.url()}`);
  });
  if (opts.clock === 'paused') {
    // pauseAt cannot go back: leave room for a busy machine between the two calls.
    const at = Date.now();
    await page.clock.install({ time: at });
    await page.clock.pauseAt(at + 1000);
  }
  if (opts.clock === 'movable') await page.clock.install({ time: Date.now() });
  await page.goto(url);
  return page;
}

const exactly = (text: string) => new RegExp(`^${text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`);

/** Waits until [data-testid=testId] is visible with exactly `text` (or text matching it); returns its text. */
export async function see(page: Page, testId: string, text: string | RegExp, timeout = WAIT_MS): Promise<string> {
  const el = page.getByTestId(testId);
  const pattern = typeof text === 'string' ? exactly(text) : text;
  try {
    await el.filter({ hasText: pattern }).waitFor({ state: 'visible', timeout });
  } catch {
    const shown = (await el.isVisible()) ? JSON.stringify(await el.innerText()) : 'nothing (hidden)';
    assert.fail(`[data-testid=${testId}]: expected ${pattern} within ${timeout} ms, the page shows ${shown}`);
  }
  return el.innerText();
}

const SCREENSHOTS = fileURLToPath(new URL('../../test-output/screenshots/', import.meta.url));
const DOCS = fileURLToPath(new URL('../../docs/', import.meta.url));

/**
 * A screenshot for a person to look at, taken only when asked: SCREENSHOTS=1 writes it to
 * test-output/screenshots/, UPDATE_SCREENSHOTS=1 also the copy in docs/ that the docs show. No test
 * reads it, and a full page costs Chromium a few tenths of a CPU-second.
 */
export async function shot(page: Page, name: string, docsName?: string): Promise<void> {
  const update = process.env.UPDATE_SCREENSHOTS === '1';
  if (!update && process.env.SCREENSHOTS !== '1') return;
  mkdirSync(SCREENSHOTS, { recursive: true });
  const path = `${SCREENSHOTS}${name}.png`;
  await page.screenshot({ path, fullPage: true });
  if (docsName && update) copyFileSync(path, `${DOCS}${docsName}`);
}
