// Rate limits on real API processes sharing one Redis: purchases per buyer and per client address,
// challenges and their exchanges per buyer; 429 rate_limited with Retry-After, nothing changed by a
// refused request, and a limit that holds across processes because its counter is in Redis.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { startApi } from '../daemons/api.js';
import type { Config } from '../shared/config/index.js';
import { delay } from '../shared/runtime/daemon.js';
import { rateLimitPrefix, saleKeys } from '../shared/redis/keys.js';
import { testEnv, type TestEnv } from './support/env.js';
import { countBy, newSale, runConcurrently } from './support/fixtures.js';
import { http, outcome, type Reply } from './support/http.js';
import * as pow from './support/pow.js';
import { stateSnapshot } from './support/snapshot.js';

let env: TestEnv;
const apis: Awaited<ReturnType<typeof startApi>>[] = [];
/** No window closes during a test that uses this one: every count is exact. */
const LONG_WINDOW_MS = 60_000;

before(async () => {
  env = await testEnv();
});
after(async () => {
  for (const api of apis) await api.stop();
  await env.close();
});

/** Another API process on the file's Redis and Postgres, with these limits. */
async function api(limits: Partial<Config>): Promise<number> {
  const started = await startApi(
    { ...env.config, purchaseRateWindowMs: LONG_WINDOW_MS, challengeRateWindowMs: LONG_WINDOW_MS, ...limits },
    env.logger,
  );
  apis.push(started);
  return started.port;
}

const buy = (port: number, saleId: string, user: string, from?: string) =>
  http(port, 'POST', `/api/sales/${saleId}/purchases`, { body: { qty: 1 }, user, from });
const available = async (saleId: string) => Number(await env.redis.get(saleKeys(saleId).available));
const tally = (replies: Reply[]) => countBy(replies, outcome);

function assertRateLimited(r: Reply, maxSeconds: number): void {
  assert.equal(r.status, 429, JSON.stringify(r.body));
  assert.deepEqual(Object.keys(r.body).sort(), ['error', 'message']);
  assert.equal(r.body.error, 'rate_limited');
  const seconds = Number(r.headers['retry-after']);
  assert.ok(
    Number.isInteger(seconds) && seconds >= 1 && seconds <= maxSeconds,
    `Retry-After ${r.headers['retry-after']}`,
  );
}

test('per buyer: past PURCHASE_RATE_PER_BUYER a buyer gets 429 rate_limited with Retry-After and changes nothing; another buyer still buys', async () => {
  const port = await api({ purchaseRatePerBuyer: 3 });
  const sale = await newSale(env, { stock: 20, perUserLimit: 10 });
  for (let i = 0; i < 3; i++) assert.equal((await buy(port, sale.id, 'greedy')).status, 202);
  // Everything but the limit's own counter, which counts every attempt by design.
  const counter = saleKeys(sale.id).rate('greedy');
  const skip = (key: string) => key === counter;
  const before = await stateSnapshot(env, skip);
  const refused = [await buy(port, sale.id, 'greedy'), await buy(port, sale.id, 'greedy')];
  for (const r of refused) assertRateLimited(r, LONG_WINDOW_MS / 1000);
  assert.deepEqual(await stateSnapshot(env, skip), before, 'a refused purchase changed Redis or Postgres');
  assert.equal(await env.redis.get(counter), '5', "the counter is in Redis, in the sale's slot");
  const ttl = await env.redis.pttl(counter);
  assert.ok(ttl > 0 && ttl <= LONG_WINDOW_MS, `the counter ends with its window (PTTL ${ttl})`);

  assert.equal((await buy(port, sale.id, 'calm')).status, 202);
  assert.equal(await available(sale.id), 16);
});

test('per buyer across two API processes: the 202s over both together stop at the limit', async () => {
  const [a, b] = [await api({ purchaseRatePerBuyer: 3 }), await api({ purchaseRatePerBuyer: 3 })];
  const sale = await newSale(env, { stock: 20, perUserLimit: 10 });
  const replies = await runConcurrently(20, 20, (i) => buy(i % 2 ? b : a, sale.id, 'roamer'));
  assert.deepEqual(tally(replies), { '202 queued': 3, '429 rate_limited': 17 });
  for (const r of replies.filter((x) => x.status === 429)) assertRateLimited(r, LONG_WINDOW_MS / 1000);
  assert.equal(await available(sale.id), 17);
  assert.equal(await env.redis.llen(saleKeys(sale.id).winners), 3);
});

