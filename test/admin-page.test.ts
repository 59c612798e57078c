// The operator's page (/admin) in real headless Chromium against the real API, and the endpoint it
// polls, GET /api/sales/:saleId/live. The page's numbers are checked as text in the DOM; the
// endpoint's against the reconciliation, Redis's winners and Postgres's closes read directly.
// UPDATE_SCREENSHOTS=1 also writes the screenshots docs/operations.md shows into docs/.
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import type { Browser, Page } from 'playwright-core';
import { AdmissionLoop } from '../shared/admission/loop.js';
import { sweepOverdue } from '../shared/orders/close.js';
import { PURCHASE_TOKEN_HEADER } from '../shared/http/routes/purchase.js';
import { buildApp } from '../shared/http/app.js';
import { parseWinner } from '../shared/runtime/ids.js';
import { saleKeys } from '../shared/redis/keys.js';
import { Purchaser } from '../shared/purchase/purchaser.js';
import { reconcile } from '../shared/checks/reconcile.js';
import type { Sale } from '../shared/sales/sale.js';
import { axeViolations, serious, tooWide, VIEWPORTS, type Violation } from './support/axe.js';
import { newWindow, openBrowser, see, shot } from './support/browser.js';
import { assertConserved, testEnv, type TestEnv } from './support/env.js';
import {
  closeEntries as closeEntriesOf,
  endBackfillIn,
  newSale,
  openDraw,
  redisNow,
  startedAgo,
  waitFor,
  drainWriter,
} from './support/fixtures.js';
import { http } from './support/http.js';
import { ADMIN_TOKEN } from './support/tokens.js';

let env: TestEnv;
let app: FastifyInstance;
let port: number;
let browser: Browser;
const sales: Sale[] = [];
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
afterEach(async () => {
  assert.deepEqual(pageErrors.splice(0), [], 'the page logged no errors');
  await assertConserved(env, sales);
});

const ADMIN = { authorization: `Bearer ${ADMIN_TOKEN}` };
const live = (saleId: string, headers: Record<string, string> = ADMIN) =>
  http(port, 'GET', `/api/sales/${saleId}/live`, { headers });
const buy = (saleId: string, user: string) =>
  http(port, 'POST', `/api/sales/${saleId}/purchases`, { user, body: { qty: 1 } });
const orderAction = (orderId: string, user: string, action: 'pay' | 'cancel') =>
  http(port, 'POST', `/api/orders/${orderId}/${action}`, { user });

async function sale(fields: Record<string, unknown>): Promise<Sale> {
  const s = await newSale(env, fields);
  sales.push(s);
  return s;
}

/** Writes every queued winner, as the order writer would. */
async function drain(): Promise<void> {
  await drainWriter(env, 'w-admin-page');
}

/** Puts orders `agoMs` past their deadline and lets the sweep close them (expired, stock back). */
async function expire(orderIds: string[], agoMs: number[]): Promise<void> {
  await env.pool.query(
    `update orders o set expires_at = now() - make_interval(secs => a.ms / 1000.0)
     from unnest($1::text[], $2::int[]) as a(id, ms) where o.id = a.id and o.status = 'pending'`,
    [orderIds, agoMs],
  );
  await sweepOverdue(env.pool, env.redis, 'replay');
}

// One admission loop for the file, ticked by the test (test/queue.test.ts does the same): a room is
// judged by Redis's clock, a draw by the test's `at`.
let loop: AdmissionLoop | undefined;
async function admit(at = Date.now()): Promise<void> {
  loop ??= new AdmissionLoop({ pool: env.pool, redis: env.redis, logger: env.logger });
  await loop.refreshSales();
  await loop.tick(at);
}
/**
 * The room's first step, its start a second ago by Redis's clock (a full bucket at 1000/s: a pass
 * per unit); then the first in line buys with their pass and the second's pass runs out unused
 * (its expiry set to Redis's now, not yet swept by the loop).
 */
async function oneBuysOneNoShow(s: Sale): Promise<void> {
  await startedAgo(env, s, 1000);
  await admit();
  const k = saleKeys(s.id);
  const [buyer, noShow] = await env.redis.zrange(k.queue, '0', '1');
  const pass = (await queueMe(s.id, buyer!)).body.pass as string;
  assert.equal(
    (
      await http(port, 'POST', `/api/sales/${s.id}/purchases`, {
        user: buyer!,
        body: { qty: 1 },
        headers: { [PURCHASE_TOKEN_HEADER]: pass },
      })
    ).status,
    202,
  );
  await env.redis.zadd(k.passes, await redisNow(env.redis), noShow!);
}
const join = (saleId: string, user: string) => http(port, 'POST', `/api/sales/${saleId}/queue`, { user });
const queueMe = (saleId: string, user: string) => http(port, 'GET', `/api/sales/${saleId}/queue/me`, { user });

