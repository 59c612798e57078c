// `flashsale loadtest`: N distinct buyers fired at one sale over keep-alive HTTP, then what came
// back, what reached Postgres and whether the conservation check holds, as one typed report.
import { randomBytes } from 'node:crypto';
import { Agent, request } from 'node:http';
import type { RedisClient } from '../shared/redis/connect.js';
import { signJwt } from '../shared/buyers/jwt.js';
import { ConfigError } from '../shared/config/index.js';
import { delay } from '../shared/runtime/daemon.js';
import type { Pool } from '../shared/runtime/db.js';
import { reconcile, type Reconciliation } from '../shared/checks/reconcile.js';

export type Phase = 'buy' | 'pay';

export interface LoadtestOptions {
  url: string;
  /** An existing sale; without it a fresh sale of `stock` units is created through the admin API. */
  saleId?: string;
  stock?: number;
  adminToken?: string;
  buyers: number;
  concurrency: number;
  qty: number;
  payRatio: number;
  jwtSecret: string;
  /** Both servers, for the Postgres rows and the conservation check; without them those are skipped. */
  db?: { pool: Pool; redis: RedisClient };
  /** How long to wait for the won orders to leave the queue (and to retry order_not_ready payments). */
  settleTimeoutMs?: number;
  onProgress?: (phase: Phase, done: number, total: number) => void;
  runId?: string;
}

export interface LoadtestReport {
  runId: string;
  url: string;
  saleId: string;
  stock: number;
  buyers: number;
  concurrency: number;
  qty: number;
  payRatio: number;
  /** Purchase replies by `<status> <error or status>`, e.g. "202 queued", "409 sold_out", "error ECONNRESET". */
  outcomes: Record<string, number>;
  won: number;
  durationMs: number;
  throughput: number;
  latencyMs: { p50: number; p90: number; p99: number; max: number };
  /** Every won order left the queue within the bound; null when Postgres was not given. */
  settled: boolean | null;
  payments: { asked: number; paid: number; outcomes: Record<string, number> };
  /** Order rows of the sale by status (rows, not units); null without DATABASE_URL/REDIS_URL. */
  orders: { total: number; pending: number; paid: number; expired: number } | null;
  reconciliation: Reconciliation | null;
}

interface Reply {
  status: number;
  body: Record<string, unknown> | null;
  ms: number;
  error?: string;
}

function call(agent: Agent, base: URL, method: string, path: string, token?: string, body?: unknown): Promise<Reply> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  const headers: Record<string, string | number> = token ? { authorization: `Bearer ${token}` } : {};
  if (payload !== undefined)
    Object.assign(headers, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
  const started = performance.now();
  return new Promise((resolve) => {
    const fail = (err: NodeJS.ErrnoException) =>
      resolve({ status: 0, body: null, ms: performance.now() - started, error: err.code ?? err.message });
    const req = request(
      {
        host: base.hostname.replace(/^\[|\]$/g, ''),
        port: base.port || 80,
        method,
        agent,
        timeout: 30_000,
        headers,
        path: base.pathname.replace(/\/$/, '') + path,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', fail);
        res.on('end', () => {
          let parsed: Record<string, unknown> | null = null;
          try {
            parsed = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
          } catch {
            /* not JSON */
          }
          resolve({ status: res.statusCode ?? 0, body: parsed, ms: performance.now() - started });
        });
      },
    );
    req.on('timeout', () => req.destroy(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' })));
    req.on('error', fail);
    req.end(payload);
  });
}

const outcomeOf = (r: Reply): string =>
  r.error ? `error ${r.error}` : `${r.status} ${String(r.body?.error ?? r.body?.status ?? '')}`.trim();

async function forEachConcurrently(n: number, concurrency: number, fn: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, n) }, async () => {
      while (next < n) await fn(next++);
    }),
  );
}

function checkOptions(o: LoadtestOptions): void {
  const int = (flag: string, v: number | undefined, min: number) => {
    if (v !== undefined && (!Number.isSafeInteger(v) || v < min))
      throw new ConfigError(`--${flag} must be an integer >= ${min}, got ${v}`);
  };
  int('buyers', o.buyers, 1);
  int('concurrency', o.concurrency, 1);
  int('qty', o.qty, 1);
  int('stock', o.stock, 1);
  if (!(o.payRatio >= 0 && o.payRatio <= 1))
    throw new ConfigError(`--pay-ratio must be from 0 to 1, got ${o.payRatio}`);
  if (!URL.canParse(o.url) || new URL(o.url).protocol !== 'http:')
    throw new ConfigError(`--url must be an http:// URL, got ${o.url}`);
}

