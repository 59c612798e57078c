// The waiting room's stream fan-out: `streams` buyers of one open room hold GET .../queue/events
// open (raw sockets in a few client processes, bench/room-client.ts, each from its own loopback
// address so the ports of one address do not run out), spread over the API processes given. Then
// the bench drives the admission loop itself (AdmissionLoop.tick, the daemon's own step) and, per
// tick, measures from the tick's start (before admit.lua and the PUBLISH) until the last open
// stream received that tick's update.
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import type { AdmissionLoop, RoomTick } from '../shared/admission/loop.js';
import { ADMISSION_CHANNEL } from '../shared/redis/keys.js';
import { progress, sleep } from './harness.js';
import { Monitor, type ProcCost, type Watched } from './procstat.js';
import type { ClientMessage, ClientReport, ClientRequest } from './room-client.js';

const CLIENT = fileURLToPath(new URL('./room-client.ts', import.meta.url));
/** The API writes a position that only moved at most once a second (shared/http/routes/admission/room-events.ts POSITION_EVERY_MS): ticks are spaced past it. */
const AFTER_LAST_MS = 1200;

export interface FanoutTick {
  /** Streams open when the tick started, each owed this tick's update. */
  owed: number;
  received: number;
  admitted: number;
  /** From the tick's start until the first / the last stream had the update. */
  firstMs: number;
  lagMs: number;
  /** From the tick's start until this sale's message reached a subscriber of the channel (this process); then until the last stream had it. */
  publishedMs: number;
  afterPublishMs: number;
  updatesPerS: number;
  /** CPU of each API process over the fan-out, and µs of API CPU per update delivered. */
  apiCpuPct: number[];
  apiCpuUsPerUpdate: number;
}

export interface FanoutResult {
  streams: number;
  apis: number;
  clients: number;
  openS: number;
  openRetries: number;
  openFailed: number;
  apiRssMb: number[];
  ticks: FanoutTick[];
  /** Medians over the ticks. */
  lagMs: number;
  afterPublishMs: number;
  updatesPerS: number;
  apiCpuUsPerUpdate: number;
}

