// The flashsale CLI as an operator types it.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { saleKeys } from '../shared/redis/keys.js';
import { numberFromText } from '../shared/runtime/number-text.js';
import { parseSaleInput } from '../shared/sales/input.js';
import { purchaseScript } from '../shared/sales/scripts.js';
import { COMMANDS } from '../daemons/cli/run.js';
import { cli } from './support/cli.js';
import { cliHere } from './support/cli-here.js';
import { testEnv, type TestEnv } from './support/env.js';
import { newSale } from './support/fixtures.js';

let env: TestEnv;
before(async () => {
  env = await testEnv();
});
after(async () => {
  await env.close();
});

// At the default log level, as an operator types it: in this process, and in a process of its own
// where the test is about how the process ends (its exit code and output through the bin).
const flashsale = (...args: string[]) => cliHere(env, args, { LOG_LEVEL: 'info' });
const flashsaleProcess = (...args: string[]) => cli(env, args, { LOG_LEVEL: 'info' });

/** `sale create` with the flags it requires, in euros. */
const saleCreateArgs = (id: string, name: string, stock: string, price: string) => [
  'sale',
  'create',
  '--id',
  id,
  '--name',
  name,
  '--stock',
  stock,
  '--price',
  price,
  '--currency',
  'EUR',
];

test('migrate, sale create, sale status and replay --once', async () => {
  const migrated = await flashsaleProcess('migrate');
  assert.equal(migrated.code, 0, migrated.stderr);
  assert.equal(migrated.stdout.trim(), 'schema up to date');

  // Exit 0 through the bin is migrate's above: the sale is made in this process.
  const created = await flashsale(
    ...saleCreateArgs('cli-sale', 'CLI sale', '7', '1250'),
    '--per-user',
    '2',
    '--max-per-order',
    '2',
    '--payment-window',
    '60',
    '--starts-at',
    '2020-01-01T00:00:00Z',
    '--json',
  );
  assert.equal(created.code, 0, created.stderr);
  const view = JSON.parse(created.stdout);
  assert.deepEqual(
    {
      id: view.id,
      stock: view.stock,
      available: view.available,
      perUserLimit: view.perUserLimit,
      maxPerOrder: view.maxPerOrder,
      state: view.state,
      price: view.price,
      currency: view.currency,
    },
    {
      id: 'cli-sale',
      stock: 7,
      available: 7,
      perUserLimit: 2,
      maxPerOrder: 2,
      state: 'open',
      price: 1250,
      currency: 'EUR',
    },
  );
  assert.deepEqual((await env.pool.query("select price, currency from sales where id = 'cli-sale'")).rows, [
    { price: 1250, currency: 'EUR' },
  ]);
  // No price, a lower-case currency, a name with a bidirectional override: refused, exit 2, nothing created.
  for (const [args, message] of [
    [['--stock', '5', '--currency', 'EUR'], /^Missing required argument: price$/m],
    [['--stock', '5', '--price', '100'], /^Missing required argument: currency$/m],
    [['--stock', '5', '--price', '100', '--currency', 'eur'], /^flashsale: --currency is required: an ISO 4217 code/m],
  ] as [string[], RegExp][]) {
    // A missing argument's refusal through the bin once: the others in this process.
    const r = await (args.includes('--price') ? flashsale : flashsaleProcess)(
      'sale',
      'create',
      '--id',
      'cli-unpriced',
      '--name',
      'unpriced',
      ...args,
    );
    assert.equal(r.code, 2, r.stdout);
    assert.match(r.stderr, message);
  }
  const bidi = await flashsale(...saleCreateArgs('cli-unpriced', 'evil\u202egnp.exe', '5', '100'));
  assert.equal(bidi.code, 2, bidi.stdout);
  assert.match(bidi.stderr, /^flashsale: --name must not contain control characters/m);
  assert.equal((await env.pool.query("select 1 from sales where id = 'cli-unpriced'")).rowCount, 0);
  assert.equal(await env.redis.get(saleKeys('cli-sale').available), '7');

  const dup = await flashsale(...saleCreateArgs('cli-sale', 'again', '1', '1'));
  assert.equal(dup.code, 2);
  assert.match(dup.stderr, /A sale with id "cli-sale" already exists/);
  const bad = await flashsale('sale', 'create', '--name', 'bad', '--stock', '0', '--price', '1', '--currency', 'EUR');
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /^flashsale: --stock must be an integer from 1 to 10000000$/m);
  // A typo year ends before 1970, which Redis would read as "no end": refused, nothing created.
  const typo = await flashsaleProcess(
    ...saleCreateArgs('cli-typo', 'typo', '5', '1'),
    '--starts-at',
    '0025-12-01T00:00:00Z',
    '--ends-at',
    '0026-01-01T00:00:00Z',
  );
  assert.equal(typo.code, 2, typo.stdout);
  assert.match(typo.stderr, /^flashsale: --starts-at must fall in the years 2000 to 9999 \(UTC\)/m);
  const typoEnd = await flashsale(...saleCreateArgs('cli-typo', 'typo', '5', '1'), '--ends-at', '0026-01-01T00:00:00Z');
  assert.equal(typoEnd.code, 2, typoEnd.stdout);
  assert.match(typoEnd.stderr, /^flashsale: --ends-at must fall in the years 2000 to 9999 \(UTC\)/m);
  assert.equal((await env.pool.query("select 1 from sales where id = 'cli-typo'")).rowCount, 0);
  assert.equal(await env.redis.exists(saleKeys('cli-typo').meta), 0);

  const [code] = await purchaseScript(env.redis, {
    saleId: 'cli-sale',
    userId: 'u',
    qty: 2,
    orderId: 'cli-sale.00000000-0000-4000-8000-000000000001',
    buyCountTtlSeconds: 3600,
  });
  assert.equal(code, 1);
  const status = await flashsale('sale', 'status', 'cli-sale', '--json');
  assert.equal(status.code, 0, status.stderr);
  const s = JSON.parse(status.stdout);
  assert.deepEqual(
    {
      total: s.total,
      available: s.available,
      queued: s.queued,
      pending: s.pending,
      paid: s.paid,
      expired: s.expired,
      holds: s.holds,
    },
    { total: 7, available: 5, queued: 2, pending: 0, paid: 0, expired: 0, holds: true },
  );
  const table = await flashsale('sale', 'status', 'cli-sale');
  assert.match(table.stdout, /^ {2}queued {7}2$/m);
  assert.match(table.stdout, /^ {2}conservation {1}holds$/m);

  const missing = await flashsale('sale', 'status', 'nope');
  assert.equal(missing.code, 2);
  assert.match(missing.stderr, /No sale with id "nope"/);

  // A unit that vanished from Redis is a violation: status says so and exits 3.
  await env.redis.decrby(saleKeys('cli-sale').available, 1);
  const broken = await flashsaleProcess('sale', 'status', 'cli-sale');
  assert.equal(broken.code, 3);
  assert.match(broken.stdout, /conservation {1}VIOLATED/);
  const replay = await flashsaleProcess('replay', '--once');
  assert.equal(replay.code, 3);
  assert.match(replay.stdout, /CONSERVATION_VIOLATED/);
});