test('per address: past PURCHASE_RATE_PER_IP distinct buyers from one address get 429 rate_limited; another address still buys', async () => {
  const port = await api({ purchaseRatePerIp: 5, purchaseRatePerBuyer: 0 });
  const sale = await newSale(env, { stock: 20 });
  const replies: Reply[] = [];
  for (let i = 0; i < 8; i++) replies.push(await buy(port, sale.id, `crowd-${i}`, '127.0.0.2'));
  assert.deepEqual(
    replies.map((r) => r.status),
    [202, 202, 202, 202, 202, 429, 429, 429],
  );
  for (const r of replies.slice(5)) assertRateLimited(r, LONG_WINDOW_MS / 1000);
  assert.equal((await buy(port, sale.id, 'elsewhere', '127.0.0.3')).status, 202);
  assert.equal(await available(sale.id), 14);
});

test('a sale known sold out is answered from memory without counting: 409 sold_out, never 429', async () => {
  const port = await api({ purchaseRatePerBuyer: 2, soldOutCacheMs: LONG_WINDOW_MS });
  const sale = await newSale(env, { stock: 1 });
  assert.equal((await buy(port, sale.id, 'first')).status, 202);
  const replies: Reply[] = [];
  for (let i = 0; i < 6; i++) replies.push(await buy(port, sale.id, 'late'));
  assert.deepEqual(tally(replies), { '409 sold_out': 6 });
  // Only the first reached Redis (and learnt the sale was sold out).
  assert.equal(await env.redis.get(saleKeys(sale.id).rate('late')), '1');
});

test('after the window the limited buyer buys again', async () => {
  const port = await api({ purchaseRatePerBuyer: 2, purchaseRateWindowMs: 1000 });
  const sale = await newSale(env, { stock: 20, perUserLimit: 10 });
  let refused: Reply | undefined;
  for (let i = 0; i < 20 && !refused; i++) {
    const r = await buy(port, sale.id, 'patient');
    if (r.status === 429) refused = r;
    else assert.equal(r.status, 202, outcome(r));
  }
  assert.ok(refused, 'the buyer was limited');
  assertRateLimited(refused, 1);
  // What a client does: wait Retry-After seconds, which is at least what is left of the window.
  await delay(Number(refused.headers['retry-after']) * 1000);
  const again = await buy(port, sale.id, 'patient');
  assert.equal(again.status, 202, outcome(again));
});

test('challenges per buyer: past CHALLENGE_RATE_PER_BUYER 429 rate_limited and no challenge, across two API processes; exchanges count apart', async () => {
  const [a, b] = [await api({ challengeRatePerBuyer: 2 }), await api({ challengeRatePerBuyer: 2 })];
  const sale = await newSale(env, { challenge: 'pow', challengeComplexity: 1000 });
  const issued = [await pow.challengeFor(a, sale, 'farmer'), await pow.challengeFor(b, sale, 'farmer')];
  assert.deepEqual(issued.map(outcome), ['200', '200']);
  for (const port of [a, b]) {
    const refused = await pow.challengeFor(port, sale, 'farmer');
    assertRateLimited(refused, LONG_WINDOW_MS / 1000);
    assert.match(refused.body.message, /challenges too fast/);
  }
  assert.equal(await env.redis.get(`${rateLimitPrefix('challenge')}farmer`), '4');
  // The exchanges have their own counter, and another buyer is not held back.
  const t = await pow.exchange(a, sale, 'farmer', await pow.solve(issued[0]!.body));
  assert.equal(outcome(t), '200');
  assert.equal(outcome(await pow.challengeFor(a, sale, 'neighbour')), '200');
});

test('exchanges per buyer: past CHALLENGE_RATE_PER_BUYER 429 rate_limited, and the refused solution is not used up', async () => {
  const port = await api({ challengeRatePerBuyer: 2 });
  const sale = await newSale(env, { challenge: 'pow', challengeComplexity: 1000 });
  const first = await pow.solvedPayload(port, sale, 'swapper');
  const second = await pow.solvedPayload(port, sale, 'swapper');
  assert.equal(outcome(await pow.exchange(port, sale, 'swapper', first)), '200');
  assert.equal(outcome(await pow.exchange(port, sale, 'swapper', first)), '403 challenge_failed');
  const refused = await pow.exchange(port, sale, 'swapper', second);
  assertRateLimited(refused, LONG_WINDOW_MS / 1000);
  assert.match(refused.body.message, /exchanging solutions too fast/);
  const { challenge } = JSON.parse(Buffer.from(second, 'base64').toString()) as { challenge: { signature: string } };
  assert.equal(await env.redis.exists(saleKeys(sale.id).challengeUsed(challenge.signature)), 0);
  assert.equal(await env.redis.get(`${rateLimitPrefix('exchange')}swapper`), '3');
});
