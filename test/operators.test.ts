// Named operators and the audit trail: `flashsale operator add|revoke|list`, each operator's own
// secret for the admin API (a revoked one refused at once, 401), and a row naming who did it for
// every admin action that changed something, from the API and from the CLI.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { userInfo } from 'node:os';
import { describe, test } from 'node:test';
import { signPayload } from '../shared/payments/providers/signed-webhook.js';
import { apiSuite, type ApiSuite } from './support/api.js';
import { cliHere } from './support/cli-here.js';
import { HOUR, newSale, SALE_PRICE, drainWriter } from './support/fixtures.js';
import { outcome } from './support/http.js';
import { ADMIN_TOKEN, PAYMENT_WEBHOOK_SECRET } from './support/tokens.js';

let s: ApiSuite;
apiSuite((suite) => (s = suite));

const CLI = `cli:${userInfo().username}`;
const bearer = (secret: string) => ({ authorization: `Bearer ${secret}` });
const ADMIN = bearer(ADMIN_TOKEN);
const iso = (ms: number) => new Date(ms).toISOString();

/** `flashsale operator add <name>`: the secret it prints once. */
async function addOperator(name: string): Promise<string> {
  const r = await cliHere(s.env, ['operator', 'add', name, '--json']);
  assert.equal(r.code, 0, r.out);
  const added = JSON.parse(r.stdout) as { name: string; secret: string; revokedAt: null };
  assert.equal(added.name, name);
  return added.secret;
}

const auditOf = async (saleId?: string) =>
  (
    await s.env.pool.query<{ operator: string; action: string; sale_id: string | null; detail: object }>(
      'select operator, action, sale_id, detail from audit where ($1::text is null or sale_id = $1) order by id',
      [saleId ?? null],
    )
  ).rows;

async function drain(): Promise<void> {
  await drainWriter(s.env, 'w-operators');
}

describe('operators', () => {
  test('operator: add prints a secret once and keeps only its digest; the secret opens the admin API; revoke refuses it at once (401); list shows both', async () => {
    const secret = await addOperator('alice');
    assert.match(secret, /^fsop_[A-Za-z0-9_-]{43}$/);
    const stored = await s.env.pool.query<{ secret_sha256: Buffer }>(
      'select secret_sha256 from operators where name = $1',
      ['alice'],
    );
    assert.equal(stored.rows[0]!.secret_sha256.length, 32, 'a sha256, not the secret');
    assert.ok(!stored.rows[0]!.secret_sha256.toString('utf8').includes(secret));

    assert.equal(outcome(await s.call('GET', '/api/sales', { headers: bearer(secret) })), '200');
    assert.equal(outcome(await s.call('GET', '/api/sales', { headers: bearer(`${secret}x`) })), '403 forbidden');

    const again = await cliHere(s.env, ['operator', 'add', 'alice']);
    assert.equal(again.code, 2, again.out);
    assert.match(again.stderr, /exists already/);

    const revoked = await cliHere(s.env, ['operator', 'revoke', 'alice']);
    assert.equal(revoked.code, 0, revoked.out);
    assert.match(revoked.stdout, /^operator alice revoked at /);
    const refused = await s.call('GET', '/api/sales', { headers: bearer(secret) });
    assert.equal(outcome(refused), '401 unauthorized');
    assert.match(refused.body.message, /alice.*revoked/);
    // Revoking again changes nothing and records nothing; an unknown name is refused.
    assert.match((await cliHere(s.env, ['operator', 'revoke', 'alice'])).stdout, /revoked already/);
    assert.equal((await cliHere(s.env, ['operator', 'revoke', 'nobody'])).code, 2);
    assert.equal((await cliHere(s.env, ['operator', 'add', 'Bad Name'])).code, 2);
    assert.equal((await cliHere(s.env, ['operator', 'add', 'admin-token'])).code, 2);

    await addOperator('bob');
    const list = await cliHere(s.env, ['operator', 'list', '--json']);
    const names = (JSON.parse(list.stdout) as { name: string; revokedAt: string | null }[]).map((o) => [
      o.name,
      o.revokedAt !== null,
    ]);
    assert.deepEqual(names, [
      ['alice', true],
      ['bob', false],
    ]);
    const ops = (await auditOf()).filter((a) => a.action.startsWith('operator.'));
    assert.deepEqual(
      ops.map((a) => [a.operator, a.action, a.detail]),
      [
        [CLI, 'operator.add', { name: 'alice' }],
        [CLI, 'operator.revoke', { name: 'alice' }],
        [CLI, 'operator.add', { name: 'bob' }],
      ],
    );
  });
});