test('sale create --admission: a waiting room with its rate, overbook and pass lifetime; a draw with its entry window; a setting of the other mode is refused', async () => {
  const queue = await flashsale(
    ...saleCreateArgs('cli-queue', 'room', '5', '100'),
    '--admission',
    'queue',
    '--admit-rate',
    '25',
    '--admit-overbook',
    '1.5',
    '--pass-seconds',
    '30',
    '--json',
  );
  assert.equal(queue.code, 0, queue.stderr);
  const q = JSON.parse(queue.stdout);
  assert.deepEqual(
    {
      admission: q.admission,
      admitRatePerSecond: q.admitRatePerSecond,
      admitOverbook: q.admitOverbook,
      passSeconds: q.passSeconds,
      seed: q.seed,
    },
    { admission: 'queue', admitRatePerSecond: 25, admitOverbook: 1.5, passSeconds: 30, seed: null },
  );
  assert.match(q.seedSha256, /^[0-9a-f]{64}$/);
  assert.deepEqual(
    (await env.pool.query("select admission, admit_rate_per_second, pass_seconds from sales where id = 'cli-queue'"))
      .rows,
    [{ admission: 'queue', admit_rate_per_second: 25, pass_seconds: 30 }],
  );

  const start = Date.now() + 3_600_000;
  const iso = (ms: number) => new Date(ms).toISOString();
  const draw = await flashsale(
    ...saleCreateArgs('cli-draw', 'draw', '5', '100'),
    '--admission',
    'draw',
    '--starts-at',
    iso(start),
    '--entries-open-at',
    iso(start - 60_000),
    '--entries-close-at',
    iso(start + 60_000),
    '--backfill-until',
    iso(start + 120_000),
    '--json',
  );
  assert.equal(draw.code, 0, draw.stderr);
  const d = JSON.parse(draw.stdout);
  assert.deepEqual(
    {
      admission: d.admission,
      entriesOpenAt: d.entriesOpenAt,
      entriesCloseAt: d.entriesCloseAt,
      backfillUntil: d.backfillUntil,
      seed: d.seed,
    },
    {
      admission: 'draw',
      entriesOpenAt: iso(start - 60_000),
      entriesCloseAt: iso(start + 60_000),
      backfillUntil: iso(start + 120_000),
      seed: null,
    },
  );

  const stray = await flashsale(...saleCreateArgs('cli-stray', 'stray', '5', '100'), '--admit-rate', '25');
  assert.equal(stray.code, 2, stray.stdout);
  assert.match(stray.stderr, /^flashsale: --admit-rate apply only to --admission queue/m);
  assert.equal((await env.pool.query("select 1 from sales where id = 'cli-stray'")).rowCount, 0);
});

