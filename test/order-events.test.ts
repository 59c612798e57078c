// The buyer's order as Server-Sent Events, against the real processes as production runs them: the
// API, the order writer and the expiry listener each a process of its own, so every transition the
// writer and the listener make reaches the API's streams through Redis. Each stream shows its owner
// every transition of their order and nothing of anyone else's; bad requests and streams past the
// limits are refused; open streams hold no in-flight slot and outlive the request timeout.
import assert from 'node:assert/strict';
import { request, type ClientRequest } from 'node:http';
import { test } from 'node:test';
import pg from 'pg';
import { pino } from 'pino';
import { buildApp } from '../shared/http/app.js';
import { Purchaser } from '../shared/purchase/purchaser.js';
import type { Sale } from '../shared/sales/sale.js';
import { type Cluster, fileCluster } from './support/cluster.js';
import { assertConserved, type TestEnv } from './support/env.js';
import { newSale, waitFor } from './support/fixtures.js';
import { http, outcome } from './support/http.js';
import { token } from './support/tokens.js';

let env: TestEnv;
let c: Cluster;
const sales: Sale[] = [];

// The writer is started by the first test, once it has seen an order queued.
fileCluster('order-events', (started) => ({ env, c } = started), {
  procs: [
    ['api', 'api'],
    ['listener', 'expiry-listener'],
  ],
  base: { SSE_MAX_STREAMS: '6', SSE_MAX_STREAMS_PER_BUYER: '2', MAX_INFLIGHT: '2', REQUEST_TIMEOUT_MS: '300' },
});

interface OrderEvent {
  orderId: string;
  saleId: string;
  qty: number;
  status: string;
  expiresAt?: string;
}

/** One GET /api/orders/:id/events on a connection of its own, its events collected as they come. */
class Stream {
  status = 0;
  body = '';
  ended = false;
  readonly events: OrderEvent[] = [];
  private req!: ClientRequest;

  static open(orderId: string, opts: { user?: string; query?: string } = {}): Promise<Stream> {
    const s = new Stream();
    return new Promise((resolve) => {
      const headers = opts.user === undefined ? {} : { authorization: `Bearer ${token(opts.user)}` };
      s.req = request(
        {
          host: '127.0.0.1',
          port: c.apiPort,
          path: `/api/orders/${orderId}/events${opts.query ?? ''}`,
          headers,
          agent: false,
        },
        (res) => {
          s.status = res.statusCode ?? 0;
          res.setEncoding('utf8');
          let buffered = '';
          res.on('data', (chunk: string) => {
            s.body += chunk;
            buffered += chunk;
            for (let i = buffered.indexOf('\n\n'); i !== -1; i = buffered.indexOf('\n\n')) {
              const data = buffered
                .slice(0, i)
                .split('\n')
                .filter((l) => l.startsWith('data: '))
                .map((l) => l.slice(6));
              buffered = buffered.slice(i + 2);
              if (data.length > 0) s.events.push(JSON.parse(data.join('\n')) as OrderEvent);
            }
          });
          res.on('end', () => (s.ended = true));
          res.on('close', () => (s.ended = true));
          resolve(s);
        },
      );
      s.req.on('error', () => {
        s.ended = true;
        resolve(s);
      });
      s.req.end();
    });
  }

  /** Waits for the event with this status; every event must be of `orderId`. */
  async see(status: string): Promise<OrderEvent> {
    const e = await waitFor(
      `a ${status} event (seen: ${this.statuses()})`,
      async () => this.events.find((x) => x.status === status),
      20_000,
    );
    return e;
  }

  statuses(): string {
    return this.events.map((e) => e.status).join(' -> ');
  }

  close(): void {
    this.req.destroy();
  }
}

async function sale(fields: Record<string, unknown> = {}): Promise<Sale> {
  sales.push(await newSale(env, { stock: 10, perUserLimit: 1, paymentWindowSeconds: 3600, ...fields }));
  return sales.at(-1)!;
}

/** Buys one unit as `user` and answers the order id. */
async function buy(s: Sale, user: string): Promise<string> {
  const r = await http(c.apiPort, 'POST', `/api/sales/${s.id}/purchases`, { body: { qty: 1 }, user });
  if (r.status !== 202) assert.fail(`purchase by ${user}: ${outcome(r)}`);
  return String(r.body.orderId);
}

