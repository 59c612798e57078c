// The waiting room (admission: queue): what a join costs the API and Redis, how fast one tick's
// position update reaches every open stream, and what a pass adds to a purchase. The product's API
// (and order writer) as their own processes on fresh servers; wrk as the crowd; the admission loop
// (shared/admission/loop.ts) driven by this process, tick by tick. Join and purchase rounds interleaved,
// median shown; every round listed.
//
//   npm run bench:room [-- --quick] [--only fanout] [--buyers 50000 --rounds 3 --streams 50000 --ticks 5 --streams-per-api 18000]
// Results: bench/results/room.json, and BENCHMARKS.md rendered again with section 11.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { AdmissionLoop } from '../shared/admission/loop.js';
import { Challenges } from '../shared/purchase/challenge.js';
import { saleKeys } from '../shared/redis/keys.js';
import { createLogger } from '../shared/runtime/logger.js';
import { createSale, parseSaleInput } from '../shared/sales/sale.js';
import { writeDocuments } from './document.js';
import {
  BENCH_PRICE,
  Cleanup,
  cli,
  freePort,
  freshDatabase,
  freshRedis,
  progress,
  spawnNode,
  startBenchPostgres,
  until,
} from './harness.js';
import { runLoad, wrkVersion, WRK_INSTALL, type LoadResult } from './load.js';
import { machine } from './machine.js';
import { runFanout } from './room-fanout.js';
import type { JoinRun, PurchaseRun, RoomResults } from './room-report.js';
import { PRODUCT_ENV } from './stacks.js';

const { values: flags } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    buyers: { type: 'string' },
    rounds: { type: 'string' },
    streams: { type: 'string' },
    ticks: { type: 'string' },
    connections: { type: 'string', default: '500' },
    only: { type: 'string' },
    'streams-per-api': { type: 'string', default: '18000' },
  },
});
const quick = flags.quick;
const S = {
  buyers: Number(flags.buyers ?? (quick ? 10_000 : 50_000)),
  rounds: Number(flags.rounds ?? (quick ? 1 : 3)),
  streams: Number(flags.streams ?? (quick ? 10_000 : 50_000)),
  ticks: Number(flags.ticks ?? (quick ? 3 : 5)),
  connections: Number(flags.connections),
  /** One API process holds every stream's socket; this machine's hard limit is 20,000 descriptors a process (ulimit -Hn). */
  streamsPerApi: Number(flags['streams-per-api']),
};
// --only fanout: the stream part alone, its figures replacing those of the saved run of the same mode.
const fanoutOnly = flags.only === 'fanout';
if (flags.only !== undefined && !fanoutOnly)
  throw new Error('--only takes fanout (the join and purchase parts have no use alone)');
if (!Object.values(S).every((n) => Number.isInteger(n) && n > 0))
  throw new Error('--buyers, --rounds, --streams, --ticks and --connections must be positive integers');
if (!wrkVersion()) {
  console.error(`wrk (the load generator) is not installed. Install it with:\n\n  ${WRK_INSTALL}`);
  process.exit(2);
}
/** Buyer id lengths: a 24-character id (a MongoDB ObjectId's hex, many auth providers' subject) and a UUID's 36. */
const WIDTHS = [24, 36] as const;

const buyerId = (prefix: string, n: number, width: number) => {
  const digits = String(n);
  return `${prefix}${'0'.repeat(Math.max(0, width - prefix.length - digits.length))}${digits}`;
};
/** Stock past the crowd in every sale, so every buyer wins whatever wrk sends past the last one. */
const SPARE = 1000;
const usedMemory = async (r: { info(s: string): Promise<string> }) =>
  Number(/^used_memory:(\d+)/m.exec(await r.info('memory'))?.[1] ?? 0);
const apiCpuUs = (load: LoadResult) =>
  Math.round((((load.procs.find((p) => p.name === 'api')?.cpuPct ?? 0) / 100) * 1e6) / load.rps);

