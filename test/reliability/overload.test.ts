// Overload: far more buyers at once than one API process takes (MAX_INFLIGHT=50). It sheds the
// excess at once with 429 {"error":"busy"} instead of queueing without bound: every other buyer
// gets a real answer, /healthz keeps answering, memory stays bounded, stock is conserved. Clients
// that stall mid-body never hold an in-flight slot; clients that hang up give theirs back.
import assert from 'node:assert/strict';
import { Agent } from 'node:http';
import { test } from 'node:test';
import { delay } from '../../shared/runtime/daemon.js';
import type { Sale } from '../../shared/sales/sale.js';
import { type Cluster, fileCluster } from '../support/cluster.js';
import type { TestEnv } from '../support/env.js';
import { countBy, newSale, orderCount, rssMiB, runConcurrently, waitFor, written } from '../support/fixtures.js';
import { http, outcome, rawRequest, type Reply } from '../support/http.js';
import { assertAcceptedHeld, beginScenario, checkSale, summarize, tally } from '../support/scenario.js';
import { token } from '../support/tokens.js';

const MAX_INFLIGHT = 50;
let env: TestEnv;
let c: Cluster;

// REQUEST_TIMEOUT_MS stays at its default (10 s). Node times a request's headers from the moment
// it accepts the connection, and a storm that keeps the event loop busy for longer than the limit
// gets prompt clients a 408 before their bytes, already in the socket, are read: with 1.5 s here, a
// CI run shared with other tests saw 362 of 10,000 buyers answered 408 (429s took 2.7 s at p50).
// A stalled body still gets its 408 from BODY_TIMEOUT_MS (2 s).
fileCluster('overload', (started) => ({ env, c } = started), {
  base: { MAX_INFLIGHT: String(MAX_INFLIGHT) },
});