/** A draw whose entries are open (support/fixtures.ts openDraw). */
const drawSale = (fields: Record<string, unknown>) => sale({ ...openDraw(), ...fields });
const closeEntries = (s: Sale) => closeEntriesOf(env, s);
const enter = (saleId: string, user: string) => http(port, 'POST', `/api/sales/${saleId}/entries`, { user });
/** The draw's entries by status, read from Postgres directly. */
async function entryCounts(saleId: string): Promise<Record<string, number>> {
  const res = await env.pool.query<{ status: string; n: number }>(
    'select status, count(*)::int as n from draw_entries where sale_id = $1 group by status',
    [saleId],
  );
  return Object.fromEntries(res.rows.map((r) => [r.status, r.n]));
}

async function outcomes(saleId: string): Promise<Record<string, number>> {
  return (await live(saleId)).body.thisInstance.outcomes;
}

describe('GET /api/sales/:saleId/live', () => {
  test("live: the units are the reconciliation's, purchases Redis's counter, writer lag the oldest waiting winner's age", async () => {
    const s = await sale({ stock: 10, paymentWindowSeconds: 600 });
    for (const user of ['a1', 'a2']) assert.equal((await buy(s.id, user)).status, 202);
    await drain();
    const idle = await live(s.id);
    assert.equal(idle.status, 200, JSON.stringify(idle.body));
    assert.equal(idle.body.writerLagMs, null, 'nothing waits for the writer');
    assert.equal((await buy(s.id, 'a3')).status, 202);

    const res = await live(s.id);
    const rec = await reconcile(env.pool, env.redis, s.id, s.stock);
    const { saleId: _, ...units } = rec;
    assert.deepEqual(res.body.reconciliation, units);
    assert.deepEqual(
      [rec.available, rec.queued, rec.pending, rec.holds],
      [7, 1, 2, true],
      'the case this checks: one winner queued, two written',
    );
    assert.equal(res.body.purchases, 3);
    assert.equal(res.body.sale.id, s.id);
    assert.equal(res.body.sale.state, 'open');
    const waiting = parseWinner((await env.redis.lindex(saleKeys(s.id).winners, -1))!);
    assert.equal(res.body.writerLagMs, Date.parse(res.body.at) - waiting.purchasedAt);

    // A writer claimed it and died: it waits in that writer's processing list, and still counts.
    const k = saleKeys(s.id);
    await env.redis.lmove(k.winners, k.processing('w-dead'), 'RIGHT', 'LEFT');
    await env.redis.zadd(k.writers, Date.now() + 60_000, 'w-dead');
    const held = await live(s.id);
    assert.equal(await env.redis.llen(k.winners), 0);
    assert.equal(held.body.writerLagMs, Date.parse(held.body.at) - waiting.purchasedAt);
    assert.equal(held.body.reconciliation.queued, 1);
    await env.redis.zadd(k.writers, 0, 'w-dead'); // lease over: the writer below re-drives it
    await drain();
    assert.equal((await live(s.id)).body.writerLagMs, null);
  });

  test("live: expiry lateness is the p50/p99 of closed_at - expires_at over the sale's expired orders of the last minute", async () => {
    const s = await sale({ stock: 10, perUserLimit: 1, paymentWindowSeconds: 600 });
    const ids: string[] = [];
    for (const user of ['b1', 'b2', 'b3', 'b4']) ids.push((await buy(s.id, user)).body.orderId);
    await drain();
    assert.equal((await live(s.id)).body.lateness.closes, 0);
    await expire(ids.slice(0, 3), [2000, 4000, 9000]);
    // An older close is outside the window, and a cancel is no late close.
    await env.pool.query(`update orders set closed_at = now() - interval '2 minutes' where id = $1`, [ids[2]]);
    assert.equal((await orderAction(ids[3]!, 'b4', 'cancel')).status, 200);

    const { lateness, reconciliation } = (await live(s.id)).body;
    const late = (
      await env.pool.query<{ ms: number }>(
        `select extract(epoch from closed_at - expires_at) * 1000 as ms from orders where id = any($1) order by 1`,
        [ids.slice(0, 2)],
      )
    ).rows.map((r) => Number(r.ms));
    assert.ok(late[0]! >= 2000 && late[1]! >= 4000, `backdated: ${late.join(', ')}`);
    // percentile_cont between two values: linear interpolation.
    assert.deepEqual(lateness, {
      closes: 2,
      p50Ms: Math.round(late[0]! + 0.5 * (late[1]! - late[0]!)),
      p99Ms: Math.round(late[0]! + 0.99 * (late[1]! - late[0]!)),
    });
    assert.deepEqual(
      [reconciliation.expired, reconciliation.cancelled, reconciliation.available, reconciliation.holds],
      [3, 1, 10, true],
    );
  });

  test("live: refusals are this instance's counters, by reason", async () => {
    const s = await sale({ stock: 1, perUserLimit: 1 });
    const before = await outcomes(s.id);
    assert.equal((await buy(s.id, 'c1')).status, 202);
    assert.equal((await buy(s.id, 'c1')).body.error, 'limit_reached');
    assert.equal((await buy(s.id, 'c2')).body.error, 'sold_out');
    const after = await outcomes(s.id);
    for (const outcome of ['queued', 'limit_reached', 'sold_out'])
      assert.equal((after[outcome] ?? 0) - (before[outcome] ?? 0), 1, outcome);
    await drain();
  });

  test("live: a queue sale's room: joined, waiting, admitted, passes outstanding, used and expired as Redis holds them, and the no-show rate", async () => {
    const plain = await sale({ stock: 1 });
    assert.equal((await live(plain.id)).body.room, null, 'a first-come sale has no room');

    const s = await sale({ stock: 3, admission: 'queue', admitRatePerSecond: 1000, admitOverbook: 1, passSeconds: 60 });
    for (const user of ['q1', 'q2', 'q3', 'q4']) assert.equal((await join(s.id, user)).status, 200);
    const before = await live(s.id);
    assert.equal(before.status, 200, JSON.stringify(before.body));
    assert.deepEqual(before.body.room, {
      open: false,
      joined: 4,
      waiting: 4,
      admitted: 0,
      passesOutstanding: 0,
      passesUsed: 0,
      passesExpired: 0,
      noShowRate: null,
    });

    // Opened: three passes, one per unit (overbook 1). One buys, one runs out unused. The passes are
    // stamped by Redis's clock; /live reads them against the API's, on the same host.
    await oneBuysOneNoShow(s);
    const k = saleKeys(s.id);
    // Not yet swept by the loop: already counted expired.
    assert.deepEqual((await live(s.id)).body.room, {
      open: true,
      joined: 4,
      waiting: 1,
      admitted: 3,
      passesOutstanding: 1,
      passesUsed: 1,
      passesExpired: 1,
      noShowRate: 0.5,
    });
    // The loop sweeps it and gives its unit's slot to the last in line.
    await admit();
    const { room } = (await live(s.id)).body;
    assert.deepEqual(room, {
      open: true,
      joined: 4,
      waiting: 0,
      admitted: 4,
      passesOutstanding: 2,
      passesUsed: 1,
      passesExpired: 1,
      noShowRate: 0.5,
    });
    // The same figures read from Redis directly.
    assert.equal(await env.redis.zcard(k.queue), room.joined);
    assert.equal(Number(await env.redis.hget(k.room, 'admitted')), room.admitted);
    assert.equal(Number(await env.redis.hget(k.room, 'expired')), room.passesExpired);
    assert.equal(await env.redis.zcount(k.passes, 0, 0), room.passesUsed);
    assert.equal(await env.redis.zcount(k.passes, `(${Date.now()}`, '+inf'), room.passesOutstanding);
    await drain();
  });

  test("live: a draw sale's draw: entries, drawn, awarded, waiting, lost and over as Postgres records them; null for other sales", async () => {
    assert.equal((await live((await sale({ stock: 1 })).id)).body.draw, null, 'a first-come sale has no draw');
    let s = await drawSale({ stock: 2 });
    for (const user of ['e1', 'e2', 'e3', 'e4', 'e5']) assert.equal((await enter(s.id, user)).status, 200);
    assert.deepEqual((await live(s.id)).body.draw, {
      entries: 5,
      drawn: false,
      drawnAt: null,
      awarded: 0,
      waiting: 0,
      lost: 0,
      over: false,
    });
    s = await closeEntries(s);
    await admit(Date.now());
    const drawn = (await live(s.id)).body.draw;
    const drawnAt = (await env.pool.query<{ drawn_at: Date }>('select drawn_at from sales where id = $1', [s.id]))
      .rows[0]!.drawn_at;
    assert.deepEqual(drawn, {
      entries: 5,
      drawn: true,
      drawnAt: drawnAt.toISOString(),
      awarded: 2,
      waiting: 3,
      lost: 0,
      over: false,
    });
    assert.deepEqual(await entryCounts(s.id), { won: 2, waiting: 3 });
    // Backfill ends by Postgres's clock, which judges it.
    s = await endBackfillIn(env, s);
    await admit(Date.now());
    assert.deepEqual((await live(s.id)).body.draw, {
      entries: 5,
      drawn: true,
      drawnAt: drawnAt.toISOString(),
      awarded: 2,
      waiting: 0,
      lost: 3,
      over: true,
    });
    assert.deepEqual(await entryCounts(s.id), { won: 2, lost: 3 });
    await drain();
  });

  test('live: no token 401, another token 403, a malformed id 400, an unknown sale 404', async () => {
    const s = await sale({});
    const none = await live(s.id, {});
    assert.deepEqual([none.status, none.body.error], [401, 'unauthorized']);
    const wrong = await live(s.id, { authorization: 'Bearer not-the-admin-token' });
    assert.deepEqual(
      [wrong.status, wrong.body.error, wrong.body.message],
      [403, 'forbidden', 'This token is not the admin token.'],
    );
    // Who asks comes first: a malformed id is 401 to a stranger.
    assert.equal((await live('bad!id', {})).status, 401);
    const malformed = await live('bad!id');
    assert.deepEqual([malformed.status, malformed.body.error], [400, 'invalid_id']);
    const unknown = await live('no-such-sale');
    assert.deepEqual(
      [unknown.status, unknown.body.error, unknown.body.message],
      [404, 'sale_not_found', 'No sale with id "no-such-sale".'],
    );
    assert.equal((await http(port, 'POST', `/api/sales/${s.id}/live`, { headers: ADMIN })).status, 405);
  });
});

