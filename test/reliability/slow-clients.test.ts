// Slow clients (slowloris): one address opens connections and trickles request bodies while real
// buyers arrive from another. A request whose body is not in holds no in-flight slot, its body
// is cut off with 408 at BODY_TIMEOUT_MS, and one address holds at most
// MAX_CONNECTIONS_PER_CLIENT connections: every real buyer gets a real answer, never 429 busy,
// and stock is conserved.
import assert from 'node:assert/strict';
import { Agent } from 'node:http';
import { test } from 'node:test';
import type { Sale } from '../../shared/sales/sale.js';
import { type Cluster, fileCluster } from '../support/cluster.js';
import type { TestEnv } from '../support/env.js';
import { countBy, newSale, runConcurrently, waitFor, written } from '../support/fixtures.js';
import { http, outcome, rawRequest, type RawReply } from '../support/http.js';
import { assertAcceptedHeld, beginScenario, checkSale, summarize, tally } from '../support/scenario.js';
import { token } from '../support/tokens.js';

/** Every attack comes from here; buyers come from 127.0.0.1. */
const ATTACKER = '127.0.0.2';
// The defaults, which this scenario leaves as they are.
const BODY_TIMEOUT_MS = 2000;
const MAX_CONNECTIONS_PER_CLIENT = 1024;
const REQUEST_TIMEOUT_MS = 10_000;
const REAL_ANSWERS = ['202 queued', '409 sold_out', '409 limit_reached'];

let env: TestEnv;
let c: Cluster;

fileCluster('slow-clients', (started) => ({ env, c } = started));

/**
 * Connections that send a purchase's headers with `Content-Length: 100` and then 3 bytes of body,
 * from ATTACKER. While sustained, each one the server cuts off is replaced at once (up to
 * `budget` in all), so the attack lasts as long as the buyers do, however slow the machine.
 */
class Slowloris {
  readonly answers: RawReply[] = [];
  opened = 0;
  /** Connections that have sent their partial request, or were closed before they could. */
  inPlace = 0;
  private sustaining = true;

  constructor(
    private readonly path: string,
    private readonly budget: number,
  ) {}

  start(n: number): void {
    for (let i = 0; i < n; i++) this.open();
  }

  /** Stops replacing, then waits until the server has closed every connection still open. */
  async end(): Promise<void> {
    this.sustaining = false;
    await waitFor(
      'every attack connection closed by the server',
      async () => this.answers.length === this.opened,
      30_000,
      50,
    );
  }

  private open(): void {
    if (this.opened >= this.budget) return;
    this.opened++;
    const headers =
      `POST ${this.path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token(`slow-${this.opened}`)}\r\n` +
      'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"q';
    let placed = false;
    const place = () => {
      if (!placed) this.inPlace++;
      placed = true;
    };
    void rawRequest(c.apiPort, headers, { from: ATTACKER, onWritten: place }).then((r) => {
      place();
      this.answers.push(r);
      if (this.sustaining && r.status === 408) this.open();
    });
  }
}

/** `408 request_timeout`, `429 busy`, `closed` (no status line): one attack connection's fate. */
const fate = (r: RawReply) =>
  r.status === 0 ? `closed${r.error ? ` ${r.error}` : ''}` : `${r.status} ${r.body?.error}`;

/**
 * Each attack connection was cut off by the body deadline (408) or refused by the per-address cap
 * (429), and told so in our shape. One opened once the sale is sold out is told so at once, before
 * its body (purchase.ts), and its connection is still closed at the body deadline, not held for
 * REQUEST_TIMEOUT_MS.
 */
function assertAttackAnswered(answers: RawReply[], what: string): void {
  for (const r of answers) {
    const seen = `${what}: ${JSON.stringify(r)}`;
    assert.deepEqual(Object.keys(r.body ?? {}).sort(), ['error', 'message'], seen);
    if (r.status === 409) {
      assert.equal(r.body.error, 'sold_out', seen);
      assert.ok(r.closed && r.ms < REQUEST_TIMEOUT_MS, seen);
      continue;
    }
    assert.equal(r.headers.connection, 'close', seen);
    if (r.status === 408) {
      assert.equal(r.body.error, 'request_timeout', seen);
      // The body deadline's own message: not REQUEST_TIMEOUT_MS (10 s) cutting the whole request.
      assert.equal(r.body.message, `The request body did not arrive within ${BODY_TIMEOUT_MS} ms.`, seen);
    } else {
      assert.equal(r.status, 429, seen);
      assert.equal(r.body.error, 'busy', seen);
      assert.equal(r.headers['retry-after'], '1', seen);
    }
  }
}