// Each form Number() or yargs would take as a number, but the HTTP API would not.
const BAD_NUMBERS = ['0x10', '0b11', '0o17', '12.', '1e3', ' 12', '12abc', '', '-5', '012', '1,000', 'Infinity'];

test('numbers: every numeric flag refuses 0x10, 0b11, 0o17, 12., 1e3, " 12", 12abc and empty with one plain line, exit 2, before anything runs', async () => {
  const sale = saleCreateArgs('cli-strict', 'strict', '5', '100');
  /** `sale create` with the flags it needs, but for the one under test. */
  const saleBut = (flag: string) => sale.filter((a, i) => a !== `--${flag}` && sale[i - 1] !== `--${flag}`);
  // Every numeric flag of every command, with the flags it needs besides.
  const flags: [string, string[]][] = [
    ...['stock', 'price', 'per-user', 'max-per-order', 'payment-window', 'challenge-complexity'].map(
      (f): [string, string[]] => [f, saleBut(f)],
    ),
    ...['admit-rate', 'admit-overbook', 'pass-seconds'].map((f): [string, string[]] => [
      f,
      [...sale, '--admission', 'queue'],
    ]),
    ['ttl', ['token', 'bob']],
    ...['stock', 'buyers', 'concurrency', 'qty', 'pay-ratio'].map((f): [string, string[]] => [f, ['loadtest']]),
    ['ops-port', ['api']],
    ['port', ['api']],
    ['batch-size', ['order-writer']],
    ['interval', ['replay']],
    ['interval', ['check']],
    ['ops-port', ['expiry-listener']],
    ['ops-port', ['admission']],
  ];
  // Every flag with one bad form (in turn), and --price with each of them.
  const runs = [
    ...flags.map(([flag, args], i) => [flag, args, BAD_NUMBERS[i % BAD_NUMBERS.length]!] as const),
    ...BAD_NUMBERS.map((bad) => ['price', saleBut('price'), bad] as const),
  ];
  for (const [flag, args, bad] of runs) {
    const r = await flashsale(...args, `--${flag}`, bad);
    const what = `${args.slice(0, 2).join(' ')} --${flag} ${JSON.stringify(bad)}`;
    assert.equal(r.code, 2, `${what}: ${r.out}`);
    assert.equal(
      r.stderr,
      `flashsale: --${flag} must be ${flag === 'admit-overbook' || flag === 'pay-ratio' ? 'a number such as 12 or 1.5' : 'a whole number such as 12'} (digits only: no sign, spaces, 0x, 0b, 0o, exponent or trailing dot), got ${JSON.stringify(bad)}\n`,
      what,
    );
    assert.equal(r.stdout, '', what);
  }

  assert.equal((await env.pool.query("select 1 from sales where id = 'cli-strict'")).rowCount, 0);
  assert.equal(await env.redis.exists(saleKeys('cli-strict').meta), 0);
  const twice = await flashsaleProcess(...sale, '--price', '100');
  assert.equal(twice.code, 2);
  assert.equal(twice.stderr, 'flashsale: --price is given 2 times: give it once\n');
  // The plain forms still work, a fraction where the field takes one.
  const ok = await flashsale(...sale, '--admission', 'queue', '--admit-overbook', '1.25', '--json');
  assert.equal(ok.code, 0, ok.stderr);
  assert.deepEqual([JSON.parse(ok.stdout).stock, JSON.parse(ok.stdout).admitOverbook], [5, 1.25]);
});

