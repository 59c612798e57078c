// An operator's live controls of a sale: pause and resume (purchases answer 409 paused, the waiting
// room holds, a draw's entries go on), and a new end, earlier or later. Each is one change in
// Postgres and Redis together, idempotent, and a refusal changes nothing in either.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { admitStep, Phase } from '../shared/admission/room/room.js';
import { saleKeys } from '../shared/redis/keys.js';
import { isPaused } from '../shared/sales/controls.js';
import { loadSaleIntoRedis, type Sale } from '../shared/sales/sale.js';
import { apiSuite, type ApiSuite } from './support/api.js';
import { assertConserved } from './support/env.js';
import {
  countBy,
  HOUR,
  newSale,
  openDraw,
  redisNow,
  refillRoom,
  runConcurrently,
  waitFor,
  drainWriter,
} from './support/fixtures.js';
import { outcome } from './support/http.js';
import { stateSnapshot } from './support/snapshot.js';
import { ADMIN_TOKEN } from './support/tokens.js';

let s: ApiSuite;
apiSuite((suite) => (s = suite));

const ADMIN = { authorization: `Bearer ${ADMIN_TOKEN}` };
const iso = (ms: number) => new Date(ms).toISOString();

const buy = (sale: Sale, user: string) => s.call('POST', `/api/sales/${sale.id}/purchases`, { user, body: { qty: 1 } });
const control = (sale: Sale | string, what: 'pause' | 'resume') =>
  s.call('POST', `/api/sales/${typeof sale === 'string' ? sale : sale.id}/${what}`, { headers: ADMIN });
const endTime = (sale: Sale | string, body: unknown) =>
  s.call('POST', `/api/sales/${typeof sale === 'string' ? sale : sale.id}/end-time`, { headers: ADMIN, body });

const pgRow = async (id: string) =>
  (
    await s.env.pool.query<{ paused_at: Date | null; ends_at: Date | null }>(
      'select paused_at, ends_at from sales where id = $1',
      [id],
    )
  ).rows[0]!;
const redisPaused = async (id: string) => (await s.env.redis.hexists(saleKeys(id).meta, 'paused')) === 1;
const redisEnd = async (id: string) => Number(await s.env.redis.hget(saleKeys(id).meta, 'endsAt'));
const auditActions = async (id: string) =>
  (
    await s.env.pool.query<{ action: string }>('select action from audit where sale_id = $1 order by id', [id])
  ).rows.map((r) => r.action);

async function drain(): Promise<void> {
  await drainWriter(s.env, 'w-controls');
}