const cleanup = new Cleanup();
for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.once(signal, () => void cleanup.run().finally(() => process.exit(130)));
const started = performance.now();
const dir = mkdtempSync(join(tmpdir(), 'flashsale-bench-room-'));
cleanup.add(() => rmSync(dir, { recursive: true, force: true }));
try {
  const pg = await startBenchPostgres(cleanup);
  const db = await freshDatabase(pg.url, 'bench_room');
  cleanup.add(() => db.pool.end());
  const redis = await freshRedis(cleanup);
  const r = redis.redis;
  const env = { DATABASE_URL: db.url, REDIS_URL: redis.url, ...PRODUCT_ENV, SSE_MAX_STREAMS: String(S.streams + 1000) };
  const startApi = async (name: string) => {
    const port = await freePort();
    const proc = await spawnNode(name, cli('api'), { ...env, PORT: String(port) }, cleanup);
    return { port, pid: proc.pid };
  };
  const api = await startApi('api');
  await spawnNode('order-writer', cli('order-writer'), { ...env, PORT: '0' }, cleanup);
  const watch = [
    { name: 'api', pid: api.pid },
    { name: 'redis', pid: redis.pid },
  ];
  const loop = new AdmissionLoop({
    pool: db.pool,
    redis: r,
    logger: createLogger({ logLevel: 'warn', development: false }, 'bench', 2),
  });
  const challenges = new Challenges(r);
  const out: RoomResults = {
    mode: quick ? 'quick' : 'full',
    at: new Date().toISOString(),
    seconds: 0,
    settings: { ...S, widths: [...WIDTHS] },
    machine: machine({ 'redis-server': redis.version, postgres: pg.version, wrk: wrkVersion() ?? '?' }),
    joins: [],
    purchases: [],
    zsets: [],
    fanout: [],
  };
  progress(
    `bench:room (${out.mode}): ${S.buyers} buyers, ${S.rounds} round(s), ${S.streams} streams; load average ${out.machine.loadAvgAtStart.join(' ')}`,
  );

  /** A sale that has started: a queue sale's room stays in its pre-queue until the next tick opens it. */
  const newSale = (id: string, stock: number, queue?: { rate: number; overbook: number; passSeconds: number }) =>
    createSale(
      db.pool,
      r,
      parseSaleInput({
        id,
        name: id,
        stock,
        ...BENCH_PRICE,
        paymentWindowSeconds: 3600,
        ...(queue
          ? {
              admission: 'queue',
              admitRatePerSecond: queue.rate,
              admitOverbook: queue.overbook,
              passSeconds: queue.passSeconds,
            }
          : {}),
      }),
    );
  const url = (id: string, path: string) => `http://127.0.0.1:${api.port}/api/sales/${id}/${path}`;
  const settle = (id: string) =>
    until('the order writer to drain', 600_000, async () => {
      const k = saleKeys(id);
      return (await r.llen(k.winners)) === 0 && (await r.hlen(k.queued)) === 0;
    });
  const answered = (load: LoadResult, status: string) => load.statuses[status] ?? 0;

  const joinRun = async (id: string, buyers: number, width: number, round: number): Promise<JoinRun> => {
    // Stock beyond the crowd: wrk may send a few requests past `buyers`, and every joiner must get a pass.
    await newSale(id, buyers + SPARE, { rate: 100_000, overbook: 1, passSeconds: 3600 });
    const before = await usedMemory(r);
    const load = await runLoad(url(id, 'queue'), {
      buyers,
      connections: S.connections,
      prefix: 'b',
      watch,
      idWidth: width,
    });
    const after = await usedMemory(r);
    const k = saleKeys(id);
    const [queueBytes, roomBytes, members, encoding] = [
      await r.memory('USAGE', k.queue, 'SAMPLES', 0),
      await r.memory('USAGE', k.room, 'SAMPLES', 0),
      await r.zcard(k.queue),
      await r.object('ENCODING', k.queue),
    ];
    const run: JoinRun = {
      round,
      width,
      buyers,
      load,
      joined: answered(load, '200'),
      members,
      encoding: String(encoding),
      apiCpuUs: apiCpuUs(load),
      queueBytes: Number(queueBytes),
      roomBytes: Number(roomBytes ?? 0),
      usedMemoryDelta: after - before,
      // wrk may send a few requests past `buyers` before it stops: the zset's size is the denominator.
      bytesPerBuyer: Math.round((Number(queueBytes) + Number(roomBytes ?? 0)) / members),
      usedBytesPerBuyer: Math.round((after - before) / members),
    };
    progress(
      `  join ${width}-char ids: ${load.rps} joins/s, p99 ${load.latencyMs.p99} ms, API ${run.apiCpuUs} µs/join, ${run.bytesPerBuyer} B/buyer (MEMORY USAGE), ${run.usedBytesPerBuyer} B/buyer (used_memory), ${encoding}`,
    );
    return run;
  };

  const purchaseRun = async (id: string, buyers: number, withPass: boolean, round: number): Promise<PurchaseRun> => {
    let passesFile: string | undefined;
    if (withPass) {
      // The sale's buyers joined in its join round: one tick opens the room and admits them all (stock = buyers, overbook 1).
      await loop.tick(Date.now());
      const scored = await r.zrange(saleKeys(id).passes, '0', '-1', 'WITHSCORES');
      const expiry = new Map<string, number>();
      for (let i = 0; i < scored.length; i += 2) expiry.set(scored[i]!, Number(scored[i + 1]));
      if (expiry.size < buyers) throw new Error(`${id}: ${expiry.size} passes for ${buyers} buyers`);
      // Line n for buyer n; wrk's first call of request() is not sent, so the crowd is buyers 2, 3, ...
      const lines: string[] = [];
      for (let n = 1; n <= buyers + SPARE; n++) {
        const b = buyerId('b', n, WIDTHS[0]);
        const until = expiry.get(b);
        lines.push(until === undefined ? 'none' : await challenges.pass(id, b, until));
      }
      passesFile = join(dir, `${id}.passes`);
      writeFileSync(passesFile, `${lines.join('\n')}\n`);
    } else {
      await newSale(id, buyers + SPARE);
    }
    const load = await runLoad(url(id, 'purchases'), {
      buyers,
      connections: S.connections,
      prefix: 'b',
      watch,
      idWidth: WIDTHS[0],
      passesFile,
    });
    await settle(id);
    if (withPass && answered(load, '202') < buyers) {
      // Say why a pass was refused: one refused buyer's pass in Redis, and the API's answer to it again.
      const k = saleKeys(id);
      for (let n = 1; n <= buyers; n++) {
        const b = buyerId('b', n, WIDTHS[0]);
        const score = await r.zscore(k.passes, b);
        if (score === '0') continue;
        const res = await fetch(url(id, 'purchases'), {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'x-user-id': b,
            'flashsale-purchase-token': await challenges.pass(id, b, Number(score)),
          },
          body: '{"qty":1}',
        });
        progress(`  ${b} has pass ${score} and was refused: now ${res.status} ${await res.text()}`);
        break;
      }
    }
    const run: PurchaseRun = { round, withPass, buyers, load, won: answered(load, '202'), apiCpuUs: apiCpuUs(load) };
    progress(
      `  purchase ${withPass ? 'with a pass' : 'first-come'}: ${load.rps} req/s, p99 ${load.latencyMs.p99} ms, ${run.won} won, API ${run.apiCpuUs} µs/purchase, ${JSON.stringify(load.statuses)}`,
    );
    return run;
  };

  if (!fanoutOnly) await joinsAndPurchases();
  async function joinsAndPurchases() {
    // Warm-up (JIT, pools): a small join and both purchases, not recorded.
    const warm = Math.max(1000, Math.round(S.buyers / 10));
    progress(`warm-up: ${warm} buyers`);
    await joinRun('warm-q', warm, WIDTHS[0], 0);
    await purchaseRun('warm-f', warm, false, 0);
    await purchaseRun('warm-q', warm, true, 0);

    for (let round = 1; round <= S.rounds; round++) {
      progress(`round ${round}/${S.rounds}`);
      for (const width of round % 2 ? WIDTHS : [...WIDTHS].reverse())
        out.joins.push(await joinRun(`q${width}-${round}`, S.buyers, width, round));
      // The 24-character room is bought from with passes; a first-come sale of the same stock without. Order alternates by round.
      for (const withPass of round % 2 ? [false, true] : [true, false])
        out.purchases.push(await purchaseRun(withPass ? `q24-${round}` : `f-${round}`, S.buyers, withPass, round));
    }

    // What a member of a large zset costs by the member's length, against the compact listpack a small zset keeps.
    for (const [width, members] of [
      [8, S.buyers],
      [24, S.buyers],
      [36, S.buyers],
      [24, 128],
    ] as const) {
      const key = `bench:zset:${width}:${members}`;
      for (let i = 0; i < members; i += 1000) {
        const args: string[] = [];
        for (let n = i + 1; n <= Math.min(members, i + 1000); n++)
          args.push(String(Math.random()), buyerId('b', n, width));
        await r.zadd(key, ...args);
      }
      const bytes = Number(await r.memory('USAGE', key, 'SAMPLES', 0));
      out.zsets.push({
        width,
        members,
        encoding: String(await r.object('ENCODING', key)),
        bytes,
        bytesPerMember: Math.round((bytes / members) * 10) / 10,
      });
      await r.del(key);
    }
    progress(
      `zsets: ${out.zsets.map((z) => `${z.width}-char x ${z.members}: ${z.bytesPerMember} B (${z.encoding})`).join(', ')}`,
    );
  }

  // Fan-out: one room of `streams` waiting buyers at the default admission rate, opened by a tick.
  const room = 'room-sse';
  await newSale(room, 10_000_000, { rate: 50, overbook: 1.2, passSeconds: 120 });
  progress(`fan-out: ${S.streams} buyers join ${room}`);
  const joined = await runLoad(url(room, 'queue'), {
    buyers: S.streams,
    connections: S.connections,
    prefix: 's',
    watch: [],
    idWidth: WIDTHS[0],
  });
  if (answered(joined, '200') < S.streams)
    throw new Error(`fan-out: ${answered(joined, '200')} of ${S.streams} joins answered 200`);
  await loop.tick(Date.now());
  // wrk's crowd starts at buyer 2 (its first call of request() builds a request it never sends).
  const buyers = Array.from({ length: S.streams }, (_, i) => buyerId('s', i + 2, WIDTHS[0]));
  const one = Math.min(S.streams, S.streamsPerApi);
  out.fanout.push(
    await runFanout({
      loop,
      redis: r,
      saleId: room,
      buyers: buyers.slice(0, one),
      apis: [api],
      clients: Math.ceil(one / 9000),
      ticks: S.ticks,
    }),
  );
  if (S.streams > S.streamsPerApi) {
    const apis = [api];
    while (apis.length * S.streamsPerApi < S.streams) apis.push(await startApi(`api${apis.length + 1}`));
    out.fanout.push(
      await runFanout({
        loop,
        redis: r,
        saleId: room,
        buyers,
        apis,
        clients: Math.ceil(S.streams / 12_500),
        ticks: S.ticks,
      }),
    );
  }

  out.seconds = Math.round((performance.now() - started) / 1000);
  mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
  const file = new URL('./results/room.json', import.meta.url);
  const last = fanoutOnly && existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as RoomResults) : undefined;
  const result: RoomResults =
    last?.mode === out.mode
      ? {
          ...last,
          fanout: out.fanout,
          fanoutRun: { at: out.at, seconds: out.seconds, loadAvgAtStart: out.machine.loadAvgAtStart },
        }
      : out;
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  // BENCHMARKS.md and the headline are rendered from every saved result, so the room's figures appear whichever bench ran last.
  writeDocuments();
  progress(`wrote bench/results/room.json, BENCHMARKS.md and the README's headline in ${out.seconds} s`);
} finally {
  await cleanup.run();
}