test(`overload: 10,000 buyers at once against MAX_INFLIGHT=${MAX_INFLIGHT}; the excess gets 429 busy at once, everyone else a real answer, /healthz stays up, memory stays bounded`, async () => {
  const { seed, log, rand } = beginScenario('overload', c);
  const sale = await newSale(env, { stock: 500, paymentWindowSeconds: 600 });
  const api = c.pid('api');
  // Warm up (JIT, pools, sockets), then take the resident size the storm is measured against.
  await runConcurrently(200, 20, () => http(c.apiPort, 'GET', `/api/sales/${sale.id}`));
  const rssBefore = rssMiB(api);

  const BUYERS = 10_000;
  const CONCURRENCY = 1500;
  const users = Array.from({ length: BUYERS }, (_, i) => `storm-${i}-${Math.floor(rand() * 1e6)}`);
  const tokens = users.map((u) => `Bearer ${token(u)}`);
  const stormAgent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  let storming = true;
  let rssPeak = rssBefore;
  const healthz: Reply[] = [];
  // A probe every 100 ms on a connection opened before the storm (a new one would first wait in
  // the kernel's accept queue behind the storm's: that measures TCP, not the process), and RSS.
  const probeAgent = new Agent({ keepAlive: true, maxSockets: 1 });
  assert.equal((await http(c.apiPort, 'GET', '/healthz', { agent: probeAgent })).status, 200);
  const watch = (async () => {
    while (storming) {
      rssPeak = Math.max(rssPeak, rssMiB(api));
      // Every other probe carries a query string, as some probers add: it is never shed either.
      healthz.push(
        await http(c.apiPort, 'GET', healthz.length % 2 ? '/healthz?probe=1' : '/healthz', {
          agent: probeAgent,
          timeoutMs: 10_000,
        }),
      );
      await delay(100);
    }
  })();
  log.fault(`${BUYERS} buyers at concurrency ${CONCURRENCY} against MAX_INFLIGHT=${MAX_INFLIGHT}`);
  const started = Date.now();
  const answers = await runConcurrently(BUYERS, CONCURRENCY, (i) =>
    http(c.apiPort, 'POST', `/api/sales/${sale.id}/purchases`, {
      body: { qty: 1 },
      headers: { authorization: tokens[i]! },
      agent: stormAgent,
      timeoutMs: 30_000,
    }),
  );
  const stormMs = Date.now() - started;
  storming = false;
  await watch;
  stormAgent.destroy();
  probeAgent.destroy();

  const outcomes: Record<string, number> = {};
  for (const r of answers) outcomes[outcome(r)] = (outcomes[outcome(r)] ?? 0) + 1;
  const busy = answers.filter((r) => r.status === 429);
  const accepted = answers.filter((r) => r.status === 202).map((r) => r.body.orderId as string);
  const maxProbe = Math.max(...healthz.map((p) => p.ms));
  const p50 = (rs: Reply[]) => Math.round(rs.map((r) => r.ms).sort((a, b) => a - b)[Math.floor(rs.length / 2)] ?? 0);
  log.note(
    `${stormMs} ms; ${JSON.stringify(outcomes)}; p50 latency (connect included) 429 ${p50(busy)} ms, others ${p50(answers.filter((r) => r.status !== 429))} ms; ` +
      `${healthz.length} /healthz probes, slowest ${Math.round(maxProbe)} ms; RSS ${rssBefore.toFixed(0)} MiB before, peak ${rssPeak.toFixed(0)} MiB`,
  );

  assert.deepEqual(
    Object.keys(outcomes).filter((o) => !['202 queued', '409 sold_out', '429 busy'].includes(o)),
    [],
    JSON.stringify(outcomes),
  );
  assert.ok(busy.length > 0, 'the storm was shed');
  for (const r of busy) {
    assert.deepEqual(Object.keys(r.body).sort(), ['error', 'message']);
    assert.equal(r.body.error, 'busy');
    assert.equal(r.headers['retry-after'], '1');
  }
  assert.ok(accepted.length > 0 && accepted.length <= sale.stock, `${accepted.length} accepted`);
  assert.ok(healthz.length > 0 && healthz.every((p) => p.status === 200), '/healthz answered 200 throughout the storm');
  // How fast is the bench's to say: on two cores shared with the storm's own client, the slowest
  // probe took 1.4-2.7 s on this code and on the code before it. What this test holds is that a
  // probe is never shed and never waits out its 10 s timeout behind the storm (every one 200 above).
  assert.ok(rssPeak - rssBefore < 200, `RSS grew ${(rssPeak - rssBefore).toFixed(0)} MiB under the storm`);

  const report = await assertAcceptedHeld(env, c, sale.id, accepted, 'one order per 202, none for a 429');
  summarize({
    scenario: 'overload',
    seed,
    buyers: BUYERS,
    orders: accepted.length,
    faults: log.faults,
    faultKinds: `${BUYERS} buyers at concurrency ${CONCURRENCY} vs MAX_INFLIGHT=${MAX_INFLIGHT}: ${busy.length} shed with 429`,
    ...tally(report),
  });
});

/** A purchase's headers (Content-Length: 9) and then `body` as it is. */
const purchase = (path: string, user: string, body: string) =>
  `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token(user)}\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n${body}`;

/** A request whose headers arrive but whose body never does. Resolves with the status line once the server answers. */
async function stalled(path: string, user: string, onWritten?: () => void): Promise<string> {
  return (await rawRequest(c.apiPort, purchase(path, user, '{"q'), { onWritten })).head.split('\r\n')[0]!;
}

/** A full request, then the client hangs up (FIN) without waiting for the answer. */
async function hangUp(path: string, user: string): Promise<void> {
  await rawRequest(c.apiPort, purchase(path, user, '{"qty":1}'), { hangUp: true });
}

let round = 0;

/** A fresh pending order, for holdEverySlot. */
async function holderOrder(sale: Sale): Promise<{ orderId: string; user: string }> {
  round++;
  const user = `holder-${round}`;
  // Slots still held by requests finishing may shed this one: it is retried until it is in.
  const bought = await waitFor("the holder's purchase", async () => {
    const r = await http(c.apiPort, 'POST', `/api/sales/${sale.id}/purchases`, {
      body: { qty: 1 },
      user,
      agent: false,
    });
    assert.ok(r.status === 202 || r.status === 429, JSON.stringify(r.body));
    return r.status === 202 ? r : undefined;
  });
  const orderId = bought.body.orderId as string;
  await waitFor(
    "the holder's order written",
    async () => (await env.pool.query('select 1 from orders where id = $1', [orderId])).rowCount === 1,
  );
  return { orderId, user };
}