describe('pause and resume', () => {
  test('pause: purchases answer 409 paused in both stores; a second pause is the same pause (one audit row); resume sells again', async () => {
    const sale = await newSale(s.env, { stock: 5 });
    assert.equal(outcome(await buy(sale, 'ann')), '202 queued');

    const paused = await control(sale, 'pause');
    assert.equal(outcome(paused), '200');
    assert.deepEqual([paused.body.paused, paused.body.changed], [true, true]);
    assert.ok((await pgRow(sale.id)).paused_at instanceof Date);
    assert.equal(await redisPaused(sale.id), true);
    const refused = await buy(sale, 'bob');
    assert.equal(outcome(refused), '409 paused');
    assert.match(refused.body.message, /paused/);
    assert.equal(Number(await s.env.redis.get(saleKeys(sale.id).available)), 4, 'a refused purchase takes nothing');

    const again = await control(sale, 'pause');
    assert.deepEqual([again.status, again.body.paused, again.body.changed], [200, true, false]);
    const live = await s.call('GET', `/api/sales/${sale.id}/live`, { headers: ADMIN });
    assert.equal(live.body.paused, true);

    assert.equal(outcome(await control(sale, 'resume')), '200');
    assert.equal((await pgRow(sale.id)).paused_at, null);
    assert.equal(await redisPaused(sale.id), false);
    assert.equal(outcome(await buy(sale, 'bob')), '202 queued');
    assert.deepEqual(await auditActions(sale.id), ['sale.pause', 'sale.resume']);
  });

  test('pause: a Redis that missed the pause catches up when it is asked again; a restarted Redis keeps it', async () => {
    const sale = await newSale(s.env, { stock: 5 });
    assert.equal(outcome(await control(sale, 'pause')), '200');
    // Redis lost the flag (the commit's reply lost after Redis took an older state, say): a retried pause writes it again.
    await s.env.redis.hdel(saleKeys(sale.id).meta, 'paused');
    assert.equal(outcome(await buy(sale, 'cal')), '202 queued');
    const retried = await control(sale, 'pause');
    assert.equal(retried.body.changed, false);
    assert.equal(await redisPaused(sale.id), true);
    assert.deepEqual(await auditActions(sale.id), ['sale.pause']);

    await s.env.stopRedis('SIGTERM');
    await s.env.startRedis();
    await waitFor('Redis back', async () => (await s.env.redis.ping().catch(() => '')) === 'PONG');
    assert.equal(outcome(await buy(sale, 'dee')), '409 paused');

    // A sale loaded again from its row (load_sale.lua) takes the flag Postgres records.
    const k = saleKeys(sale.id);
    await s.env.redis.del(k.meta, k.available);
    assert.equal(
      await loadSaleIntoRedis(s.env.redis, sale, { paused: (await isPaused(s.env.pool, sale.id)) === true }),
      true,
    );
    assert.equal(await redisPaused(sale.id), true);
    assert.equal(outcome(await buy(sale, 'dee')), '409 paused');
  });

  test('pause: a paused waiting room admits nobody, and the bucket does not fill while it lasts; resumed, it admits again', async () => {
    const sale = await newSale(s.env, {
      stock: 10,
      admission: 'queue',
      admitRatePerSecond: 1000,
      admitOverbook: 1,
      passSeconds: 60,
      startsAt: iso((await redisNow(s.env.redis)) - 1000),
    });
    for (const u of ['q1', 'q2', 'q3'])
      assert.equal(outcome(await s.call('POST', `/api/sales/${sale.id}/queue`, { user: u })), '200');
    assert.equal(outcome(await control(sale, 'pause')), '200');
    const held = await admitStep(s.env.redis, sale, 1000);
    assert.deepEqual([held.phase, held.admittedNow, held.admitted, held.waiting], [Phase.Paused, 0, 0, 3]);
    assert.equal(await s.env.redis.zcard(saleKeys(sale.id).passes), 0, 'no pass handed out');
    // Resumed: the room admits from the rate's tokens earned since the resume, none from the pause.
    assert.equal(outcome(await control(sale, 'resume')), '200');
    await refillRoom(s.env, sale, 1000);
    const open = await admitStep(s.env.redis, sale, 1000);
    assert.deepEqual([open.phase, open.admittedNow, open.waiting], [Phase.Open, 3, 0]);
  });

  test("pause: a draw's entries are still taken before its close", async () => {
    const sale = await newSale(s.env, { stock: 2, ...openDraw() });
    assert.equal(outcome(await control(sale, 'pause')), '200');
    const entered = await s.call('POST', `/api/sales/${sale.id}/entries`, { user: 'drawn' });
    assert.ok(entered.status === 200 || entered.status === 201, outcome(entered));
    const rows = await s.env.pool.query('select 1 from draw_entries where sale_id = $1', [sale.id]);
    assert.equal(rows.rowCount, 1);
  });

  test('pause: racing purchases, every answer is 202 or 409 paused, none after the pause, and conservation holds', async () => {
    const sale = await newSale(s.env, { stock: 300, perUserLimit: 1 });
    let pausedAt = -1;
    const answers = await runConcurrently(200, 20, async (i) => {
      if (i === 80) {
        assert.equal(outcome(await control(sale, 'pause')), '200');
        pausedAt = i;
      }
      const after = pausedAt >= 0;
      const r = await buy(sale, `racer-${i}`);
      return { label: outcome(r), after };
    });
    const labels = countBy(answers, (a) => a.label);
    // More stock than buyers: every refusal is the pause's, and the pausing worker's own purchase is one.
    for (const label of Object.keys(labels))
      assert.ok(['202 queued', '409 paused'].includes(label), JSON.stringify(labels));
    assert.ok((labels['409 paused'] ?? 0) >= 1, JSON.stringify(labels));
    // Every purchase sent after the pause answered: refused.
    for (const a of answers.filter((x) => x.after)) assert.notEqual(a.label, '202 queued');
    const available = Number(await s.env.redis.get(saleKeys(sale.id).available));
    assert.equal(labels['202 queued'] ?? 0, 300 - available);
    await drain();
    await assertConserved(s.env, [sale]);
    assert.equal(outcome(await control(sale, 'resume')), '200');
  });
});

