// Requests over loopback, as clients send them: one HTTP client for every test (it never rejects:
// no answer is an answer too), and a raw socket for what no HTTP client would send.
import assert from 'node:assert/strict';
import { Agent, request } from 'node:http';
import { connect as netConnect } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { token } from './tokens.js';

export interface Reply {
  /** 0: no HTTP answer (see `error`). */
  status: number;
  /** Parsed JSON, or the text when it is not JSON. */
  body: any;
  headers: Record<string, string | string[] | undefined>;
  ms: number;
  /** A network failure or our own timeout: the client got no HTTP answer. */
  error?: string;
}

export interface HttpOptions {
  /** A string is sent as it is, anything else as JSON (with content-type and content-length). */
  body?: unknown;
  /** Sends a valid buyer token of this user. */
  user?: string;
  headers?: Record<string, string | number>;
  /** Default: one keep-alive agent shared by every request; false for a fresh connection. */
  agent?: Agent | false;
  /** The request gives up after this long without a byte (default 30 s): a hang is an answer too. 0: never. */
  timeoutMs?: number;
  /** The client address (any of 127.0.0.0/8), so tests can play several clients. */
  from?: string;
  /** Instead of `body`: written as they are, with only the headers given (no content-type, chunked, a lying length). */
  chunks?: string[];
  /** false: the request is never finished (its headers are flushed); the connection is dropped once the answer is in. */
  end?: boolean;
}

const sharedAgent = new Agent({ keepAlive: true, maxSockets: 2000 });

/** How many answers of each status every request of this process got (`none`: no HTTP answer). */
const answered: Record<string, number> = {};
const count = (status: string) => void (answered[status] = (answered[status] ?? 0) + 1);

/** A counter of the answers by status from now on: what a scenario's requests were told. */
export function answersFromNow(): () => Record<string, number> {
  const start = { ...answered };
  return () =>
    Object.fromEntries(
      Object.entries(answered)
        .map(([s, n]) => [s, n - (start[s] ?? 0)] as const)
        .filter(([, n]) => n > 0),
    );
}

const bodyText = (opts: HttpOptions) =>
  opts.body === undefined ? undefined : typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);

function requestHeaders(opts: HttpOptions, payload: string | undefined): Record<string, string | number> {
  return {
    ...(payload !== undefined
      ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) }
      : {}),
    ...(opts.user !== undefined ? { authorization: `Bearer ${token(opts.user)}` } : {}),
    ...opts.headers,
  };
}

/** One HTTP request to 127.0.0.1:`port`; it never rejects. */
export function http(port: number, method: string, path: string, opts: HttpOptions = {}): Promise<Reply> {
  const payload = opts.chunks ? undefined : bodyText(opts);
  const headers = requestHeaders(opts, payload);
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const started = performance.now();
  const failed = (error: string): Reply => {
    count('none');
    return { status: 0, body: null, headers: {}, ms: performance.now() - started, error };
  };
  return new Promise((resolve) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        headers,
        agent: opts.agent ?? sharedAgent,
        timeout: timeoutMs,
        localAddress: opts.from,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          count(String(res.statusCode));
          resolve({
            status: res.statusCode ?? 0,
            body: parse(Buffer.concat(chunks).toString('utf8')),
            headers: res.headers,
            ms: performance.now() - started,
          });
          if (opts.end === false || opts.agent === false) req.destroy();
        });
        res.on('error', (err) => resolve(failed(err.message)));
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', (err: NodeJS.ErrnoException) => resolve(failed(err.code ?? err.message)));
    for (const c of opts.chunks ?? (payload !== undefined ? [payload] : [])) req.write(c);
    if (opts.end === false) req.flushHeaders();
    else req.end();
  });
}

/** `http()` without a socket: the same request answered by the app's `inject`. */
export type Inject = (
  method: string,
  path: string,
  opts?: Pick<HttpOptions, 'body' | 'user' | 'headers' | 'from'>,
) => Promise<Reply>;

