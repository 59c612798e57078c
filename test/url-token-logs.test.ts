// No log line ever carries a buyer token: the API at its most verbose level takes order streams
// with the token in the URL in every spelling its query parser reads as `access_token`, and in
// spellings it refuses, with good and bad tokens, through 400, 401, 404 and 429 and through 503
// (Redis gone, where each request is logged with its URL); then every line of its output is searched
// for each token and for each token's signature.
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { after, before, test } from 'node:test';
import { delay } from '../shared/runtime/daemon.js';
import { freePort } from '../tools/local-stack.js';
import { exited, ready, spawnCli } from './support/cli.js';
import { testEnv, type TestEnv } from './support/env.js';
import { newSale } from './support/fixtures.js';
import { http } from './support/http.js';
import { token } from './support/tokens.js';

let env: TestEnv;
before(async () => {
  env = await testEnv();
});
after(async () => {
  await env.close();
});

/** Opens GET `path`, resolves with the status as soon as it is known, and leaves the stream open until `close()`. */
function stream(
  port: number,
  path: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; close(): void }> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path, headers, agent: false }, (res) => {
      res.resume();
      resolve({ status: res.statusCode ?? 0, close: () => req.destroy() });
    });
    req.on('error', () => resolve({ status: 0, close: () => {} }));
    req.end();
  });
}

test('url tokens: no log line at trace level carries a token or its signature, in any spelling or error path', async () => {
  const port = await freePort();
  const api = spawnCli(
    env,
    ['api'],
    { PORT: String(port), LOG_LEVEL: 'trace', SSE_MAX_STREAMS_PER_BUYER: '1' },
    'pipe',
  );
  let out = '';
  api.stdout!.setEncoding('utf8');
  api.stdout!.on('data', (d: string) => (out += d));
  const owner = token('url-token-owner');
  const stranger = token('url-token-stranger');
  const wrongKey = token('url-token-owner', 'a-key-this-server-never-had-0123');
  const garbage = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.not-a-real-signature-at-all';
  const tokens = [owner, stranger, wrongKey, garbage];
  let logged: (readonly [string, Record<string, string>])[] = [];
  try {
    await ready(api, 'the api');
    const sale = await newSale(env, { stock: 5 });
    const bought = await http(port, 'POST', `/api/sales/${sale.id}/purchases`, {
      body: { qty: 1 },
      user: 'url-token-owner',
    });
    assert.equal(bought.status, 202, JSON.stringify(bought.body));
    const events = `/api/orders/${bought.body.orderId}/events`;

    // Spellings fastify's query parser decodes to access_token: each one authenticates.
    const accepted = ['?access_token=', '?access%5Ftoken=', '?access%5ftoken=', '?%61ccess_token=', '#access_token='];
    for (const q of accepted) {
      const s = await stream(port, `${events}${q}${owner}`);
      assert.equal(s.status, 200, `${q} is read as the token`);
      s.close();
      await delay(50); // the stream's slot is given back on close
    }
    const held = await stream(port, `${events}?access_token=${owner}`);
    assert.equal(held.status, 200);
    const cases: [string, number, Record<string, string>?][] = [
      [`${events}?access_token=${owner}`, 429], // the buyer's one stream is open
      [`${events}?access_token=${stranger}`, 404], // not the stranger's order
      [`/api/orders/nope/events?access_token=${owner}`, 400],
      [`/api/no-such-route?access_token=${owner}`, 404],
      [`${events};access_token=${owner}`, 404],
      [`${events}?access_token=${wrongKey}`, 401],
      [`${events}?access_token=${garbage}`, 401],
      [`${events}?ACCESS_TOKEN=${owner}`, 401],
      [`${events}?access_token=${owner}&access_token=${stranger}`, 401],
      [`${events}?a=1;access_token=${owner}`, 401],
      [`${events}?access_token=${stranger}&x=1`, 400, { authorization: `Bearer ${stranger}` }],
      [`${events}?ACCESS_TOKEN=${owner}`, 400, { authorization: `Bearer ${stranger}` }],
    ];
    for (const [path, status, headers] of cases) assert.equal((await stream(port, path, headers)).status, status, path);
    held.close();

    // Redis gone: each stream that gets as far as its order fails 503 and is logged with its URL
    // (one line per reason a second, hence the pause). The header wins over a token in the URL.
    await env.stopRedis('SIGKILL');
    logged = [
      ...accepted.map((q) => [`${events}${q}${owner}`, {}] as const),
      [`${events}?access_token=${stranger}`, { authorization: `Bearer ${owner}` }] as const,
    ];
    for (const [path, headers] of logged) {
      await delay(1100);
      assert.equal((await stream(port, path, headers)).status, 503, path);
    }
    await delay(200);
    api.kill('SIGINT');
    assert.equal(await exited(api), 0);
  } finally {
    api.kill('SIGKILL');
    await env.startRedis();
  }

  const lines = out.split('\n').filter(Boolean);
  const urls = lines
    .map((l) => (JSON.parse(l) as { request?: { url?: string } }).request?.url)
    .filter((u): u is string => u !== undefined);
  assert.equal(urls.length, logged.length, `every 503 was logged with its URL:\n${out}`);
  assert.ok(
    urls.every((u) => u.includes('=redacted')),
    urls.join('\n'),
  );
  for (const t of tokens) {
    const signature = t.split('.')[2]!;
    const hits = lines.filter((l) => l.includes(t) || l.includes(signature));
    assert.deepEqual(hits, [], `a token or its signature is in the log (${lines.length} lines)`);
  }
});