describe('a new end', () => {
  test('end time: later, then earlier; Postgres and Redis agree each time; the sale ends at the new end', async () => {
    const now = await redisNow(s.env.redis);
    const sale = await newSale(s.env, { stock: 5, startsAt: iso(now - HOUR), endsAt: iso(now + HOUR) });
    const later = iso(now + 3 * HOUR);
    const extended = await endTime(sale, { endsAt: later });
    assert.equal(outcome(extended), '200');
    assert.equal(extended.body.endsAt, later);
    assert.equal((await pgRow(sale.id)).ends_at!.toISOString(), later);
    assert.equal(await redisEnd(sale.id), Date.parse(later));
    assert.equal(outcome(await buy(sale, 'eve')), '202 queued');

    // Earlier: soon, by both clocks; the sale then ends on its own.
    const soon = iso((await redisNow(s.env.redis)) + 1500);
    assert.equal(outcome(await endTime(sale, { endsAt: soon })), '200');
    assert.equal(await redisEnd(sale.id), Date.parse(soon));
    assert.equal((await pgRow(sale.id)).ends_at!.toISOString(), soon);
    await waitFor('the new end', async () => outcome(await buy(sale, 'fay')) === '403 ended');
    assert.deepEqual(await auditActions(sale.id), ['sale.end-time', 'sale.end-time']);
  });

  test('end time and pause: bad input and an ended sale are refused 4xx, and nothing changes in Postgres or Redis', async () => {
    const now = await redisNow(s.env.redis);
    const sale = await newSale(s.env, { stock: 5, startsAt: iso(now + HOUR), endsAt: iso(now + 2 * HOUR) });
    const ended = await newSale(s.env, { stock: 5, startsAt: iso(now - 2 * HOUR) });
    assert.equal(outcome(await s.call('POST', `/api/sales/${ended.id}/end`, { headers: ADMIN })), '200');
    const before = await stateSnapshot(s.env);
    const rows = async () =>
      (await s.env.pool.query('select * from sales where id = any($1::text[]) order by id', [[sale.id, ended.id]]))
        .rows;
    const pgBefore = await rows();
    const cases: [string, Promise<Awaited<ReturnType<typeof endTime>>>, string][] = [
      ['in the past', endTime(sale, { endsAt: iso(now - 60_000) }), '400 invalid_end_time'],
      ['before the start', endTime(sale, { endsAt: iso(now + HOUR - 60_000) }), '400 invalid_end_time'],
      ['no zone', endTime(sale, { endsAt: '2099-01-01T00:00:00' }), '400 invalid_end_time'],
      ['not a time', endTime(sale, { endsAt: 'tomorrow' }), '400 invalid_end_time'],
      ['a number', endTime(sale, { endsAt: now + 3 * HOUR }), '400 invalid_end_time'],
      ['an unknown field', endTime(sale, { endsAt: iso(now + 3 * HOUR), x: 1 }), '400 invalid_end_time'],
      ['no body', endTime(sale, undefined), '400 invalid_end_time'],
      ['an ended sale', endTime(ended, { endsAt: iso(now + 3 * HOUR) }), '403 ended'],
      ['pausing an ended sale', control(ended, 'pause'), '403 ended'],
      ['no such sale', endTime('nope', { endsAt: iso(now + 3 * HOUR) }), '404 sale_not_found'],
      ['pausing no such sale', control('nope', 'pause'), '404 sale_not_found'],
      ['a bad id', control('bad%20id', 'pause'), '400 invalid_id'],
      [
        'no operator',
        s.call('POST', `/api/sales/${sale.id}/end-time`, { body: { endsAt: iso(now + 3 * HOUR) } }),
        '401 unauthorized',
      ],
    ];
    for (const [what, reply, expected] of cases) {
      const r = await reply;
      assert.equal(outcome(r), expected, what);
      assert.equal(typeof r.body.message, 'string', what);
    }
    assert.deepEqual(await stateSnapshot(s.env), before);
    assert.deepEqual(await rows(), pgBefore);
    assert.deepEqual(await auditActions(sale.id), []);
  });

  test("end time: a draw's end stays after its entries close and not before its backfill ends", async () => {
    const sale = await newSale(s.env, { stock: 2, ...openDraw(), endsAt: iso(Date.now() + 4 * HOUR) });
    const closeAt = sale.entriesCloseAt!.getTime();
    assert.equal(outcome(await endTime(sale, { endsAt: iso(closeAt) })), '400 invalid_end_time');
    assert.equal(outcome(await endTime(sale, { endsAt: iso(closeAt + HOUR / 2) })), '400 invalid_end_time');
    assert.equal(outcome(await endTime(sale, { endsAt: iso(closeAt + 2 * HOUR) })), '200');
  });
});
