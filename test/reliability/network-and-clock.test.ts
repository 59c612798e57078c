// Network and clock faults: the real processes (two APIs, two writers, the listener, the replay and
// the admission loop) run in a private network namespace of their own (`unshare --net`, with its
// own loopback; the host's firewall is never touched), each reaching Redis (one standalone server)
// and a Postgres of the namespace's own through a TCP proxy of its own. Seeded, while buyers buy a
// first-come sale, wait in a waiting room and enter a draw through both APIs: partitions (iptables
// DROP on one process's proxy port: its connections hang) between an API, a writer, the listener or
// the admission loop and Redis, and a writer and Postgres, each healed after a few seconds; 1-5%
// random loss on Redis's or Postgres's port; 50-300 ms of delay with jitter on one process's proxy;
// and one API and one writer under libfaketime at -30 s, -2 s and +30 s, a phase each.
//
// network-and-clock/scenario.ts runs inside the namespace (started as root by `unshare --net`) and
// writes what it saw to FLASHSALE_NETNS_RESULT; the tests here judge it. The network faults must change nothing. The clock checks
// (no purchase outside the window by Redis's clock, no pass used past its expiry, no draw entry
// after the close, no order closed before its deadline by Postgres's clock) are reported per kind.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { runInPrivateNetns } from '../support/netns.js';
import { summarize } from '../support/scenario.js';
import type { NetworkScenarioResult } from './network-and-clock/scenario.js';

const SCENARIO = 'network-and-clock';

let result: NetworkScenarioResult | undefined;

test('network and clock: partitions, loss and delay between each process and Redis or Postgres, in a private network namespace: nothing accepted is lost, every invariant holds, no 500', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'flashsale-netns-'));
  const file = join(dir, 'result.json');
  try {
    const env: NodeJS.ProcessEnv = { ...process.env, FLASHSALE_NETNS_RESULT: file };
    // The run's Postgres is on the host's loopback, out of the namespace's reach: it starts its own.
    delete env.FLASHSALE_TEST_PG;
    delete env.NODE_TEST_CONTEXT;
    const inside = fileURLToPath(new URL('./network-and-clock/scenario.ts', import.meta.url));
    const code = await runInPrivateNetns(['--import', 'tsx', inside], env, (line) => console.log(line));
    assert.equal(code, 0, 'the scenario ran to its end inside its namespace (its output is above)');
    result = JSON.parse(readFileSync(file, 'utf8')) as NetworkScenarioResult;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const r = result;
  summarize({
    scenario: SCENARIO,
    seed: r.seed,
    buyers: r.buyers,
    orders: r.orders,
    faults: r.faults,
    faultKinds: r.faultKinds,
    checks: r.checks,
    violations: r.violations.length + Object.values(r.clock).reduce((n, v) => n + v.length, 0),
    answers: r.answers,
  });
  assert.deepEqual(r.violations, [], 'invariants while the faults ran and at rest');
  assert.deepEqual(r.missingOrders, [], 'every purchase answered 202 has its order in Postgres');
  assert.deepEqual(r.winnersWithoutOrder, [], 'every buyer told "you won" has an order');
  assert.equal(r.answers['500'] ?? 0, 0, `${r.answers['500']} requests answered 500`);
  assert.deepEqual(r.unexpectedExits, [], 'no process exited by itself');
  assert.ok(
    r.accepted > 0 && r.passPurchases > 0 && r.drawWinners > 0,
    `buying happened: ${r.accepted} first-come 202s, ${r.passPurchases} with a pass, ${r.drawWinners} draw winners`,
  );
});

// A sale's window and a pass's expiry are judged by Redis's TIME, a draw's close by Postgres's
// now(): an API or a writer whose own clock is off changes none of them.
test("network and clock: an API and a writer 30 s behind, 2 s behind and 30 s ahead change no decision judged by Redis's or Postgres's clock", () => {
  assert.ok(result, 'the scenario ran (see the test before)');
  for (const [kind, found] of Object.entries(result.clock))
    console.log(
      `[${SCENARIO}] clock ${kind}: ${found.length}${found.length ? `, e.g. ${found.slice(0, 3).join('; ')}` : ''}`,
    );
  assert.deepEqual(
    Object.fromEntries(Object.entries(result.clock).map(([k, v]) => [k, v.length])),
    Object.fromEntries(Object.keys(result.clock).map((k) => [k, 0])),
  );
});