/** The page at `path` in a window of its own; with `clock`, one the test can move forward (page.clock.fastForward). */
const open = (path: string, viewport = { width: 1200, height: 900 }, clock = false): Promise<Page> =>
  newWindow(browser, `http://127.0.0.1:${port}${path}`, pageErrors, { viewport, clock: clock ? 'movable' : undefined });

/** Signs in with `token`, the admin token unless a test tries another. */
async function signIn(page: Page, token = ADMIN_TOKEN): Promise<void> {
  await page.getByTestId('token').fill(token);
  await page.getByTestId('sign-in-button').click();
}

/** Fills the new-sale form's inputs in the order given, each by its test id without the `create-` prefix. */
async function fillSaleForm(page: Page, inputs: Record<string, string>): Promise<void> {
  for (const [name, value] of Object.entries(inputs)) await page.getByTestId(`create-${name}`).fill(value);
}

const saleRow = (page: Page, id: string) => page.locator(`[data-testid="sale-row"][data-sale="${id}"]`);
const storedToken = (page: Page) => page.evaluate(() => sessionStorage.getItem('flashsale.adminToken'));
const orderOf = async (saleId: string, user: string) =>
  (await env.pool.query<{ id: string }>('select id from orders where sale_id = $1 and user_id = $2', [saleId, user]))
    .rows[0]!.id;

