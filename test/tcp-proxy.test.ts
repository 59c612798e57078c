// The delaying TCP proxy of the network scenario: bytes go through intact and in order whatever
// the delays drawn, the delay is applied, and it can be changed while connections are open.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { Redis } from 'ioredis';
import { startRedis, type LocalServer } from '../tools/local-stack.js';
import { waitFor } from './support/fixtures.js';
import { TcpProxy } from './support/tcp-proxy.js';

let echo: Server;
let echoPort = 0;
let redis: LocalServer & { port: number };
let redisDir = '';

before(async () => {
  echo = createServer((s) => s.pipe(s));
  await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve));
  echoPort = (echo.address() as { port: number }).port;
  redisDir = mkdtempSync(join(tmpdir(), 'flashsale-proxy-'));
  redis = await startRedis(redisDir, { appendonly: false });
});

after(async () => {
  await new Promise((resolve) => echo.close(resolve));
  await redis.stop();
  rmSync(redisDir, { recursive: true, force: true });
});

/** Collects what comes back on `socket` until `n` bytes are in. */
function receive(socket: Socket, n: number): Promise<Buffer> {
  const got: Buffer[] = [];
  let size = 0;
  return new Promise((resolve, reject) => {
    socket.on('error', reject);
    socket.on('data', (c: Buffer) => {
      got.push(c);
      size += c.length;
      if (size >= n) resolve(Buffer.concat(got));
    });
  });
}

test('tcp proxy: 300 chunks with delays drawn at random come back intact and in order', async () => {
  const proxy = await TcpProxy.start(echoPort, { seed: 7, delay: [1, 40] });
  const socket = connect(proxy.port, '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  const chunks = Array.from({ length: 300 }, (_, i) => randomBytes(1 + ((i * 37) % 900)));
  const sent = Buffer.concat(chunks);
  const back = receive(socket, sent.length);
  // Each written apart, so the proxy sees many chunks with delays in every order.
  for (const c of chunks) {
    socket.write(c);
    await new Promise((resolve) => setImmediate(resolve));
  }
  assert.ok((await back).equals(sent), 'the bytes that came back are the bytes sent, in order');
  assert.ok(proxy.delayedChunks > 1, `chunks were delayed: ${proxy.delayedChunks}`);
  socket.destroy();
  await proxy.close();
});

test('tcp proxy: a round trip takes no less than the minimum delay each way', async () => {
  const proxy = await TcpProxy.start(echoPort, { seed: 8, delay: [50, 300] });
  const socket = connect(proxy.port, '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  const back = receive(socket, 5);
  const t = performance.now();
  socket.write('hello');
  assert.equal(String(await back), 'hello');
  // Out and back, each at least 50 ms late: a floor, which slowness cannot break.
  assert.ok(performance.now() - t >= 99, `round trip of ${performance.now() - t} ms`);
  socket.destroy();
  await proxy.close();
});

test('tcp proxy: Redis through it, the delay switched on and off with the connection open, answers every command with its own reply', async () => {
  const proxy = await TcpProxy.start(redis.port, { seed: 9 });
  const client = new Redis(proxy.port, '127.0.0.1', { maxRetriesPerRequest: 0 });
  try {
    const value = randomBytes(256 * 1024).toString('hex');
    await client.set('big', value);
    proxy.setDelay([50, 120]);
    const t = performance.now();
    // Pipelined while delayed, then the delay dropped with replies still queued: none is overtaken.
    const replies = Promise.all(Array.from({ length: 50 }, (_, i) => client.incrby('n', i)));
    const big = client.get('big');
    await waitFor('a chunk held back', async () => proxy.delayedChunks > 0, 10_000, 1);
    proxy.setDelay(undefined);
    const last = client.get('n');
    const sums = await replies;
    assert.deepEqual(
      sums,
      Array.from({ length: 50 }, (_, i) => (i * (i + 1)) / 2),
    );
    assert.equal(await big, value);
    assert.equal(await last, String((49 * 50) / 2));
    assert.equal(proxy.delay, undefined);
    assert.ok(performance.now() - t >= 99, 'the pipelined commands waited out the delay both ways');
    assert.equal(proxy.accepted, 1);
  } finally {
    client.disconnect();
    await proxy.close();
  }
});
