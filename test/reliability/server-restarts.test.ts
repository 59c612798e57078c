// Server restarts: Redis (AOF on) and Postgres go down and come back mid-sale; no process is
// restarted by the test, each reconnects by itself and carries on. Then what a Redis without
// persistence loses on a restart, and that the replay's reconciliation and `flashsale check` say so.
// Both servers here are this file's own: restarting the run's shared Postgres would break the others.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { delay } from '../../shared/runtime/daemon.js';
import { saleKeys } from '../../shared/redis/keys.js';
import { reconcile } from '../../shared/checks/reconcile.js';
import { purchaseScript } from '../../shared/sales/scripts.js';
import { newOrderId } from '../../shared/runtime/ids.js';
import { cliHere } from '../support/cli-here.js';
import { Cluster } from '../support/cluster.js';
import { testEnv, type TestEnv } from '../support/env.js';
import { newSale, orderCount, seededRandom, settle, waitFor } from '../support/fixtures.js';
import { http } from '../support/http.js';
import { assertNo500, beginScenario, checkSale, LiveChecks, summarize, tally } from '../support/scenario.js';
import { answersHold, Shoppers, windDown } from '../support/shoppers.js';

const envs: TestEnv[] = [];
const clusters: Cluster[] = [];

after(async () => {
  for (const c of clusters) c.killAll();
  for (const e of envs) await e.close();
});

test('server restarts: Redis (SIGKILL and SIGTERM, AOF on) and Postgres restart mid-sale; every process reconnects by itself and every invariant holds', async () => {
  const env = await testEnv({}, { ownPostgres: true });
  envs.push(env);
  const { seed, log, rand, answers } = beginScenario('server-restarts');
  const sale = await newSale(env, { stock: 4000, perUserLimit: 2, maxPerOrder: 2, paymentWindowSeconds: 2 });
  // Bought once after the last restart and never paid: its expiry is the listener's to close, however
  // the crowd's orders fell (all paid, or sold out, on a slow run).
  const probeSale = await newSale(env, { stock: 1, paymentWindowSeconds: 1 });
  const c = new Cluster(env, log);
  clusters.push(c);
  await c.startAll();

  const shoppers = new Shoppers({
    port: c.apiPort,
    saleId: sale.id,
    rand: seededRandom(seed + 1),
    users: 3000,
    prefix: 'buyer-',
    maxQty: 2,
    payRatio: 0.5,
    payDelayMs: [0, 2600],
    concurrency: 12,
    thinkMs: [5, 40],
  });
  // Overdue orders wait out a Postgres outage (nothing can close them); the grace covers it.
  const live = new LiveChecks(env, [sale.id], () => shoppers.accepted.map((w) => w.orderId), {
    everyMs: 500,
    graceMs: 4000,
  });
  shoppers.run();

  // Three outages in a seeded order, each after a seeded spell of trading and for a seeded while.
  const outages = ['redis-kill', 'postgres', 'redis-term']
    .map((o) => [o, rand()] as const)
    .sort((a, b) => a[1] - b[1])
    .map(([o]) => o);
  for (const outage of outages) {
    await delay(2000 + rand() * 1500);
    const downMs = 300 + rand() * 1200;
    if (outage === 'postgres') {
      log.fault(`Postgres fast shutdown, down ${Math.round(downMs)} ms`);
      await env.stopPostgres();
      await delay(downMs);
      await env.startPostgres();
      log.note('Postgres back');
    } else {
      const signal = outage === 'redis-kill' ? 'SIGKILL' : 'SIGTERM';
      log.fault(`redis-server ${signal}, down ${Math.round(downMs)} ms`);
      await env.stopRedis(signal);
      await delay(downMs);
      await env.startRedis();
      log.note(`redis-server back (AOF replayed): available ${await env.redis.get(saleKeys(sale.id).available)}`);
    }
  }
  const acceptedBefore = shoppers.accepted.length;
  const closedByListenerBefore = await c.metric('listener', 'flashsale_orders_closed_total', 'by="listener"');
  // The API reconnects on its own backoff (up to 2 s): until then a purchase is 503, as it should be.
  await waitFor('api reconnected', async () => (await http(c.apiPort, 'GET', '/readyz')).status === 200);
  const probe = await http(c.apiPort, 'POST', `/api/sales/${probeSale.id}/purchases`, {
    body: { qty: 1 },
    user: 'restart-probe',
  });
  assert.equal(probe.status, 202, JSON.stringify(probe.body));
  await delay(3000);
  const { final, orders } = await windDown(env, sale.id, shoppers, live);
  log.note(
    `purchases ${JSON.stringify(shoppers.purchases)}; orders ${orders}: ${await orderCount(env, sale.id, 'paid')} paid, ${await orderCount(env, sale.id, 'expired')} expired; live checks skipped during outages ${live.skipped}`,
  );
  const statuses = answers();
  summarize({
    scenario: 'server-restarts',
    seed,
    buyers: shoppers.buyers.size,
    orders,
    faults: log.faults,
    faultKinds: `redis-server SIGKILL 1, redis-server SIGTERM 1, Postgres restart 1 (order ${outages.join(', ')})`,
    ...tally(live, final),
    answers: statuses,
  });
  assertNo500('server-restarts', statuses);

  assert.deepEqual(c.unexpectedExits, [], 'no process exited: each rode out the outages');
  assert.deepEqual(live.violations, [], 'invariants during the outages');
  assert.deepEqual(final.violations, [], 'invariants at rest');
  assert.deepEqual(await answersHold(env, sale.id, shoppers), []);
  assert.ok(shoppers.accepted.length > acceptedBefore, 'buyers were served again after the last restart');
  await settle(env, probeSale.id);
  assert.equal(await orderCount(env, probeSale.id, 'expired'), 1);
  assert.deepEqual((await checkSale(env, probeSale.id, [probe.body.orderId as string])).violations, []);
  assert.ok(
    (await c.metric('listener', 'flashsale_orders_closed_total', 'by="listener"')) > closedByListenerBefore,
    'the listener closes orders on events again',
  );
  for (const name of ['writer', 'listener', 'replay'])
    assert.equal((await http(c.opsPort(name), 'GET', '/readyz')).status, 200, `${name} ready`);
  assert.equal((await http(c.apiPort, 'GET', '/readyz')).status, 200, 'api ready');
  assert.deepEqual(
    c.errors('replay').filter((l) => l.includes('CONSERVATION_VIOLATED')),
    [],
  );
  assert.deepEqual(await c.stopAll(), { api: 0, writer: 0, listener: 0, replay: 0 });
});