describe('operator page', () => {
  test('admin page: the token is asked for, a wrong one refused, the right one kept for the session; sales are listed; a bad sale definition is refused as the server says', {
    timeout: 60_000,
  }, async () => {
    const existing = await sale({ name: 'Spring restock', stock: 40 });
    const page = await open('/admin');
    await see(page, 'sign-in-button', 'Sign in');
    assert.equal(await page.getByTestId('console').isHidden(), true, 'nothing shown before the token');

    await signIn(page, 'not-the-admin-token');
    await see(page, 'message', 'This token is not the admin token.');
    assert.equal(await page.getByTestId('console').isHidden(), true);
    assert.equal(await storedToken(page), null, 'a refused token is not kept');

    await signIn(page);
    await saleRow(page, existing.id).getByText('Spring restock').waitFor();
    assert.equal(
      await saleRow(page, existing.id).locator('td').nth(2).innerText(),
      '€19.99',
      'the price, in its currency',
    );
    assert.equal(await saleRow(page, existing.id).locator('td').nth(3).innerText(), '40 of 40');
    // The sale's id, and a link to its buyer's page, which opens on that sale.
    const row = saleRow(page, existing.id);
    assert.equal(await row.getByTestId('sale-id').innerText(), existing.id);
    assert.equal(await row.getByTestId('sale-page').getAttribute('href'), `/?sale=${existing.id}`);
    const [buyerPage] = await Promise.all([page.context().waitForEvent('page'), row.getByTestId('sale-page').click()]);
    await see(buyerPage, 'sale-name', 'Spring restock');
    await see(buyerPage, 'stock', '40 of 40 left');
    assert.equal(new URL(buyerPage.url()).search, `?sale=${existing.id}`);
    await buyerPage.close();
    assert.equal(await page.getByTestId('message').isHidden(), true);
    assert.equal(await storedToken(page), ADMIN_TOKEN);
    await page.reload();
    await saleRow(page, existing.id).waitFor();
    assert.equal(await page.getByTestId('sign-in').isHidden(), true, 'a reload keeps the session');

    const salesBefore = (await env.pool.query('select id from sales')).rowCount;
    await fillSaleForm(page, { name: 'Too generous', stock: '5', price: '500', currency: 'EUR', 'max-per-order': '3' });
    await page.getByTestId('create-button').click();
    // In the form's own words: its labels, not the API's field names.
    await see(
      page,
      'create-message',
      '“Max per order” (3) must not be above “Per-user limit” (1): raise “Per-user limit” or lower “Max per order”',
    );
    assert.equal((await env.pool.query('select id from sales')).rowCount, salesBefore, 'no sale created');
    await shot(page, 'admin-01-sales', 'admin-sales.png');

    await page.getByTestId('sign-out').click();
    await see(page, 'sign-in-button', 'Sign in');
    assert.equal(await storedToken(page), null);
    await page.context().close();
  });

  test("admin page: the form creates a waiting room (for verified emails only) and a draw with their settings; a draw without its close is refused as the server says, in the form's labels", async () => {
    const page = await open('/admin');
    await signIn(page);
    await page.getByTestId('create-form').waitFor();
    const fillBasics = (id: string) =>
      fillSaleForm(page, { name: `Admission ${id}`, id, stock: '5', price: '500', currency: 'EUR' });
    // The form's times are local time, to the second (the browser runs in this process's time zone).
    const local = (ms: number) => {
      const d = new Date(ms);
      const p = (n: number) => String(n).padStart(2, '0');
      return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
    };

    const posted: Record<string, unknown>[] = [];
    page.on('request', (r) => {
      if (r.method() === 'POST' && new URL(r.url()).pathname === '/api/sales') posted.push(r.postDataJSON());
    });
    // Each admission's settings show only while it is chosen.
    const QUEUE_INPUTS = ['admit-rate', 'admit-overbook', 'pass-seconds'];
    const DRAW_INPUTS = ['entries-open', 'entries-close', 'backfill-until'];
    const shown = async () => {
      const visible: string[] = [];
      for (const name of [...QUEUE_INPUTS, ...DRAW_INPUTS])
        if (await page.getByTestId(`create-${name}`).isVisible()) visible.push(name);
      return visible;
    };
    assert.equal(await page.getByTestId('create-admission').inputValue(), 'first-come');
    assert.deepEqual(await shown(), [], 'first come has no settings of its own');
    await page.getByTestId('create-admission').selectOption('draw');
    assert.deepEqual(await shown(), DRAW_INPUTS);
    await page.getByTestId('create-admission').selectOption('first-come');
    assert.deepEqual(await shown(), []);

    await fillBasics('form-room');
    await page.getByTestId('create-admission').selectOption('queue');
    assert.deepEqual(await shown(), QUEUE_INPUTS);
    await page.getByTestId('create-admit-rate').fill('20');
    await page.getByTestId('create-admit-overbook').fill('1.5');
    await page.getByTestId('create-pass-seconds').fill('45');
    await page.getByTestId('create-buyers').selectOption('verified-email');
    await page.getByTestId('create-button').click();
    await see(page, 'live-name', 'Admission form-room');
    assert.deepEqual(
      (
        await env.pool.query(
          "select admission, admit_rate_per_second, admit_overbook, pass_seconds, buyers from sales where id = 'form-room'",
        )
      ).rows,
      [
        {
          admission: 'queue',
          admit_rate_per_second: 20,
          admit_overbook: 1.5,
          pass_seconds: 45,
          buyers: 'verified-email',
        },
      ],
    );
    sales.push({ id: 'form-room', stock: 5 } as Sale);
    assert.deepEqual(await shown(), [], 'the form is reset to first come');

    const close = Math.ceil((Date.now() + 3_600_000) / 1000) * 1000;
    const refusedBefore = (await env.pool.query('select id from sales')).rowCount;
    await fillBasics('form-draw');
    // A waiting room's setting filled, then the draw chosen: hidden, so not sent (the server would
    // refuse it with a draw).
    await page.getByTestId('create-admission').selectOption('queue');
    await page.getByTestId('create-admit-rate').fill('30');
    await page.getByTestId('create-admission').selectOption('draw');
    assert.deepEqual(await shown(), DRAW_INPUTS);
    await page.getByTestId('create-button').click();
    await see(page, 'create-message', /^“Entries close \(draw\)” is required for “Admission” draw/);
    assert.deepEqual(
      Object.keys(posted.at(-1)!).filter((k) => k.startsWith('admit') || k === 'passSeconds'),
      [],
      'no waiting room setting sent',
    );
    assert.equal((await env.pool.query('select id from sales')).rowCount, refusedBefore, 'no sale created');
    await page.getByTestId('create-entries-close').fill(local(close));
    await page.getByTestId('create-button').click();
    await see(page, 'live-name', 'Admission form-draw');
    const [draw] = (
      await env.pool.query(
        "select admission, entries_open_at, entries_close_at, backfill_until, starts_at, buyers from sales where id = 'form-draw'",
      )
    ).rows;
    assert.equal(draw.admission, 'draw');
    assert.equal(posted.at(-1)!.admitRatePerSecond, undefined, 'the hidden setting was not sent');
    assert.equal(draw.buyers, 'anyone', 'the form left at Anyone');
    assert.equal(draw.entries_close_at.getTime(), close);
    assert.equal(draw.entries_open_at.getTime(), draw.starts_at.getTime(), 'entries open at the start by default');
    assert.equal(draw.backfill_until.getTime(), close + 3_600_000, 'backfill an hour past the close by default');
    sales.push({ id: 'form-draw', stock: 5 } as Sale);
    await page.context().close();
  });

  test('admin page: a sale created from the form, followed live through purchases, payment, expiry and cancel, then ended', {
    timeout: 90_000,
  }, async () => {
    const page = await open('/admin');
    await signIn(page);
    await page.getByTestId('create-form').waitFor();
    await fillSaleForm(page, {
      name: 'Launch day drop',
      id: 'launch-day',
      stock: '5',
      price: '2500',
      currency: 'JPY',
      'payment-window': '600',
    });
    await page.getByTestId('create-button').click();

    await see(page, 'live-name', 'Launch day drop');
    await see(page, 'live-id', 'launch-day');
    assert.equal(await page.getByTestId('live-page').getAttribute('href'), '/?sale=launch-day');
    await see(page, 'live-state', 'Open');
    await see(page, 'live-available', '5');
    const created = (
      await env.pool.query(
        'select stock, price, currency, per_user_limit, payment_window_seconds, ends_at from sales where id = $1',
        ['launch-day'],
      )
    ).rows;
    assert.deepEqual(created, [
      { stock: 5, price: 2500, currency: 'JPY', per_user_limit: 1, payment_window_seconds: 600, ends_at: null },
    ]);
    sales.push({ id: 'launch-day', stock: 5 } as Sale);
    await saleRow(page, 'launch-day').waitFor();
    assert.equal(
      await saleRow(page, 'launch-day').locator('td').nth(2).innerText(),
      '¥2,500',
      'a currency without minor units',
    );
    assert.equal(
      await page.evaluate(() => typeof (window as unknown as { uPlot?: unknown }).uPlot),
      'function',
      'the chart library loaded',
    );

    // Buyers, by HTTP; no writer yet: the winners wait in Redis.
    for (const user of ['u1', 'u2', 'u3']) assert.equal((await buy('launch-day', user)).status, 202);
    await see(page, 'live-queued', '3');
    await see(page, 'live-available', '2');
    await see(page, 'purchases', '3 accepted so far');
    await see(page, 'writer-lag', /^\d+(?: ms|\.\d s)$/);

    await drain();
    await see(page, 'live-pending', '3');
    await see(page, 'live-queued', '0');
    await see(page, 'writer-lag', 'none waiting');

    assert.equal((await orderAction(await orderOf('launch-day', 'u1'), 'u1', 'pay')).status, 200);
    await expire([await orderOf('launch-day', 'u2')], [1500]);
    assert.equal((await orderAction(await orderOf('launch-day', 'u3'), 'u3', 'cancel')).status, 200);
    assert.equal((await buy('launch-day', 'u1')).body.error, 'limit_reached');
    await see(page, 'live-paid', '1');
    await see(page, 'live-expired', '1');
    await see(page, 'live-cancelled', '1');
    await see(page, 'live-pending', '0');
    await see(page, 'live-available', '4');
    await see(page, 'lateness', /^p50 \d\.\d s · p99 \d\.\d s$/);
    await see(page, 'lateness-closes', '1 order closed unpaid in the last minute');
    await see(page, 'reconciliation', 'Holds');
    await see(page, 'reconciliation-detail', '4 available + 0 queued + 0 pending + 1 paid + 0 restoring = 5 of 5');
    await see(page, 'purchase-rate', /^\d+\.\d\/s$/);
    await page.locator('[data-outcome="limit_reached"]').waitFor();
    const points = Number(await page.getByTestId('chart').getAttribute('data-points'));
    assert.ok(points >= 3, `the chart holds the samples so far: ${points}`);
    assert.equal(await page.locator('[data-testid="chart"] canvas').count(), 1, 'the chart is drawn');
    assert.equal(await page.locator('[data-testid="chart-closed"] canvas').count(), 1, "so is the closed units' chart");
    // Stacked, so no line hides another: the legends name each unit once, top of the stack first.
    const legend = (chart: string) =>
      page.locator(`[data-testid="${chart}"] .u-legend .u-series .u-label`).allTextContents();
    assert.deepEqual(await legend('chart'), ['available', 'restoring', 'queued', 'pending', 'paid']);
    assert.deepEqual(await legend('chart-closed'), ['cancelled', 'expired']);
    // Ticks at whole seconds (the x axis is in seconds) and at whole units.
    for (const chart of ['chart', 'chart-closed']) {
      for (const axis of ['x', 'y']) {
        const ticks = (await page.getByTestId(chart).getAttribute(`data-${axis}-ticks`))!.split(' ').map(Number);
        assert.ok(
          ticks.length >= 2 && ticks.every(Number.isInteger),
          `${chart} ${axis} ticks are whole: ${ticks.join(', ')}`,
        );
      }
    }
    await saleRow(page, 'launch-day').getByText('4 of 5').waitFor({ timeout: 10_000 }); // the list follows too
    const counts = await saleRow(page, 'launch-day')
      .locator('td')
      .evaluateAll((tds) => tds.slice(4, 8).map((td) => (td as HTMLElement).innerText));
    assert.deepEqual(counts, ['0', '1', '1', '1'], "the list's orders: pending, paid, expired, cancelled");
    await shot(page, 'admin-02-live', 'admin-live.png');

    // Ending asks first: declined, nothing changes.
    page.once('dialog', (d) => void d.dismiss());
    await page.getByTestId('end-sale').click();
    await see(page, 'live-state', 'Open');
    assert.equal(
      (await env.pool.query('select ends_at from sales where id = $1', ['launch-day'])).rows[0].ends_at,
      null,
    );

    page.once('dialog', (d) => void d.accept());
    const clicked = Date.now();
    await page.getByTestId('end-sale').click();
    await see(page, 'live-state', 'Ended');
    assert.equal(await page.getByTestId('end-sale').isHidden(), true, 'nothing left to end');
    await see(page, 'live-available', '4');
    const endsAt = (await env.pool.query<{ ends_at: Date }>('select ends_at from sales where id = $1', ['launch-day']))
      .rows[0]!.ends_at;
    assert.ok(
      endsAt && endsAt.getTime() >= clicked - 1000 && endsAt.getTime() <= Date.now(),
      `ended now: ${endsAt?.toISOString()}`,
    );
    assert.equal((await buy('launch-day', 'u9')).body.error, 'ended');
    await saleRow(page, 'launch-day').locator('td[data-state="ended"]').waitFor({ timeout: 10_000 });
    await shot(page, 'admin-03-ended');
    await page.context().close();
  });

  test('admin page: a queue sale shows its waiting room (in line, admitted, passes used and expired, no-show rate) as Redis holds it', {
    timeout: 60_000,
  }, async () => {
    const s = await sale({
      name: 'Queue drop',
      stock: 2,
      admission: 'queue',
      admitRatePerSecond: 1000,
      admitOverbook: 1,
      passSeconds: 60,
    });
    const buyers = Array.from({ length: 7 }, (_, i) => `r${i}`);
    for (const user of buyers) assert.equal((await join(s.id, user)).status, 200);
    const page = await open(`/admin#${s.id}`);
    await signIn(page);
    await see(page, 'live-name', 'Queue drop');
    await see(page, 'room-waiting', '7');
    await see(page, 'room-joined', '7 buyers joined · places drawn at the start');
    await see(page, 'room-no-show', '–');

    // Two passes for the two units: one buys, one runs out and its slot goes to the next in line.
    await oneBuysOneNoShow(s);
    const k = saleKeys(s.id);
    await admit();

    await see(page, 'room-waiting', '4');
    await see(page, 'room-joined', '7 buyers joined');
    await see(page, 'room-admitted', '3');
    await see(page, 'room-outstanding', '1 pass can still buy');
    await see(page, 'room-used', '1');
    await see(page, 'room-expired', '1');
    await see(page, 'room-no-show', '50.0%');
    // The figures shown are Redis's.
    assert.equal((await env.redis.zcard(k.queue)) - Number(await env.redis.hget(k.room, 'admitted')), 4);
    assert.equal(Number(await env.redis.hget(k.room, 'admitted')), 3);
    assert.equal(await env.redis.zcount(k.passes, 0, 0), 1);
    assert.equal(Number(await env.redis.hget(k.room, 'expired')), 1);
    assert.equal(await env.redis.zcount(k.passes, `(${Date.now()}`, '+inf'), 1);
    await shot(page, 'admin-04-room', 'admin-room.png');
    await drain();
    await page.context().close();
  });

  test('admin page: a draw sale shows its draw (entries, awarded, waiting, lost) as Postgres records it', {
    timeout: 60_000,
  }, async () => {
    let s = await drawSale({ name: 'Draw drop', stock: 2 });
    for (const user of ['d1', 'd2', 'd3', 'd4', 'd5', 'd6']) assert.equal((await enter(s.id, user)).status, 200);
    const page = await open(`/admin#${s.id}`);
    await signIn(page);
    await see(page, 'live-name', 'Draw drop');
    await see(page, 'draw-entries', '6');
    await see(page, 'draw-made', /^draw at .+$/);
    await see(page, 'draw-awarded', '0');
    await see(page, 'draw-backfill', 'not drawn yet');
    assert.equal(await page.getByTestId('room').isHidden(), true, 'a draw has no waiting room');

    s = await closeEntries(s);
    await admit(Date.now());
    await see(page, 'draw-made', /^drawn .+$/);
    await see(page, 'draw-awarded', '2');
    await see(page, 'draw-waiting', '4');
    await see(page, 'draw-lost', '0');
    await see(page, 'draw-backfill', /^next in line until .+$/);
    assert.deepEqual(await entryCounts(s.id), { won: 2, waiting: 4 });
    await drain();
    await see(page, 'live-pending', '2');
    await shot(page, 'admin-05-draw');

    // Backfill ends by Postgres's clock, which judges it.
    s = await endBackfillIn(env, s);
    await admit(Date.now());
    await see(page, 'draw-waiting', '0');
    await see(page, 'draw-lost', '4');
    await see(page, 'draw-backfill', 'backfill over');
    await see(page, 'draw-entries', '6');
    assert.deepEqual(await entryCounts(s.id), { won: 2, lost: 4 });
    await page.context().close();
  });

  test('admin page: past 50 sales, "More sales" lists the next page, and every refresh keeps what was asked for', {
    timeout: 60_000,
  }, async () => {
    const have = (await env.pool.query('select id from sales')).rowCount!;
    for (let i = have; i < 60; i++) await sale({ name: `Batch ${i}`, stock: 1 });
    const all = (await env.pool.query<{ id: string }>('select id from sales')).rows.map((r) => r.id).sort();
    const rows = async (page: Page) =>
      (
        await page
          .locator('[data-testid="sale-row"]')
          .evaluateAll((els) => els.map((e) => (e as HTMLElement).dataset.sale!))
      ).sort();
    const page = await open('/admin', undefined, true);
    await signIn(page);
    await page.getByTestId('sales-more').waitFor({ state: 'visible' });
    assert.equal((await rows(page)).length, 50);
    await page.getByTestId('sales-more').click();
    await page.getByTestId('sales-more').waitFor({ state: 'hidden' });
    await waitFor('every sale listed', async () => (await rows(page)).length === all.length, 5000, 100);
    assert.deepEqual(await rows(page), all, 'each sale once');
    // The next refresh reads both pages again: admin.js refreshes the list every 5 s (SALES_POLL_MS),
    // and draws every row anew, so once no marked row is left, the rows are the refresh's.
    await page.locator('[data-testid="sale-row"]').evaluateAll((els) => {
      for (const e of els) (e as HTMLElement).dataset.drawn = 'before';
    });
    await page.clock.fastForward(5000);
    await page.locator('[data-testid="sale-row"][data-drawn]').first().waitFor({ state: 'detached' });
    assert.deepEqual(await rows(page), all);
    await page.context().close();
  });
});