describe('the audit trail', () => {
  test("audit: create, pause, resume, end time, end and a refund marked are each recorded with the operator's name; an action that changes nothing is not", async () => {
    const carol = await addOperator('carol');
    const as = bearer(carol);
    const id = `audited-${randomUUID().slice(0, 8)}`;
    const created = await s.call('POST', '/api/sales', {
      headers: as,
      body: { id, name: 'Audited', stock: 5, startsAt: iso(Date.now() - HOUR), ...SALE_PRICE },
    });
    assert.equal(outcome(created), '201');
    assert.equal(outcome(await s.call('POST', `/api/sales/${id}/pause`, { headers: as })), '200');
    assert.equal(outcome(await s.call('POST', `/api/sales/${id}/resume`, { headers: ADMIN })), '200');
    const newEnd = iso(Date.now() + 2 * HOUR);
    assert.equal(
      outcome(await s.call('POST', `/api/sales/${id}/end-time`, { headers: as, body: { endsAt: newEnd } })),
      '200',
    );

    // A refund due: an order paid with the wrong amount, then marked paid back by carol.
    const bought = await s.call('POST', `/api/sales/${id}/purchases`, { user: 'dee', body: { qty: 1 } });
    assert.equal(outcome(bought), '202 queued');
    await drain();
    const raw = JSON.stringify({
      id: `evt_${randomUUID()}`,
      type: 'payment.succeeded',
      orderId: bought.body.orderId,
      amount: 1,
      currency: 'EUR',
    });
    const paid = await s.call('POST', '/api/payments/webhook', {
      body: raw,
      headers: { 'flashsale-signature': signPayload(PAYMENT_WEBHOOK_SECRET, raw) },
    });
    assert.equal(paid.body.outcome, 'refund_due', JSON.stringify(paid.body));
    const { rows } = await s.env.pool.query<{ id: string }>('select id from payments where order_id = $1', [
      bought.body.orderId,
    ]);
    const paymentId = rows[0]!.id;
    const refund = (headers: Record<string, string>) =>
      s.call('POST', `/api/payments/${encodeURIComponent(paymentId)}/refund`, { headers, body: { reference: 're_1' } });
    assert.equal(outcome(await refund(as)), '200');
    assert.equal(outcome(await refund(ADMIN)), '200', 'marked again: its first record');

    assert.equal(outcome(await s.call('POST', `/api/sales/${id}/end`, { headers: as })), '200');
    // Nothing changes: an end of an ended sale, a resume of a running one.
    assert.equal(outcome(await s.call('POST', `/api/sales/${id}/end`, { headers: ADMIN })), '200');
    const resumed = await s.call('POST', `/api/sales/${id}/resume`, { headers: ADMIN });
    assert.equal(resumed.body.changed, false);

    const expected = [
      ['carol', 'sale.create'],
      ['carol', 'sale.pause'],
      ['admin-token', 'sale.resume'],
      ['carol', 'sale.end-time'],
      ['carol', 'refund.mark'],
      ['carol', 'sale.end'],
    ];
    const recorded = await auditOf(id);
    assert.deepEqual(
      recorded.map((a) => [a.operator, a.action]),
      expected,
    );
    assert.deepEqual(recorded[3]!.detail, { from: null, to: newEnd });
    assert.deepEqual(recorded[4]!.detail, { paymentId, orderId: bought.body.orderId, reference: 're_1' });

    // The same trail from the admin API (newest first) and from the CLI.
    const api = await s.call('GET', `/api/audit?saleId=${id}`, { headers: as });
    assert.equal(outcome(api), '200');
    assert.deepEqual(
      api.body.entries.map((e: { operator: string; action: string }) => [e.operator, e.action]),
      [...expected].reverse(),
    );
    assert.equal(outcome(await s.call('GET', '/api/audit?limit=0', { headers: as })), '400 bad_request');
    assert.equal(outcome(await s.call('GET', `/api/audit?saleId=${id}`)), '401 unauthorized');
    const printed = await cliHere(s.env, ['audit', '--sale', id]);
    assert.equal(printed.code, 0, printed.out);
    const lines = printed.stdout.trim().split('\n');
    assert.equal(lines.length, expected.length + 1, printed.stdout);
    assert.match(lines[1]!, /carol\s+sale\.end\s/);
    assert.match(lines[6]!, /carol\s+sale\.create\s/);
  });

  test('audit: the CLI records its actions as cli:<os user>, and a failed action records nothing', async () => {
    const created = await cliHere(
      s.env,
      'sale create --id cli-audited --name CLI --stock 3 --price 100 --currency EUR'.split(' '),
    );
    assert.equal(created.code, 0, created.out);
    assert.equal((await cliHere(s.env, ['sale', 'pause', 'cli-audited'])).code, 0);
    assert.match((await cliHere(s.env, ['sale', 'pause', 'cli-audited'])).stdout, /paused already/);
    const past = await cliHere(s.env, ['sale', 'end-time', 'cli-audited', '2001-01-01T00:00:00Z']);
    assert.equal(past.code, 2, past.out);
    assert.match(past.stderr, /is not to come/);
    assert.equal((await cliHere(s.env, ['sale', 'resume', 'cli-audited'])).code, 0);
    assert.deepEqual(
      (await auditOf('cli-audited')).map((a) => [a.operator, a.action]),
      [
        [CLI, 'sale.create'],
        [CLI, 'sale.pause'],
        [CLI, 'sale.resume'],
      ],
    );
  });
});

test('operators: a sale created by an operator who is then revoked keeps its record; the name is not issued again', async () => {
  const dan = await addOperator('dan');
  const sale = await newSale(s.env);
  assert.equal(outcome(await s.call('POST', `/api/sales/${sale.id}/pause`, { headers: bearer(dan) })), '200');
  assert.equal((await cliHere(s.env, ['operator', 'revoke', 'dan'])).code, 0);
  assert.equal(
    outcome(await s.call('POST', `/api/sales/${sale.id}/resume`, { headers: bearer(dan) })),
    '401 unauthorized',
  );
  assert.deepEqual(
    (await auditOf(sale.id)).map((a) => [a.operator, a.action]),
    [['dan', 'sale.pause']],
  );
  assert.equal((await cliHere(s.env, ['operator', 'add', 'dan'])).code, 2);
});