test('server restarts: a Redis without persistence forgets the sale on a restart, and reconciliation, the replay and `flashsale check` all report it', async () => {
  const env = await testEnv({}, { appendonly: false });
  envs.push(env);
  const { seed, log, answers } = beginScenario('redis-without-persistence');
  const sale = await newSale(env, { stock: 50, paymentWindowSeconds: 3 });
  const c = new Cluster(env, log);
  clusters.push(c);
  await Promise.all([c.start('api', 'api'), c.start('writer', 'order-writer')]);
  const buy = (user: string) => http(c.apiPort, 'POST', `/api/sales/${sale.id}/purchases`, { body: { qty: 1 }, user });

  // 20 orders written to Postgres (5 of them paid), then 10 more answered 202 while the writer is down.
  const written = await Promise.all(Array.from({ length: 20 }, (_, i) => buy(`np-${i}`)));
  assert.ok(written.every((r) => r.status === 202));
  await waitFor('20 orders written', async () => (await orderCount(env, sale.id, 'pending')) === 20);
  for (const [i, r] of written.slice(0, 5).entries())
    assert.equal((await http(c.apiPort, 'POST', `/api/orders/${r.body.orderId}/pay`, { user: `np-${i}` })).status, 200);
  await c.signal('writer', 'SIGTERM', true);
  const queued = await Promise.all(Array.from({ length: 10 }, (_, i) => buy(`nq-${i}`)));
  assert.ok(queued.every((r) => r.status === 202));
  const accepted = [...written, ...queued].map((r) => r.body.orderId as string);
  assert.ok((await reconcile(env.pool, env.redis, sale.id, sale.stock)).holds, 'conservation holds before the restart');

  await env.stopRedis('SIGKILL');
  await env.startRedis();
  log.fault('redis-server SIGKILL without AOF, restarted empty');

  // Lost: the stock counter, the sale's rules, buyers' counts and the 10 winners not yet written.
  assert.equal(await env.redis.dbsize(), 0);
  const r = await reconcile(env.pool, env.redis, sale.id, sale.stock);
  assert.deepEqual(
    { holds: r.holds, available: r.available, queued: r.queued, pending: r.pending, paid: r.paid },
    {
      holds: false,
      available: 0,
      queued: 0,
      pending: 0,
      paid: 0,
    },
    'nothing is counted: the purchase counter the check cuts at is gone too',
  );
  const report = await checkSale(env, sale.id, accepted);
  assert.deepEqual(
    report.violations.map((v) => v.invariant),
    ['conservation', 'accepted_has_one_order'],
  );
  assert.match(report.violations[1]!.detail, /answered 202 but no order: .*\(10\)$/);
  const lost = await env.pool.query('select 1 from orders where id = any($1::text[])', [
    queued.map((q) => q.body.orderId),
  ]);
  assert.equal(lost.rowCount, 0, 'the 10 queued winners are gone for good');
  // The API answers 503 until its connection is back (it never queues a purchase), then 404.
  await waitFor('api reconnected', async () => (await http(c.apiPort, 'GET', '/readyz')).status === 200);
  const refused = await buy('after-restart');
  assert.equal(refused.status, 404);
  assert.equal(refused.body.error, 'sale_not_found', 'the sale itself is gone from Redis');

  // One-shot commands, run in this process (test/cli.test.ts holds how their processes end).
  const once = await cliHere(env, ['replay', '--once']);
  assert.equal(once.code, 3, `replay --once exits 3 on a failed reconciliation: ${once.stdout}${once.stderr}`);
  assert.match(once.stdout, /"alert":"CONSERVATION_VIOLATED"/);
  const check = await cliHere(env, ['check', '--sale', sale.id, '--json']);
  assert.equal(check.code, 3, check.stderr);
  assert.deepEqual(
    JSON.parse(check.stdout).violations.map((v: { invariant: string }) => v.invariant),
    ['conservation'],
  );

  // What Postgres holds is kept: the 15 unpaid written orders are still closed by the sweep.
  await waitFor(
    'deadlines passed',
    async () =>
      (
        await env.pool.query(`select 1 from orders where sale_id = $1 and status = 'pending' and expires_at > now()`, [
          sale.id,
        ])
      ).rowCount === 0,
  );
  assert.equal((await cliHere(env, ['replay', '--once'])).code, 3);
  assert.equal(await orderCount(env, sale.id, 'expired'), 15);
  assert.equal(await orderCount(env, sale.id, 'paid'), 5);
  summarize({
    scenario: 'redis-without-persistence',
    seed,
    buyers: 30,
    orders: await orderCount(env, sale.id),
    faults: log.faults,
    faultKinds:
      'redis-server SIGKILL without AOF 1 (violations expected and asserted: conservation, 10 accepted orders lost)',
    checks: report.checks,
    violations: 0,
    answers: answers(),
  });
  assertNo500('redis-without-persistence', answers());
  await c.stopAll();
});