describe('operator page accessibility', () => {
  test('admin page: axe-core finds no serious or critical violation at desktop and phone sizes (signing in, the sales, a sale followed live), and none at all; no wider than a 390 px phone', {
    timeout: 90_000,
  }, async () => {
    const s = await sale({ name: 'Accessible console', stock: 3, paymentWindowSeconds: 600 });
    assert.equal((await buy(s.id, 'x1')).status, 202);
    await drain();
    const found: Record<string, Violation[]> = {};
    const wide: Record<string, string> = {};
    const audit = async (page: Page, where: string) => {
      const violations = await axeViolations(page);
      if (violations.length > 0) found[where] = violations;
      const width = await tooWide(page);
      if (width) wide[where] = width;
    };
    for (const [size, viewport] of Object.entries(VIEWPORTS)) {
      const page = await open(`/admin#${s.id}`, viewport);
      await see(page, 'sign-in-button', 'Sign in');
      await audit(page, `${size}, signing in`);
      await signIn(page);
      await see(page, 'live-name', 'Accessible console');
      await see(page, 'live-pending', '1');
      await page.locator('[data-testid="chart"][data-points]').waitFor();
      await audit(page, `${size}, a sale followed live`);
      await shot(page, `admin-a11y-${size}`);
      await page.context().close();
    }
    const barriers: Record<string, Violation[]> = {};
    for (const [where, violations] of Object.entries(found))
      if (serious(violations).length > 0) barriers[where] = serious(violations);
    assert.deepEqual(barriers, {}, `serious or critical:\n${JSON.stringify(barriers, null, 2)}`);
    assert.deepEqual(found, {}, `every violation:\n${JSON.stringify(found, null, 2)}`);
    assert.deepEqual(wide, {}, 'the page is no wider than the window (the sales table scrolls in its panel)');
  });
});