test('numbers: numberFromText takes what the API takes and nothing else', () => {
  for (const bad of BAD_NUMBERS) {
    assert.equal(numberFromText(bad, false), undefined, bad);
    assert.equal(numberFromText(bad, true), undefined, bad);
  }
  assert.deepEqual(
    ['0', '12', '9007199254740991'].map((t) => numberFromText(t, false)),
    [0, 12, 9007199254740991],
  );
  assert.deepEqual(
    ['1.5', '9007199254740992', '0.25'].map((t) => numberFromText(t, false)),
    [undefined, undefined, undefined],
  );
  assert.deepEqual(
    ['1.5', '0.25', '12'].map((t) => numberFromText(t, true)),
    [1.5, 0.25, 12],
  );
});

test('sale create --help marks --name, --stock, --price and --currency required', async () => {
  const help = await flashsaleProcess('sale', 'create', '--help');
  assert.equal(help.code, 0, help.stderr);
  const text = help.stdout.replace(/\n {20,}/g, ' ');
  for (const flag of ['name', 'stock', 'price', 'currency'])
    assert.match(text, new RegExp(`^ +--${flag} .*\\[required\\]$`, 'm'), flag);
  for (const flag of ['per-user', 'starts-at', 'admission'])
    assert.doesNotMatch(text, new RegExp(`^ +--${flag} .*\\[required\\]`, 'm'), flag);
});

test('orders list filters by sale, buyer and state, newest first; orders show prints one with its payments; bad input exits 2', async () => {
  const sale = await newSale(env, { stock: 5, perUserLimit: 2, maxPerOrder: 2 });
  const other = await newSale(env, { stock: 5 });
  const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();
  // Orders as the writer writes them, at known purchase times, then moved to each state.
  const rows: [string, string, string, number, string, number][] = [
    [`${sale.id}.00000000-0000-4000-8000-000000000001`, sale.id, 'ola', 1, 'pending', 1],
    [`${sale.id}.00000000-0000-4000-8000-000000000002`, sale.id, 'oli', 2, 'paid', 2],
    [`${sale.id}.00000000-0000-4000-8000-000000000003`, sale.id, 'ola', 1, 'expired', 3],
    [`${other.id}.00000000-0000-4000-8000-000000000004`, other.id, 'ola', 1, 'cancelled', 4],
  ];
  for (const [id, saleId, user, qty, state, s] of rows) {
    await env.pool.query(
      `insert into orders (id, sale_id, user_id, qty, status, seq, purchased_at, expires_at, paid_at, closed_at, restored_at)
       values ($1, $2, $3, $4, $5, $6, $7, $7::timestamptz + interval '1 hour', case when $5 = 'paid' then now() end,
               case when $5 in ('expired', 'cancelled') then now() end, case when $5 in ('expired', 'cancelled') then now() end)`,
      [id, saleId, user, qty, state, s, at(s)],
    );
  }
  await env.pool.query(
    `insert into payments (id, order_id, outcome, amount, currency, raw) values ('signed:evt_show', $1, 'applied', 3998, 'EUR', '\\x7b7d')`,
    [rows[1]![0]],
  );
  const ids = async (...args: string[]) => {
    const r = await flashsale('orders', 'list', ...args, '--json');
    assert.equal(r.code, 0, r.stderr);
    return (JSON.parse(r.stdout) as { id: string }[]).map((o) => o.id);
  };
  const [o1, o2, o3, o4] = rows.map((r) => r[0]);
  assert.deepEqual(await ids('--sale', sale.id), [o3, o2, o1]);
  assert.deepEqual(await ids('--buyer', 'ola', '--sale', sale.id), [o3, o1]);
  assert.deepEqual(
    (await ids('--buyer', 'ola')).filter((id) => rows.some((r) => r[0] === id)),
    [o4, o3, o1],
  );
  assert.deepEqual(await ids('--sale', sale.id, '--state', 'paid'), [o2]);
  assert.deepEqual(await ids('--sale', sale.id, '--limit', '2'), [o3, o2]);
  assert.deepEqual(await ids('--sale', 'no-such-sale'), []);
  const full = JSON.parse(
    (await flashsale('orders', 'list', '--sale', sale.id, '--state', 'paid', '--json')).stdout,
  )[0];
  assert.deepEqual(
    { ...full, paidAt: typeof full.paidAt },
    {
      id: o2,
      saleId: sale.id,
      userId: 'oli',
      qty: 2,
      state: 'paid',
      purchasedAt: at(2),
      expiresAt: new Date(Date.parse(at(2)) + 3_600_000).toISOString(),
      paidAt: 'string',
      closedAt: null,
      restoredAt: null,
    },
  );
  const table = await flashsale('orders', 'list', '--sale', sale.id);
  assert.equal(table.code, 0, table.stderr);
  assert.match(table.stdout, /^order +sale +buyer +qty +state +purchased +expires +paid +closed\n/);
  assert.match(table.stdout, new RegExp(`^${o2!.replace('.', '\\.')} +${sale.id} +oli +2 +paid +${at(2)} `, 'm'));
  assert.equal((await flashsale('orders', 'list', '--sale', 'no-such-sale')).stdout, 'no orders\n');

  const shown = await flashsale('orders', 'show', o2!, '--json');
  assert.equal(shown.code, 0, shown.stderr);
  const order = JSON.parse(shown.stdout);
  assert.equal(order.state, 'paid');
  assert.deepEqual(
    order.payments.map((p: Record<string, unknown>) => [p.id, p.outcome, p.reason, p.amount, p.currency, p.refundedAt]),
    [['signed:evt_show', 'applied', null, 3998, 'EUR', null]],
  );
  const plain = await flashsale('orders', 'show', o2!);
  assert.match(plain.stdout, /^state +paid$/m);
  assert.match(plain.stdout, /^signed:evt_show +applied +- +3998 EUR /m);
  assert.match((await flashsale('orders', 'show', o1!)).stdout, /^no payments$/m);

  const missing = await flashsaleProcess('orders', 'show', `${sale.id}.00000000-0000-4000-8000-000000000009`);
  assert.equal(missing.code, 2);
  assert.match(missing.stderr, /^flashsale: No order with id /m);
  for (const [args, message] of [
    [['--limit', '0'], /^flashsale: limit must be a whole number from 1 to 1000\.$/m],
    [['--limit', '1001'], /^flashsale: limit must be a whole number from 1 to 1000\.$/m],
    [['--limit', '0x10'], /^flashsale: --limit must be a whole number/m],
    [['--state', 'lost'], /Invalid values:/],
  ] as [string[], RegExp][]) {
    const r = await flashsale('orders', 'list', ...args);
    assert.equal(r.code, 2, r.out);
    assert.match(r.stderr, message);
  }
});