class Client {
  private readonly waiters: ((m: ClientMessage) => void)[] = [];
  constructor(readonly child: ChildProcess) {
    child.on('message', (m: ClientMessage) => this.waiters.shift()?.(m));
  }
  ask<T extends ClientMessage>(m: ClientRequest): Promise<T> {
    return new Promise((resolve) => {
      this.waiters.push((r) => resolve(r as T));
      this.child.send(m);
    });
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;

export async function runFanout(opts: {
  loop: AdmissionLoop;
  redis: Redis;
  saleId: string;
  buyers: string[];
  apis: { port: number; pid: number }[];
  clients: number;
  ticks: number;
}): Promise<FanoutResult> {
  const { loop, saleId, buyers, apis } = opts;
  // A subscriber of our own, as each API has: when the tick's message was delivered.
  const heard = new Map<number, number>();
  const sub = opts.redis.duplicate();
  sub.on('message', (_c: string, m: string) => {
    const t = JSON.parse(m) as RoomTick;
    if (t.saleId === saleId) heard.set(t.waiting, Date.now());
  });
  await sub.subscribe(ADMISSION_CHANNEL);
  const clients = Array.from(
    { length: opts.clients },
    () =>
      new Client(fork(CLIENT, [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })),
  );
  try {
    progress(
      `fan-out: opening ${buyers.length} streams over ${apis.length} API process(es) from ${clients.length} client processes`,
    );
    const t0 = performance.now();
    const per = Math.ceil(buyers.length / clients.length);
    const opened = await Promise.all(
      clients.map((c, i) =>
        c.ask<Extract<ClientMessage, { type: 'opened' }>>({
          type: 'open',
          ports: apis.map((a) => a.port),
          saleId,
          buyers: buyers.slice(i * per, (i + 1) * per),
          localAddress: `127.0.0.${i + 2}`,
          concurrency: 64,
        }),
      ),
    );
    const openS = Math.round((performance.now() - t0) / 100) / 10;
    const streams = opened.reduce((n, o) => n + o.opened, 0);
    progress(
      `  ${streams} streams open in ${openS} s (${opened.reduce((n, o) => n + o.retries, 0)} retries, ${opened.reduce((n, o) => n + o.failed, 0)} failed)${opened.some((o) => o.sample) ? `; refusals ${opened.map((o) => JSON.stringify(o.refusals)).join(' ')}: ${opened.find((o) => o.sample)!.sample.replace(/\s+/g, ' ')}` : ''}`,
    );
    const reports = () => Promise.all(clients.map((c) => c.ask<ClientReport>({ type: 'report' })));
    const watch: Watched[] = apis.map((a, i) => ({ name: `api${i + 1}`, pid: a.pid }));
    let rss: ProcCost[] = [];
    const ticks: FanoutTick[] = [];
    await sleep(AFTER_LAST_MS);
    for (let i = 0; i < opts.ticks; i++) {
      const before = await reports();
      const owed = before.reduce((n, r) => n + r.open - r.ended, 0);
      const monitor = new Monitor(watch, 250);
      monitor.start();
      const start = Date.now();
      const tick = (await loop.tick(start)).find((t) => t.saleId === saleId);
      if (!tick) throw new Error(`tick ${i + 1} published nothing for ${saleId}`);
      let received = 0;
      let first = 0;
      let last = 0;
      const deadline = Date.now() + 30_000;
      while (Date.now() < deadline) {
        await sleep(50);
        const got = (await reports())
          .map((r) => r.ticks.find(([w]) => w === tick.waiting))
          .filter((t) => t !== undefined);
        received = got.reduce((n, t) => n + t[1], 0);
        first = Math.min(...got.map((t) => t[2]));
        last = Math.max(...got.map((t) => t[3]));
        if (received >= owed) break;
      }
      const cpu = monitor.stop();
      rss = cpu;
      const lagMs = last - start;
      const busyS = (Date.now() - start) / 1000;
      const cpuS = cpu.reduce((n, p) => n + (p.cpuPct / 100) * busyS, 0);
      const at = heard.get(tick.waiting) ?? start;
      const t: FanoutTick = {
        owed,
        received,
        admitted: tick.admitted,
        firstMs: first - start,
        lagMs,
        publishedMs: at - start,
        afterPublishMs: last - at,
        updatesPerS: Math.round(received / (lagMs / 1000)),
        apiCpuPct: cpu.map((p) => p.cpuPct),
        apiCpuUsPerUpdate: Math.round((cpuS * 1e6) / Math.max(1, received)),
      };
      progress(
        `  tick ${i + 1}/${opts.ticks}: ${received}/${owed} streams updated, published ${t.publishedMs} ms, first ${t.firstMs} ms, last ${lagMs} ms (${t.afterPublishMs} ms after the message), ${t.updatesPerS} updates/s, API CPU ${t.apiCpuPct.join('/')}%`,
      );
      ticks.push(t);
      await sleep(Math.max(0, last + AFTER_LAST_MS - Date.now()));
    }
    return {
      streams,
      apis: apis.length,
      clients: clients.length,
      openS,
      openRetries: opened.reduce((n, o) => n + o.retries, 0),
      openFailed: opened.reduce((n, o) => n + o.failed, 0),
      apiRssMb: rss.map((p) => p.rssMaxMb),
      ticks,
      lagMs: median(ticks.map((t) => t.lagMs)),
      afterPublishMs: median(ticks.map((t) => t.afterPublishMs)),
      updatesPerS: median(ticks.map((t) => t.updatesPerS)),
      apiCpuUsPerUpdate: median(ticks.map((t) => t.apiCpuUsPerUpdate)),
    };
  } finally {
    sub.disconnect();
    for (const c of clients) {
      c.child.send({ type: 'close' } satisfies ClientRequest);
      c.child.once('exit', () => {});
    }
    await sleep(500);
    for (const c of clients) if (c.child.exitCode === null) c.child.kill('SIGKILL');
  }
}