/** `sockets` slowloris connections from ATTACKER while `buyers` distinct buyers purchase from 127.0.0.1. */
async function attack(scenario: string, sockets: number, maxInflight: string): Promise<void> {
  const { seed, log } = beginScenario(scenario, c);
  const BUYERS = 400;
  const sale: Sale = await newSale(env, { stock: 300, paymentWindowSeconds: 600 });
  const path = `/api/sales/${sale.id}/purchases`;
  const loris = new Slowloris(path, sockets + 3000);
  log.fault(
    `${sockets} slowloris connections from ${ATTACKER} (Content-Length: 100, 3 bytes sent) against MAX_INFLIGHT=${maxInflight}`,
  );
  const started = Date.now();
  loris.start(sockets);
  await waitFor('every attack connection in place', async () => loris.inPlace >= sockets, 30_000, 20);
  log.note(
    `${sockets} attack connections in place after ${Date.now() - started} ms; ${loris.answers.length} already answered`,
  );

  // Below MAX_INFLIGHT (50 in the smaller case) and the per-address cap: only the attack could
  // make the API shed these buyers.
  const agent = new Agent({ keepAlive: true, maxSockets: 40 });
  const answers = await runConcurrently(BUYERS, 40, (i) =>
    http(c.apiPort, 'POST', path, {
      body: { qty: 1 },
      user: `${scenario}-buyer-${seed}-${i}`,
      agent,
      timeoutMs: 30_000,
    }),
  );
  agent.destroy();
  const buyersMs = Date.now() - started;
  await loris.end();

  const outcomes = countBy(answers, outcome);
  const fates = countBy(loris.answers, fate);
  const accepted = answers.filter((r) => r.status === 202).map((r) => r.body.orderId as string);
  log.note(
    `buyers done ${buyersMs} ms into the attack: ${JSON.stringify(outcomes)}; ${loris.opened} attack connections in all: ${JSON.stringify(fates)}`,
  );

  assert.deepEqual(
    Object.keys(outcomes).filter((o) => !REAL_ANSWERS.includes(o)),
    [],
    `every buyer got a real answer: ${JSON.stringify(outcomes)}`,
  );
  assert.equal(accepted.length, sale.stock, 'the stock sold to real buyers');
  assertAttackAnswered(loris.answers, scenario);
  assert.ok(
    loris.answers.some((r) => r.status === 408),
    'the body deadline cut attack connections off',
  );

  const report = await assertAcceptedHeld(
    env,
    c,
    sale.id,
    accepted,
    'one order per 202, none for an attack connection',
  );
  summarize({
    scenario,
    seed,
    buyers: BUYERS,
    orders: accepted.length,
    faults: log.faults,
    faultKinds: `${sockets} slowloris connections (${loris.opened} with replacements: ${JSON.stringify(fates)}) vs MAX_INFLIGHT=${maxInflight}`,
    ...tally(report),
  });
}

test('slow clients: 1,001 connections trickling bodies from one address (default MAX_INFLIGHT) starve no buyer; each is cut off at the body deadline (408, or once sold out a 409 before it) or refused by the per-address cap', async () => {
  await attack('slow-clients/1001', 1001, 'default (1000)');
});

test(`slow clients: an address over MAX_CONNECTIONS_PER_CLIENT (${MAX_CONNECTIONS_PER_CLIENT}) is refused with 429 busy and buys nothing, while another address is served; a closed connection frees its place`, async () => {
  const { seed, log } = beginScenario('slow-clients/cap', c);
  const sale = await newSale(env, { stock: 10, paymentWindowSeconds: 600 });
  const path = `/api/sales/${sale.id}/purchases`;
  // The cap's worth of idle keep-alive connections from ATTACKER, each proven open by an answer.
  const held = new Agent({
    keepAlive: true,
    maxSockets: MAX_CONNECTIONS_PER_CLIENT,
    maxFreeSockets: MAX_CONNECTIONS_PER_CLIENT,
  });
  const get = async (agent: Agent | false) =>
    (await http(c.apiPort, 'GET', '/healthz', { from: ATTACKER, agent })).status;
  const opened = await Promise.all(Array.from({ length: MAX_CONNECTIONS_PER_CLIENT }, () => get(held)));
  assert.deepEqual(countBy(opened, String), { 200: MAX_CONNECTIONS_PER_CLIENT });
  const idle = Object.values(held.freeSockets).flat();
  assert.equal(idle.length, MAX_CONNECTIONS_PER_CLIENT, 'every connection held open');
  log.fault(`${MAX_CONNECTIONS_PER_CLIENT} idle connections held from ${ATTACKER}`);

  const purchase = (user: string) =>
    `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token(user)}\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{"qty":1}`;
  const over = await rawRequest(c.apiPort, purchase('over-the-cap'), { from: ATTACKER });
  assertAttackAnswered([over], 'one connection over the cap');
  assert.equal(over.status, 429);
  const served = await http(c.apiPort, 'POST', path, { body: { qty: 1 }, user: 'another-address', agent: false });
  assert.equal(outcome(served), '202 queued', 'a buyer from another address is served');

  // One held connection closes: its place is free again (once the server has seen the close).
  idle[0]!.destroy();
  await waitFor('a place freed by a closed connection', async () => (await get(false)) === 200, 10_000, 50);
  held.destroy();

  await written(env, sale.id, 'accepted purchase written');
  const orders = await env.pool.query<{ user_id: string }>('select user_id from orders where sale_id = $1', [sale.id]);
  assert.deepEqual(
    orders.rows.map((r) => r.user_id),
    ['another-address'],
    'the refused connection bought nothing',
  );
  const report = await checkSale(env, sale.id, [served.body.orderId]);
  assert.deepEqual(report.violations, []);
  summarize({
    scenario: 'slow-clients/cap',
    seed,
    buyers: 2,
    orders: orders.rows.length,
    faults: log.faults,
    faultKinds: `${MAX_CONNECTIONS_PER_CLIENT} connections held from one address, one more refused`,
    ...tally(report),
  });
});

test('slow clients: 50 connections trickling bodies against MAX_INFLIGHT=50 starve no buyer; each is cut off with 408 at the body deadline', async () => {
  await c.signal('api', 'SIGTERM', true);
  await c.start('api', 'api', { MAX_INFLIGHT: '50' });
  await attack('slow-clients/50', 50, '50');
});