const statusOf = async (id: string) =>
  (await env.pool.query<{ status: string }>('select status from orders where id = $1', [id])).rows[0]?.status;

test("events: the owner sees queued, pending_payment, paid as the writer process and the API make them, and no one else's; the stream ends", {
  timeout: 60_000,
}, async () => {
  const s = await sale();
  const alice = await buy(s, 'alice');
  const bob = await buy(s, 'bob');
  const aliceStream = await Stream.open(alice, { user: 'alice' });
  // EventSource's way: the token in the query.
  const bobStream = await Stream.open(bob, { query: `?access_token=${token('bob')}` });
  assert.equal(aliceStream.status, 200, aliceStream.body);
  assert.equal(bobStream.status, 200, bobStream.body);
  assert.deepEqual(
    aliceStream.events,
    [{ orderId: alice, saleId: s.id, qty: 1, status: 'queued' }],
    'the first event is the order now',
  );

  const stranger = await http(c.apiPort, 'GET', `/api/orders/${alice}/events`, { user: 'bob' });
  assert.equal(outcome(stranger), '404 order_not_found', "another buyer's order is not found");

  await c.start('writer', 'order-writer');
  const pending = await aliceStream.see('pending_payment');
  const row = (await env.pool.query<{ expires_at: Date }>('select expires_at from orders where id = $1', [alice]))
    .rows[0]!;
  assert.equal(pending.expiresAt, row.expires_at.toISOString(), 'with the deadline Postgres has');
  await bobStream.see('pending_payment');

  const paid = await http(c.apiPort, 'POST', `/api/orders/${alice}/pay`, { user: 'alice' });
  assert.equal(outcome(paid), '200 paid');
  await aliceStream.see('paid');
  await waitFor("alice's stream ended after paid", async () => aliceStream.ended);
  assert.equal(aliceStream.statuses(), 'queued -> pending_payment -> paid');

  const cancelled = await http(c.apiPort, 'POST', `/api/orders/${bob}/cancel`, { user: 'bob' });
  assert.equal(outcome(cancelled), '200 cancelled');
  await bobStream.see('cancelled');
  await waitFor("bob's stream ended after cancelled", async () => bobStream.ended);
  assert.equal(bobStream.statuses(), 'queued -> pending_payment -> cancelled');
  assert.ok(
    bobStream.events.every((e) => e.orderId === bob),
    "bob saw nothing of alice's order",
  );
  assert.deepEqual([await statusOf(alice), await statusOf(bob)], ['paid', 'cancelled']);
  await assertConserved(env, sales);
});

test('events: an unpaid order is shown expired by the listener process, and its stream ends', {
  timeout: 60_000,
}, async () => {
  const s = await sale({ paymentWindowSeconds: 2 });
  const id = await buy(s, 'carol');
  const stream = await Stream.open(id, { user: 'carol' });
  await stream.see('expired');
  await waitFor('the stream ended', async () => stream.ended);
  assert.match(stream.statuses(), /^(queued -> )?pending_payment -> expired$/);
  assert.equal(await statusOf(id), 'expired');
  await waitFor('stock back', async () => (await env.redis.get(`{sale:${s.id}}:available`)) === '10');
  await assertConserved(env, sales);
});

test('events: bad requests are refused with {error, message} and open nothing', async () => {
  const s = await sale();
  const id = await buy(s, 'dan');
  const cases: [string, Parameters<typeof http>[3], string][] = [
    ['/api/orders/not-an-id/events', { user: 'dan' }, '400 invalid_id'],
    [`/api/orders/${id}/events`, {}, '401 unauthorized'],
    [`/api/orders/${id}/events?access_token=nonsense`, {}, '401 unauthorized'],
    [`/api/orders/${id}/events?access_token=${token('dan', 'another-secret-0123456789')}`, {}, '401 unauthorized'],
    [`/api/orders/${id}/events?since=1`, { user: 'dan' }, '400 bad_request'],
    [`/api/orders/${id}/events`, { user: 'erin' }, '404 order_not_found'],
    [`/api/orders/${s.id}.00000000-0000-4000-8000-000000000000/events`, { user: 'dan' }, '404 order_not_found'],
  ];
  for (const [path, opts, expected] of cases) {
    const r = await http(c.apiPort, 'GET', path, opts);
    assert.equal(outcome(r), expected, path);
    assert.equal(typeof r.body.message, 'string', path);
  }
  // Nothing was left open: dan still has both of his streams. Ended by the server, which frees them for the next test.
  const streams = [await Stream.open(id, { user: 'dan' }), await Stream.open(id, { user: 'dan' })];
  assert.deepEqual(
    streams.map((x) => x.status),
    [200, 200],
  );
  assert.equal(outcome(await http(c.apiPort, 'POST', `/api/orders/${id}/cancel`, { user: 'dan' })), '200 cancelled');
  for (const x of streams) await waitFor('ended after cancelled', async () => x.ended);
  await assertConserved(env, sales);
});

