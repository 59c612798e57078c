// What the Cluster and Sentinel scenarios share: which master serves a sale, buying a batch of
// orders over HTTP, and how late their closes were.
import assert from 'node:assert/strict';
import { cpSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import type { Cluster as RedisCluster } from 'ioredis';
import type { ConfigOverrides } from '../../shared/config/index.js';
import { saleKeys } from '../../shared/redis/keys.js';
import type { Sale } from '../../shared/sales/sale.js';
import type { Vars } from './cli.js';
import { Cluster as Processes } from './cluster.js';
import { testEnv, type TestEnv } from './env.js';
import { newSale, runConcurrently, waitFor } from './fixtures.js';
import { http } from './http.js';
import { FaultLog } from './scenario.js';

/**
 * A local Redis set (Cluster or Sentinel) with the product's API, writer and listener on it
 * (REDIS_MIN_REPLICAS_ACK=1; no replay, so every close on time is the daemons'), for one test file.
 * KEEP_LOGS=<dir> keeps the processes' logs.
 */
export class OnTopology<T extends { stop(): Promise<void> }> {
  topo!: T;
  env!: TestEnv;
  c!: Processes;
  private dir = '';

  /** `vars`: what the file's daemons run with besides (or instead of) these. */
  constructor(
    private readonly name: string,
    private readonly vars: Vars = {},
  ) {}

  async start(start: (dir: string) => Promise<T>, redis: (topo: T) => ConfigOverrides): Promise<this> {
    // On tmpfs where there is one: each node writes its nodes.conf, fsynced, at every slot and epoch change.
    this.dir = mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), `flashsale-${this.name}-`));
    this.topo = await start(this.dir);
    this.env = await testEnv({ redisMinReplicasAck: 1 }, { redis: redis(this.topo) });
    this.c = new Processes(this.env, new FaultLog(this.name), {
      REDIS_MIN_REPLICAS_ACK: '1',
      EXPIRY_NUDGE_MS: '50',
      ...this.vars,
    });
    await this.c.startAll([
      ['api', 'api'],
      ['writer', 'order-writer'],
      ['listener', 'expiry-listener'],
    ]);
    return this;
  }

  async stop(): Promise<void> {
    this.c?.killAll();
    if (process.env.KEEP_LOGS && this.c) cpSync(this.c.logDir, process.env.KEEP_LOGS, { recursive: true });
    await this.env?.close();
    await this.topo?.stop();
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * The file's set, started before its tests and handed to `use` (which keeps its topo, env and
 * processes), stopped after them.
 */
export function onTopology<T extends { stop(): Promise<void> }>(
  name: string,
  start: (dir: string) => Promise<T>,
  redis: (topo: T) => ConfigOverrides,
  use: (on: OnTopology<T>) => void,
  vars: Vars = {},
): void {
  const on = new OnTopology<T>(name, vars);
  before(async () => use(await on.start(start, redis)));
  after(() => on.stop());
}

/** A node as the cluster's slot map and the logs name it. */
export const addr = (node: { port: number }) => `127.0.0.1:${node.port}`;

/** host:port of the master serving a sale's slot now (the env's client's slot map). */
export async function masterOf(env: TestEnv, saleId: string): Promise<string> {
  const cluster = env.redis as RedisCluster;
  const slot = (await cluster.cluster('KEYSLOT', saleKeys(saleId).meta)) as number;
  return cluster.slots[slot]![0]!;
}

/**
 * `perMaster` sales on each master the env's client sees serving slots now (or only on `only`),
 * ids tried until every master has its share. The slot map is refreshed first: it may be a refresh
 * behind the fault the test just made, and a node's CLUSTER NODES may lag the client's map.
 */
export async function salesOnEveryMaster(
  env: TestEnv,
  perMaster: number,
  prefix: string,
  fields: Record<string, unknown>,
  only?: string[],
): Promise<Map<string, Sale[]>> {
  const cluster = env.redis as RedisCluster;
  await new Promise<void>((resolve, reject) => cluster.refreshSlotsCache((err) => (err ? reject(err) : resolve())));
  const masters = only ?? [...new Set(cluster.slots.map((owners) => owners[0]!))];
  const placed = new Map<string, string[]>(masters.map((m) => [m, []]));
  for (let i = 0; [...placed.values()].some((ids) => ids.length < perMaster); i++) {
    assert.ok(i < 10_000, `no sale ids found for every master of ${masters.join(', ')}`);
    const id = `${prefix}-${i}`;
    const ids = placed.get(await masterOf(env, id));
    if (ids && ids.length < perMaster) ids.push(id);
  }
  const sales = new Map<string, Sale[]>();
  for (const [m, ids] of placed) sales.set(m, await Promise.all(ids.map((id) => newSale(env, { id, ...fields }))));
  return sales;
}

/** Buys `n` orders of one unit each from a sale (of `variant`, on a sale of several), one buyer each; returns the ids answered 202. */
export async function buy(
  port: number,
  saleId: string,
  n: number,
  buyerPrefix: string,
  variant?: string,
): Promise<string[]> {
  const body = variant === undefined ? { qty: 1 } : { qty: 1, variant };
  const answers = await runConcurrently(n, 20, (i) =>
    http(port, 'POST', `/api/sales/${saleId}/purchases`, { body, user: `${buyerPrefix}-${i}` }),
  );
  for (const r of answers) assert.equal(r.status, 202, JSON.stringify(r.body));
  return answers.map((r) => r.body.orderId as string);
}

/** Waits until none of `ids` is queued or pending (written, then closed or paid). */
export async function allClosed(env: TestEnv, ids: string[], timeoutMs = 30_000): Promise<void> {
  await waitFor(
    `${ids.length} orders written and closed`,
    async () => {
      const res = await env.pool.query<{ n: number }>(
        `select count(*)::int as n from orders where id = any($1::text[]) and status <> 'pending'`,
        [ids],
      );
      return res.rows[0]!.n === ids.length;
    },
    timeoutMs,
    100,
  );
}

/** Close lateness of these orders in ms (closed_at - expires_at): p50, p99, max. */
export async function lateness(
  env: TestEnv,
  ids: string[],
): Promise<{ p50: number; p99: number; max: number; expired: number }> {
  const res = await env.pool.query<{ p50: number; p99: number; max: number; expired: number }>(
    `select percentile_cont(0.5) within group (order by ms) as p50, percentile_cont(0.99) within group (order by ms) as p99,
            max(ms) as max, count(*)::int as expired
     from (select extract(epoch from closed_at - expires_at) * 1000 as ms from orders where id = any($1::text[]) and status = 'expired') t`,
    [ids],
  );
  const r = res.rows[0]!;
  return {
    p50: Math.round(Number(r.p50)),
    p99: Math.round(Number(r.p99)),
    max: Math.round(Number(r.max)),
    expired: r.expired,
  };
}
