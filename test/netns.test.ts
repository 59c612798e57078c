// The network scenario's namespace helpers: no iptables rule is ever made in the namespace the
// tests run in, and inside a namespace of its own a partition makes a connection hang (DROP, not a
// reset) until it is healed.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { test } from 'node:test';
import { inPrivateNetns, NetFaults, runInPrivateNetns } from './support/netns.js';

const rules = async () => (await promisify(execFile)('iptables', ['-w', '-S'])).stdout;

test('netns: outside a namespace of its own, a partition is refused and no rule is made', async () => {
  const before = await rules();
  assert.equal(inPrivateNetns(), false);
  await assert.rejects(new NetFaults().partition(1), /iptables refused/);
  await assert.rejects(new NetFaults().loss(1, 0.05), /iptables refused/);
  assert.equal(await rules(), before, "this namespace's rules are as they were");
});

// Run inside the namespace: a server on its loopback, cut off, then healed.
const INSIDE = `
import { connect, createServer } from 'node:net';
const { inPrivateNetns, NetFaults } = await import(${JSON.stringify(new URL('./support/netns.ts', import.meta.url).pathname)});
if (!inPrivateNetns()) throw new Error('not in a namespace of its own');
const server = createServer((s) => s.end('hi'));
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const port = server.address().port;
const faults = new NetFaults();
const heal = await faults.partition(port);
console.log('rules ' + JSON.stringify((await faults.list()).split('\\n').filter((l) => l.startsWith('-A'))));
const cut = connect(port, '127.0.0.1');
let connected = false;
cut.on('connect', () => (connected = true));
cut.on('error', (err) => console.log('error ' + err.code));
await new Promise((r) => setTimeout(r, 500));
console.log('connected while cut off: ' + connected);
await heal();
const got = await new Promise((resolve, reject) => {
  const s = connect(port, '127.0.0.1');
  let data = '';
  s.on('data', (c) => (data += c));
  s.on('end', () => resolve(data));
  s.on('error', reject);
});
console.log('after the heal: ' + got);
console.log('rules left ' + JSON.stringify((await faults.list()).split('\\n').filter((l) => l.startsWith('-A'))));
process.exit(0);
`;

test('netns: inside a namespace of its own, a partition hangs a connection (no reset) and its heal lets the next one through', async () => {
  const before = await rules();
  const lines: string[] = [];
  const code = await runInPrivateNetns(['--import', 'tsx', '--input-type=module', '-e', INSIDE], process.env, (l) =>
    lines.push(l),
  );
  assert.equal(code, 0, lines.join('\n'));
  const port = /--dport (\d+)/.exec(lines[0]!)?.[1];
  assert.deepEqual(lines, [
    `rules ${JSON.stringify([`-A OUTPUT -p tcp -m tcp --dport ${port} -j DROP`, `-A OUTPUT -p tcp -m tcp --sport ${port} -j DROP`])}`,
    'connected while cut off: false',
    'after the heal: hi',
    'rules left []',
  ]);
  assert.equal(await rules(), before, "the rules were made in the child's namespace, none here");
});
