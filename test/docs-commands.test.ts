// Every command README.md and docs/cli.md show in their code blocks, run as written against one
// running local stack (`flashsale dev`, found by the CLI itself as after `npm start`), so the docs
// cannot drift from the CLI. Each must exit 0, or the code its comment gives (`# exit 2: ...`).
// They run in this process (test/support/cli-here.ts): test/cli.test.ts holds the process's exit codes.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { signPayload } from '../shared/payments/providers/signed-webhook.js';
import { exited, ready, spawnCli } from './support/cli.js';
import { cliHere as cli } from './support/cli-here.js';
import { waitFor } from './support/fixtures.js';
import { http } from './support/http.js';
import { localStackVars } from './support/local-stack.js';

const DOCS = ['README.md', 'docs/cli.md'];

/**
 * Shell lines of those code blocks that are not `flashsale` commands, each with why a test does not
 * run it. Any other such line fails the test until it is run or listed here.
 */
const NOT_RUN: Record<string, string> = {
  'sudo apt-get update && sudo apt-get install -y redis-server redis-sentinel chromium wrk prometheus && npm install && npm start':
    'installs system packages; the stack it starts is the one this test starts',
  'npm test': 'the test suite itself',
};

/** Commands of docs/cli.md's table that run until stopped: the services, started by every other test. */
const LONG_RUNNING = ['dev', 'servers', 'api', 'order-writer', 'expiry-listener', 'admission', 'events'];

/** The command lines of a Markdown file's code blocks: every line of a sh block, the `$ ` lines of the others. */
function codeLines(file: string): string[] {
  const lines: string[] = [];
  let block: string | undefined;
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const fence = /^```(\w*)/.exec(line);
    if (fence) {
      block = block === undefined ? fence[1] : undefined;
      continue;
    }
    if (block === undefined || block === 'mermaid') continue;
    const command = block === 'sh' ? line.trim() : /^\$ (.*)/.exec(line)?.[1];
    if (command && !command.startsWith('#')) lines.push(command);
  }
  return lines;
}

/** Shell words, with '...' and "..." quoting: the only shell syntax the docs' commands use. */
function words(line: string): string[] {
  return [...line.matchAll(/"([^"]*)"|'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2] ?? m[3]!);
}

let stack: Awaited<ReturnType<typeof localStackVars>>;
let dev: ReturnType<typeof spawnCli>;
before(async () => {
  stack = await localStackVars();
  dev = spawnCli(undefined, ['dev'], stack.vars);
  await ready(dev, 'dev');
});
after(async () => {
  dev.kill('SIGINT');
  await exited(dev);
});

/** A refund due: the demo sale's order paid with the wrong amount, by the provider's signed webhook; its payment and its order. */
async function refundDue(): Promise<{ paymentId: string; orderId: string }> {
  const { port, dataDir } = stack;
  const { paymentWebhookSecret } = JSON.parse(readFileSync(join(dataDir, 'secrets.json'), 'utf8')) as {
    paymentWebhookSecret: string;
  };
  const { token } = (await http(port, 'POST', '/api/dev/token', { body: { userId: 'docs-buyer' } })).body as {
    token: string;
  };
  const headers = { authorization: `Bearer ${token}` };
  const bought = await http(port, 'POST', '/api/sales/demo/purchases', { body: { qty: 1 }, headers });
  assert.equal(bought.status, 202, JSON.stringify(bought.body));
  const orderId = bought.body.orderId as string;
  await waitFor(
    'the order pending',
    async () => (await http(port, 'GET', `/api/orders/${orderId}`, { headers })).body.status === 'pending_payment',
  );
  const raw = JSON.stringify({ id: 'evt_docs', type: 'payment.succeeded', orderId, amount: 1, currency: 'EUR' });
  const paid = await http(port, 'POST', '/api/payments/webhook', {
    body: raw,
    headers: { 'flashsale-signature': signPayload(paymentWebhookSecret, raw) },
  });
  assert.equal(paid.body.outcome, 'refund_due', JSON.stringify(paid.body));
  const refunds = await cli(undefined, ['refunds', '--json'], stack.vars);
  return {
    paymentId: (JSON.parse(refunds.stdout) as { paymentId: string; orderId: string }[]).find(
      (r) => r.orderId === orderId,
    )!.paymentId,
    orderId,
  };
}

/** A draw whose entries closed a minute ago: the stack's admission loop makes it at its next tick. */
async function drawnDraw(): Promise<string> {
  const iso = (ago: number) => new Date(Date.now() - ago).toISOString();
  const created = await cli(
    undefined,
    [
      'sale',
      'create',
      '--id',
      'docs-draw',
      '--name',
      'Docs draw',
      '--stock',
      '3',
      '--price',
      '100',
      '--currency',
      'EUR',
      '--admission',
      'draw',
      '--entries-open-at',
      iso(120_000),
      '--entries-close-at',
      iso(60_000),
      '--starts-at',
      iso(60_000),
      '--backfill-until',
      iso(60_000),
    ],
    stack.vars,
  );
  assert.equal(created.code, 0, created.out);
  await waitFor(
    'the draw made',
    async () => (await cli(undefined, ['draw', 'verify', 'docs-draw'], stack.vars)).code === 0,
    60_000,
    500,
  );
  return 'docs-draw';
}

test('docs: every command of README.md and docs/cli.md runs as written against a running local stack', async () => {
  const refund = await refundDue();
  const placeholders: Record<string, string> = {
    '<id>': 'demo',
    '<drawSaleId>': await drawnDraw(),
    '<paymentId>': refund.paymentId,
    '<orderId>': refund.orderId,
  };
  const lines = DOCS.flatMap((file) => codeLines(file).map((line) => ({ file, line })));
  const commands = lines.filter(({ line }) => /^(npx )?flashsale /.test(line));
  for (const { file, line } of lines.filter((l) => !commands.includes(l)))
    assert.ok(line in NOT_RUN, `${file}: \`${line}\` is neither run nor listed in NOT_RUN`);
  assert.ok(commands.length >= 15, `${commands.length} commands`);

  // Every command of docs/cli.md's table has an example here, unless it runs until stopped.
  const table = readFileSync('docs/cli.md', 'utf8')
    .split('\n')
    .map((row) => /^\| `flashsale ([a-z][a-z-]*(?: [a-z][a-z-]*)*)/.exec(row)?.[1])
    .filter((c) => c !== undefined);
  for (const command of table) {
    if (LONG_RUNNING.includes(command)) continue;
    assert.ok(
      commands.some(({ line }) => line.replace(/^npx /, '').startsWith(`flashsale ${command}`)),
      `docs/cli.md: \`flashsale ${command}\` has no example`,
    );
  }

  for (const { file, line } of commands) {
    const [command, comment] = line.split(/\s+#\s*/);
    const expected = Number(/^exit (\d)/.exec(comment ?? '')?.[1] ?? 0);
    const args = words(command!.replace(/<\w+>/g, (p) => placeholders[p] ?? p)).slice(
      command!.startsWith('npx ') ? 2 : 1,
    );
    const r = await cli(undefined, args, stack.vars);
    assert.equal(r.code, expected, `${file}: \`${line}\` exited ${r.code}:\n${r.out}`);
    assert.match(r.stderr, /^flashsale: using the local stack running on /, `${file}: \`${line}\` says which stack`);
  }
});