/** The sale to fire at: the given one (its stock read from the API) or a fresh one made through the admin API. */
async function resolveSale(
  agent: Agent,
  base: URL,
  o: LoadtestOptions,
  runId: string,
): Promise<{ id: string; stock: number }> {
  if (o.saleId) {
    const r = await call(agent, base, 'GET', `/api/sales/${encodeURIComponent(o.saleId)}`);
    if (r.status !== 200) throw new Error(`cannot read sale "${o.saleId}" at ${o.url}: ${outcomeOf(r)}`);
    return { id: o.saleId, stock: Number(r.body!.stock) };
  }
  if (!o.adminToken)
    throw new ConfigError(
      'ADMIN_TOKEN is not set: set ADMIN_TOKEN or pass --admin-token to create the sale, or pass --sale <id> to use an existing one',
    );
  const r = await call(agent, base, 'POST', '/api/sales', o.adminToken, {
    id: `lt-${runId}`,
    name: `loadtest ${runId}`,
    stock: o.stock ?? 1000,
    price: 100,
    currency: 'EUR',
    perUserLimit: o.qty,
    maxPerOrder: o.qty,
  });
  if (r.status !== 201)
    throw new Error(
      `cannot create the sale at ${o.url}: ${outcomeOf(r)}${r.body?.message ? ` (${String(r.body.message)})` : ''}`,
    );
  return { id: `lt-${runId}`, stock: Number(r.body!.stock) };
}

async function countOrders(pool: Pool, saleId: string): Promise<NonNullable<LoadtestReport['orders']>> {
  const res = await pool.query<NonNullable<LoadtestReport['orders']>>(
    `select count(*)::int as total, count(*) filter (where status = 'pending')::int as pending,
            count(*) filter (where status = 'paid')::int as paid, count(*) filter (where status = 'expired')::int as expired
     from orders where sale_id = $1`,
    [saleId],
  );
  return res.rows[0]!;
}

function percentile(sorted: Float64Array, p: number): number {
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!;
}

const tally = (counts: Record<string, number>, key: string) => {
  counts[key] = (counts[key] ?? 0) + 1;
};

export async function runLoadtest(o: LoadtestOptions): Promise<LoadtestReport> {
  checkOptions(o);
  const runId = o.runId ?? randomBytes(3).toString('hex');
  const base = new URL(o.url);
  const agent = new Agent({ keepAlive: true, maxSockets: o.concurrency });
  try {
    const sale = await resolveSale(agent, base, o, runId);
    const tokenOf = (i: number) => signJwt(`lt-${runId}-${i}`, o.jwtSecret);
    const outcomes: Record<string, number> = {};
    const latencies = new Float64Array(o.buyers);
    const won: { orderId: string; buyer: number }[] = [];
    let done = 0;
    o.onProgress?.('buy', 0, o.buyers);
    const started = performance.now();
    await forEachConcurrently(o.buyers, o.concurrency, async (i) => {
      const r = await call(agent, base, 'POST', `/api/sales/${encodeURIComponent(sale.id)}/purchases`, tokenOf(i), {
        qty: o.qty,
      });
      latencies[i] = r.ms;
      tally(outcomes, outcomeOf(r));
      if (r.status === 202 && typeof r.body?.orderId === 'string') won.push({ orderId: r.body.orderId, buyer: i });
      o.onProgress?.('buy', ++done, o.buyers);
    });
    const durationMs = performance.now() - started;
    latencies.sort();

    // The writer drains winners asynchronously: wait, bounded, until none is left queued.
    const deadline = Date.now() + (o.settleTimeoutMs ?? 30_000);
    let settled: boolean | null = null;
    if (o.db) {
      for (;;) {
        settled = (await reconcile(o.db.pool, o.db.redis, sale.id, sale.stock)).queued === 0;
        if (settled || Date.now() > deadline) break;
        await delay(100);
      }
    }

    const toPay = won.slice(0, Math.round(o.payRatio * won.length));
    const payments = { asked: toPay.length, paid: 0, outcomes: {} as Record<string, number> };
    let paidDone = 0;
    if (toPay.length > 0) o.onProgress?.('pay', 0, toPay.length);
    await forEachConcurrently(toPay.length, o.concurrency, async (j) => {
      const { orderId, buyer } = toPay[j]!;
      let key: string;
      // Without Postgres to watch, order_not_ready is how we learn an order is still queued.
      for (;;) {
        key = outcomeOf(
          await call(agent, base, 'POST', `/api/orders/${encodeURIComponent(orderId)}/pay`, tokenOf(buyer)),
        );
        if (key !== '409 order_not_ready' || Date.now() > deadline) break;
        await delay(100);
      }
      tally(payments.outcomes, key);
      if (key === '200 paid') payments.paid++;
      o.onProgress?.('pay', ++paidDone, toPay.length);
    });

    return {
      runId,
      url: o.url,
      saleId: sale.id,
      stock: sale.stock,
      buyers: o.buyers,
      concurrency: o.concurrency,
      qty: o.qty,
      payRatio: o.payRatio,
      outcomes,
      won: won.length,
      durationMs,
      throughput: o.buyers / (durationMs / 1000),
      latencyMs: {
        p50: percentile(latencies, 0.5),
        p90: percentile(latencies, 0.9),
        p99: percentile(latencies, 0.99),
        max: percentile(latencies, 1),
      },
      settled,
      payments,
      orders: o.db ? await countOrders(o.db.pool, sale.id) : null,
      reconciliation: o.db ? await reconcile(o.db.pool, o.db.redis, sale.id, sale.stock) : null,
    };
  } finally {
    agent.destroy();
  }
}