test('sale create names its flags in a refusal, where the API names its fields', async () => {
  const base = saleCreateArgs('cli-words', 'words', '5', '100');
  const soon = new Date(Date.now() + 3_600_000).toISOString();
  for (const [args, line] of [
    [
      ['--per-user', '1', '--max-per-order', '3'],
      'flashsale: --max-per-order (3) must not be above --per-user (1): raise --per-user or lower --max-per-order',
    ],
    [['--starts-at', soon, '--ends-at', soon], 'flashsale: --ends-at must be after --starts-at'],
    [
      ['--admission', 'draw'],
      'flashsale: --entries-close-at is required for --admission draw: when entries close and the draw is made',
    ],
    [
      ['--admission', 'draw', '--starts-at', soon, '--entries-close-at', new Date(Date.now() + 60_000).toISOString()],
      'flashsale: --entries-close-at must be after --entries-open-at',
    ],
    [['--pass-seconds', '30'], 'flashsale: --pass-seconds apply only to --admission queue'],
  ] as [string[], string][]) {
    const r = await flashsale(...base, ...args);
    assert.equal(r.code, 2, r.out);
    assert.equal(r.stderr, `${line}\n`);
  }
  assert.equal((await env.pool.query("select 1 from sales where id = 'cli-words'")).rowCount, 0);
  // The HTTP API keeps its field names (test/sales-admin.test.ts, test/bad-input.test.ts).
  assert.throws(
    () => parseSaleInput({ name: 'x', stock: 5, price: 1, currency: 'EUR', perUserLimit: 1, maxPerOrder: 3 }),
    { message: 'maxPerOrder (3) must not be above perUserLimit (1): raise perUserLimit or lower maxPerOrder' },
  );
});

test('each command loads only its own group, and that group adds it: its help runs; the full help lists the same commands', async () => {
  for (const name of COMMANDS) {
    const r = await cliHere(undefined, [name, '--help']);
    assert.equal(r.code, 0, `${name} --help: ${r.out}`);
    assert.match(r.stdout, new RegExp(`^flashsale ${name}\\b`, 'm'), `${name} --help: ${r.out}`);
  }
  const all = await cliHere(undefined, ['--help']);
  assert.equal(all.code, 0, all.out);
  const listed = [...all.stdout.matchAll(/^ {2}flashsale ([a-z-]+)/gm)].map((m) => m[1]);
  assert.deepEqual([...listed].sort(), [...COMMANDS].sort());
});