export function injector(app: FastifyInstance): Inject {
  return async (method, path, opts = {}) => {
    const payload = bodyText(opts);
    const started = performance.now();
    const res = await app.inject({
      method: method as 'GET',
      url: path,
      headers: requestHeaders(opts, payload),
      payload,
      remoteAddress: opts.from,
    });
    count(String(res.statusCode));
    return {
      status: res.statusCode,
      body: parse(res.payload),
      headers: res.headers as Reply['headers'],
      ms: performance.now() - started,
    };
  };
}

function parse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text; // not JSON: the assertions say so
  }
}

/** `201`, `202`, `409 sold_out`, `error ECONNRESET`: one reply as a short outcome label. */
export function outcome(r: Reply): string {
  if (r.error) return `error ${r.error}`;
  const code = r.body && typeof r.body === 'object' ? (r.body.error ?? r.body.status) : undefined;
  return code ? `${r.status} ${code}` : String(r.status);
}

export interface RawReply {
  /** 0: the connection closed without a status line. */
  status: number;
  /** The status line and headers as they came, `''` when nothing did. */
  head: string;
  headers: Record<string, string>;
  /** Parsed JSON, or the text when it is not JSON. */
  body: any;
  /** false: still open at `timeoutMs`, when the client gave up. */
  closed: boolean;
  ms: number;
  /** A socket error seen before the close (ECONNRESET, EPIPE). */
  error?: string;
}

export interface RawOptions {
  /** The client address (any of 127.0.0.0/8). */
  from?: string;
  /** Called once `text` is written. */
  onWritten?: () => void;
  /** Hang up (FIN) right after `text`, without waiting for the answer. */
  hangUp?: boolean;
  /** After `text`, one more of these every 100 ms (a space once they run out): a client that never finishes. */
  trickle?: string[];
  /** Give up and close after this long; by default the client waits for the server, as a slow client would. */
  timeoutMs?: number;
}

/** Writes `text` as it is on a fresh connection and resolves with what came back once the connection closes. */
export function rawRequest(port: number, text: string, opts: RawOptions = {}): Promise<RawReply> {
  const started = Date.now();
  return new Promise((resolve) => {
    const socket = netConnect({ port, host: '127.0.0.1', localAddress: opts.from ?? '127.0.0.1' }, () => {
      if (opts.hangUp) socket.end(text, () => opts.onWritten?.());
      else socket.write(text, () => opts.onWritten?.());
      const more = opts.trickle;
      if (more) drip = setInterval(() => socket.writable && socket.write(more.shift() ?? ' '), 100);
    });
    const chunks: Buffer[] = [];
    let error: string | undefined;
    let closed = true;
    let drip: NodeJS.Timeout | undefined;
    const timer =
      opts.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            closed = false;
            socket.destroy();
          }, opts.timeoutMs);
    socket.on('data', (d: Buffer) => chunks.push(d));
    socket.on('error', (err: NodeJS.ErrnoException) => {
      error = err.code ?? err.message;
    });
    socket.on('close', () => {
      clearTimeout(timer);
      clearInterval(drip);
      const raw = Buffer.concat(chunks).toString('utf8');
      const split = raw.indexOf('\r\n\r\n');
      const head = split === -1 ? raw : raw.slice(0, split);
      const lines = head.split('\r\n');
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(lines[0] ?? '')?.[1] ?? 0);
      const headers: Record<string, string> = {};
      for (const line of lines.slice(1)) {
        const colon = line.indexOf(':');
        if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
      }
      const body = split === -1 ? '' : parse(raw.slice(split + 4));
      resolve({ status, head, headers, body, closed, ms: Date.now() - started, ...(error ? { error } : {}) });
    });
  });
}

/** An event stream's `data:` events, parsed as they come, until the server ends it (a 200 is asserted). */
export function sseEvents<T = any>(
  port: number,
  path: string,
  headers: Record<string, string> = {},
): { events: T[]; ended: Promise<void> } {
  const events: T[] = [];
  const ended = new Promise<void>((resolve, reject) => {
    const req = request({ port, path, headers }, (res) => {
      assert.equal(res.statusCode, 200);
      let buf = '';
      res.on('data', (chunk: Buffer) => {
        buf += chunk.toString();
        for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (line.startsWith('data: ')) events.push(JSON.parse(line.slice(6)) as T);
        }
      });
      res.on('end', () => resolve());
    });
    req.on('error', reject);
    req.end();
  });
  return { events, ended };
}