/**
 * MAX_INFLIGHT payments of one order held in their handler at once (the test holds the order's
 * row lock), so each takes a slot until the lock goes: every one is let in only if every slot is
 * free. While they are held, the unshed paths are probed with a query string.
 */
async function holdEverySlot({
  orderId,
  user,
}: {
  orderId: string;
  user: string;
}): Promise<{ pays: Reply[]; probes: Record<string, number> }> {
  const lock = await env.pool.connect();
  let pays: Promise<Reply>[] = [];
  const probes: Record<string, number> = {};
  try {
    await lock.query('begin');
    await lock.query('select 1 from orders where id = $1 for update', [orderId]);
    pays = Array.from({ length: MAX_INFLIGHT }, () =>
      http(c.apiPort, 'POST', `/api/orders/${orderId}/pay`, { user, agent: false, timeoutMs: 30_000 }),
    );
    await waitFor(
      'every slot taken',
      async () => (await http(c.apiPort, 'GET', '/nope', { agent: false })).status === 429,
      10_000,
      20,
    );
    for (const path of ['/healthz?probe=1', '/metrics?name=x'])
      probes[path] = (await http(c.apiPort, 'GET', path, { agent: false })).status;
  } finally {
    await lock.query('commit');
    lock.release();
  }
  return { pays: await Promise.all(pays), probes };
}

test(`overload: clients that stall mid-body hold no in-flight slot, clients that hang up before the answer give theirs back, probes with a query string are never shed`, async () => {
  const { seed, log } = beginScenario('overload/slots', c);
  const sale = await newSale(env, { stock: 1000, paymentWindowSeconds: 600 });
  const path = `/api/sales/${sale.id}/purchases`;
  // A slot taken by a request still finishing frees up by itself; a leaked one never does, and
  // waitFor gives up.
  const allSlotsFree = async () =>
    (await holdEverySlot(await holderOrder(sale))).pays.every((r) => outcome(r) === '200 paid');

  const order = await holderOrder(sale);
  let inPlace = 0;
  const stalls = Array.from({ length: MAX_INFLIGHT }, (_, i) => stalled(path, `stall-${i}`, () => inPlace++));
  await waitFor('every stalled request sent', async () => inPlace === MAX_INFLIGHT, 10_000, 5);
  log.fault(`${MAX_INFLIGHT} requests stalled mid-body`);
  // As many stalled bodies as there are slots, and still every slot is free: a request takes one
  // only once its body is in. (Before, they took every slot until REQUEST_TIMEOUT_MS.)
  const held = await holdEverySlot(order);
  assert.deepEqual(countBy(held.pays, outcome), { '200 paid': MAX_INFLIGHT }, 'no slot held by a stalled body');
  assert.deepEqual(
    held.probes,
    { '/healthz?probe=1': 200, '/metrics?name=x': 200 },
    'probes with a query string answered with every slot taken',
  );
  assert.deepEqual(
    [...new Set(await Promise.all(stalls))],
    ['HTTP/1.1 408 request_timeout'],
    'each stalled request cut off with 408',
  );
  await waitFor('every slot free after the stalled requests', allSlotsFree, 20_000, 0);

  // Hang-ups: the purchase runs (or not), the answer goes nowhere, the slot must come back.
  await runConcurrently(300, 100, (i) => hangUp(path, `gone-${i}`));
  log.fault('300 purchases whose client hung up before the answer');
  await waitFor("the hung-up requests' slots free again", allSlotsFree, 20_000, 0);
  await written(env, sale.id, 'purchases written');
  log.note(`${round} rounds of ${MAX_INFLIGHT} held payments to see every slot free`);
  const report = await checkSale(env, sale.id);
  assert.deepEqual(report.violations, []);
  summarize({
    scenario: 'overload/slots',
    seed,
    buyers: MAX_INFLIGHT + 300 + round,
    orders: await orderCount(env, sale.id),
    faults: log.faults,
    faultKinds: `${MAX_INFLIGHT} stalled bodies, 300 hang-ups`,
    ...tally(report),
  });
});