test('events: past SSE_MAX_STREAMS_PER_BUYER and SSE_MAX_STREAMS a stream is 429 busy; open streams hold no in-flight slot and outlive REQUEST_TIMEOUT_MS', {
  timeout: 60_000,
}, async () => {
  const s = await sale();
  const ids = new Map<string, string>();
  for (const user of ['fay', 'gus', 'hal', 'ida']) ids.set(user, await buy(s, user));
  await waitFor('written', async () => (await statusOf(ids.get('ida')!)) === 'pending');
  const open = async (user: string) => Stream.open(ids.get(user)!, { user });

  const fay = [await open('fay'), await open('fay')];
  const third = await open('fay');
  assert.equal(third.status, 429, 'a third stream of one buyer');
  assert.equal(JSON.parse(third.body).error, 'busy');
  const others = [await open('gus'), await open('gus'), await open('hal'), await open('hal')];
  assert.deepEqual(
    [...fay, ...others].map((x) => x.status),
    [200, 200, 200, 200, 200, 200],
  );
  const seventh = await open('ida');
  assert.equal(seventh.status, 429, 'past SSE_MAX_STREAMS in the process');

  // Six streams open with MAX_INFLIGHT=2: a request still gets its answer, not 429.
  const view = await http(c.apiPort, 'GET', `/api/orders/${ids.get('ida')}`, { user: 'ida' });
  assert.equal(view.status, 200, outcome(view));

  // A closed stream gives its slots back.
  others[0]!.close();
  const again = await waitFor('a slot given back', async () => {
    const x = await open('ida');
    return x.status === 200 ? x : undefined;
  });

  // Well past REQUEST_TIMEOUT_MS (300 ms, checked every 300 ms): the streams are still open and still delivered to.
  await new Promise((r) => setTimeout(r, 1500));
  assert.equal(
    fay.some((x) => x.ended),
    false,
    'not cut by the request timeout',
  );
  assert.equal(
    outcome(await http(c.apiPort, 'POST', `/api/orders/${ids.get('fay')}/pay`, { user: 'fay' })),
    '200 paid',
  );
  for (const x of fay) await x.see('paid');
  for (const x of [...others, again]) x.close();
  await assertConserved(env, sales);
});

test('events: a token given in the query never reaches the logs', async () => {
  const s = await sale();
  const id = await buy(s, 'jan');
  await waitFor('written', async () => (await statusOf(id)) === 'pending');
  const lines: string[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
  // A Postgres that is not there: the request fails with 503 and is logged with its URL.
  const pool = new pg.Pool({ connectionString: 'postgres://nobody@127.0.0.1:1/none', connectionTimeoutMillis: 1000 });
  const config = { ...env.config, sseMaxStreams: 10, sseMaxStreamsPerBuyer: 5 };
  const app = buildApp({ config, pool, redis: env.redis, purchaser: new Purchaser(env.redis, config), logger });
  try {
    const secret = token('jan');
    const r = await app.inject({ method: 'GET', url: `/api/orders/${id}/events?access_token=${secret}` });
    assert.equal(r.statusCode, 503, r.body);
    assert.ok(
      lines.some((l) => l.includes(`/api/orders/${id}/events?access_token=redacted`)),
      `the request was logged: ${lines.join('')}`,
    );
    assert.equal(
      lines.some((l) => l.includes(secret)),
      false,
      'without its token',
    );
  } finally {
    await app.close();
    await pool.end();
  }
});
