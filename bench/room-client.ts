// One process of the waiting-room stream clients (bench/room-fanout.ts forks a few): raw sockets,
// one per buyer, each holding GET .../queue/events open, and per tick (identified by the `waiting`
// count it carries) how many streams got it and when the first and the last did. No HTTP client
// library: at 50,000 streams the clients must cost far less than the API they measure.
import { connect, type Socket } from 'node:net';

export type ClientRequest =
  | { type: 'open'; ports: number[]; saleId: string; buyers: string[]; localAddress: string; concurrency: number }
  | { type: 'report' }
  | { type: 'close' };

export interface ClientReport {
  type: 'report';
  open: number;
  ended: number;
  /** [waiting, streams that got it, first receipt ms, last receipt ms] */
  ticks: [number, number, number, number][];
}

export type ClientMessage =
  | {
      type: 'opened';
      opened: number;
      failed: number;
      retries: number;
      refusals: Record<string, number>;
      sample: string;
      ms: number;
    }
  | ClientReport;

const byWaiting = new Map<number, [number, number, number]>();
const sockets = new Set<Socket>();
const refusals = new Map<string, number>();
let lastRefusal = '';
let open = 0;
let ended = 0;
const send = (m: ClientMessage) => process.send!(m);

function seen(waiting: number, at: number): void {
  const t = byWaiting.get(waiting);
  if (!t) byWaiting.set(waiting, [1, at, at]);
  else {
    t[0]++;
    t[2] = at;
  }
}

const WAITING = /"waiting":(\d+)/g;

/** Resolves true once the stream's head says 200, false on any other answer (the caller retries). */
function stream(port: number, path: string, buyer: string, localAddress: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ port, host: '127.0.0.1', localAddress });
    let head = '';
    let started = false;
    let rest = '';
    s.setNoDelay(true);
    s.on('connect', () =>
      s.write(
        `GET ${path} HTTP/1.1\r\nHost: bench\r\nX-User-Id: ${buyer}\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n`,
      ),
    );
    s.on('data', (chunk: Buffer) => {
      const at = Date.now();
      let text = chunk.toString('latin1');
      if (!started) {
        head += text;
        const i = head.indexOf('\r\n\r\n');
        if (i < 0) return;
        if (head.slice(9, 12) !== '200') {
          const status = head.slice(9, 12);
          refusals.set(status, (refusals.get(status) ?? 0) + 1);
          if (!lastRefusal) lastRefusal = head.slice(0, 600);
          s.destroy();
          return resolve(false);
        }
        started = true;
        open++;
        sockets.add(s);
        text = head.slice(i + 4);
        head = '';
        resolve(true);
      }
      // Events end with a blank line; a part of one waits for the rest.
      text = rest + text;
      const cut = text.lastIndexOf('\n\n');
      rest = cut < 0 ? text : text.slice(cut + 2);
      if (cut < 0) return;
      for (const m of text.slice(0, cut).matchAll(WAITING)) seen(Number(m[1]), at);
    });
    s.on('error', () => {});
    s.on('close', () => {
      if (!started) return resolve(false);
      sockets.delete(s);
      ended++;
    });
  });
}

process.on('message', async (m: ClientRequest) => {
  if (m.type === 'report') {
    send({ type: 'report', open, ended, ticks: [...byWaiting].map(([w, [n, first, last]]) => [w, n, first, last]) });
  } else if (m.type === 'close') {
    for (const s of sockets) s.destroy();
    process.exit(0);
  } else {
    const t0 = performance.now();
    let next = 0;
    let retries = 0;
    let failed = 0;
    await Promise.all(
      Array.from({ length: m.concurrency }, async () => {
        while (next < m.buyers.length) {
          const i = next++;
          const port = m.ports[i % m.ports.length]!;
          // A refused stream (load shedding while thousands open at once) is tried again.
          for (
            let tries = 0;
            !(await stream(port, `/api/sales/${m.saleId}/queue/events`, m.buyers[i]!, m.localAddress));
            tries++
          ) {
            if (tries === 20) {
              failed++;
              break;
            }
            retries++;
            await new Promise((r) => setTimeout(r, 50));
          }
        }
      }),
    );
    send({
      type: 'opened',
      opened: open,
      failed,
      retries,
      refusals: Object.fromEntries(refusals),
      sample: lastRefusal,
      ms: Math.round(performance.now() - t0),
    });
  }
});