/** The report as the aligned table `flashsale loadtest` prints. */
export function formatReport(r: LoadtestReport): string {
  const lines = [
    `loadtest ${r.runId}: sale ${r.saleId} (stock ${r.stock}) at ${r.url}`,
    `${r.buyers} buyers, concurrency ${r.concurrency}, qty ${r.qty}, pay ratio ${r.payRatio}`,
    '',
    'requests by outcome',
  ];
  const row = (label: string, value: string | number, unit = '') =>
    lines.push(`${label.padEnd(22)}${String(value).padStart(10)}${unit ? ` ${unit}` : ''}`);
  for (const [k, n] of Object.entries(r.outcomes).sort(([a], [b]) => a.localeCompare(b))) row(`  ${k}`, n);
  row('  total', r.buyers);
  row('throughput', Math.round(r.throughput), `req/s (${r.buyers} in ${(r.durationMs / 1000).toFixed(2)} s)`);
  for (const p of ['p50', 'p90', 'p99', 'max'] as const) row(`latency ${p}`, r.latencyMs[p].toFixed(1), 'ms');
  if (r.payments.asked > 0) {
    row('payments', `${r.payments.paid}/${r.payments.asked}`, 'paid');
    for (const [k, n] of Object.entries(r.payments.outcomes)) if (k !== '200 paid') row(`  ${k}`, n);
  }
  const needs = 'needs DATABASE_URL and REDIS_URL';
  if (!r.orders || !r.reconciliation) {
    row('orders in Postgres', 'n/a', `(${needs})`);
    row('conservation', 'unchecked', `(${needs})`);
    return lines.join('\n');
  }
  row('orders in Postgres', r.orders.total);
  row('  pending', r.orders.pending);
  row('  paid', r.orders.paid);
  row('  expired', r.orders.expired);
  if (r.reconciliation.queued > 0) row('  still queued', r.reconciliation.queued, 'units (writer behind or down?)');
  row('available', r.reconciliation.available);
  row('conservation', r.reconciliation.holds ? 'holds' : 'VIOLATED');
  return lines.join('\n');
}

/** Progress on stderr: a redrawn bar on a terminal, otherwise a line every 10%. */
export function progressReporter(
  out: NodeJS.WriteStream = process.stderr,
): (phase: Phase, done: number, total: number) => void {
  let phase: Phase | undefined;
  let since = 0;
  let lastDraw = 0;
  let lastTenth = 0;
  return (p, done, total) => {
    const now = Date.now();
    if (p !== phase) [phase, since, lastDraw, lastTenth] = [p, now, 0, 0];
    const rate = Math.round(done / Math.max(0.001, (now - since) / 1000));
    const pct = Math.floor((done * 100) / total);
    if (out.isTTY) {
      if (done < total && now - lastDraw < 100) return;
      lastDraw = now;
      const filled = Math.round((30 * done) / total);
      out.write(`\r${p} [${'#'.repeat(filled)}${'.'.repeat(30 - filled)}] ${pct}% ${done}/${total} ${rate}/s`);
      if (done === total) out.write('\n');
    } else if (Math.floor(pct / 10) > lastTenth) {
      lastTenth = Math.floor(pct / 10);
      out.write(`loadtest: ${p} ${done}/${total} (${pct}%) ${rate}/s\n`);
    }
  };
}