test('server restarts: a purchase whose reply a Redis restart cut off is resent by the client, and still takes its stock once', async () => {
  const env = await testEnv();
  envs.push(env);
  const { seed, log, rand } = beginScenario('server-restarts/resent-purchases');
  const sale = await newSale(env, { stock: 1_000_000, perUserLimit: 1000, maxPerOrder: 1 });
  // 50 purchases always in flight on one connection that resends what a dropped connection left
  // unanswered (ioredis's default); a restart lands between a script's run and its reply.
  let buying = true;
  const won = new Set<string>();
  const workers = Array.from({ length: 50 }, async (_, w) => {
    for (let n = 0; buying; n++) {
      const orderId = newOrderId(sale.id);
      const [code] = await purchaseScript(env.redis, {
        saleId: sale.id,
        userId: `u${w}-${n % 100}`,
        qty: 1,
        orderId,
        buyCountTtlSeconds: 3600,
      });
      if (code === 1) won.add(orderId);
    }
  });
  for (const signal of ['SIGKILL', 'SIGTERM', 'SIGKILL'] as const) {
    await delay(300 + rand() * 400);
    log.fault(`redis-server ${signal} with ${won.size} purchases so far`);
    await env.stopRedis(signal);
    await env.startRedis();
  }
  await delay(200);
  buying = false;
  await Promise.all(workers);

  const k = saleKeys(sale.id);
  const entries = (await env.redis.lrange(k.winners, 0, -1)).map((e) => e.split('|')[0]!);
  const sold = sale.stock - Number(await env.redis.get(k.available));
  summarize({
    scenario: 'server-restarts/resent-purchases',
    seed,
    buyers: 5000,
    orders: won.size,
    faults: log.faults,
    faultKinds: 'redis-server SIGKILL x2, SIGTERM x1 under 50 purchases in flight',
    checks: 1,
    violations: new Set(entries).size === entries.length ? 0 : 1,
  });
  assert.equal(new Set(entries).size, entries.length, 'no order queued twice');
  assert.deepEqual(
    { sold, queued: entries.length, seq: Number(await env.redis.get(k.seq)) },
    { sold: won.size, queued: won.size, seq: won.size },
  );
  assert.deepEqual(new Set(entries), won);
});
