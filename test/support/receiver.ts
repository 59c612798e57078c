// A shop's receiver of outbound events (docs/events.md), a real HTTP server on 127.0.0.1 that checks
// each request with the standardwebhooks package as a shop would, and answers as a test tells it:
// a status, never (the request hangs), or by closing the connection; it can go down and come back
// on the same port.
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

export interface Received {
  id: string;
  /** The raw body, as signed: a duplicate must carry the same bytes. */
  payload: string;
  body: {
    type: string;
    version: number;
    sequence: number;
    sale_id: string;
    timestamp: string;
    data: Record<string, unknown>;
  };
}

/** A status; 'hang': no answer until the receiver stops; 'close': the connection closed unanswered. */
export type Answer = number | 'hang' | 'close';

/** Verifies each request with `secrets` (each must verify it), answers `answer(n)` to the n-th. */
export class Receiver {
  /** Every verified request answered 2xx, in order of arrival. */
  readonly got: Received[] = [];
  /** Every verified request, whatever it was answered. */
  readonly seen: Received[] = [];
  /** Requests left hanging, still open. */
  readonly hanging = new Set<ServerResponse>();
  rejected = 0;
  requests = 0;
  /** Paths asked for, in order: a redirect's target must never appear. */
  readonly paths: string[] = [];
  /** Host headers, in order: the name the request was sent for, not the address it went to. */
  readonly hosts: string[] = [];
  private server: Server | undefined;
  private port = 0;

  constructor(
    public secrets: string[],
    public answer: (n: number) => Answer = () => 204,
    private readonly answerHeaders: Record<string, string> = {},
  ) {}

  /** Starts listening (on the port it had, when started again); resolves with its endpoint URL. */
  async start(): Promise<string> {
    const server = createServer((req, res) => this.handle(req, res));
    this.server = server;
    await new Promise<void>((r) => server.listen(this.port, '127.0.0.1', r));
    this.port = (server.address() as AddressInfo).port;
    return this.url;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}/hooks`;
  }

  /** Goes down: refuses connections until started again; hanging requests are cut. */
  stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const res of this.hanging) res.destroy();
    this.hanging.clear();
    if (!server) return Promise.resolve();
    server.closeAllConnections();
    return new Promise((r) => server.close(() => r()));
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const n = this.requests++;
      this.paths.push(req.url ?? '');
      this.hosts.push(req.headers.host ?? '');
      const payload = Buffer.concat(chunks).toString('utf8');
      const headers = req.headers as Record<string, string>;
      const verified = this.secrets.every((s) => {
        try {
          new Webhook(s).verify(payload, headers);
          return true;
        } catch {
          return false;
        }
      });
      if (!verified) {
        this.rejected++;
        res.writeHead(400).end();
        return;
      }
      const got: Received = { id: headers['webhook-id']!, payload, body: JSON.parse(payload) };
      this.seen.push(got);
      const answer = this.answer(n);
      if (answer === 'hang') {
        this.hanging.add(res);
        res.on('close', () => this.hanging.delete(res));
      } else if (answer === 'close') req.socket.destroy();
      else {
        if (answer < 300) this.got.push(got);
        const redirect = answer >= 300 && answer < 400 ? { location: '/elsewhere' } : {};
        res.writeHead(answer, { ...redirect, ...this.answerHeaders }).end();
      }
    });
  }
}

/** Ids received more than once, sorted; a duplicate whose body differs from the first's fails the test. */
export function duplicates(seen: Received[]): string[] {
  const first = new Map<string, string>();
  const twice = new Set<string>();
  for (const s of seen) {
    const was = first.get(s.id);
    if (was === undefined) first.set(s.id, s.payload);
    else {
      assert.equal(s.payload, was, `${s.id} came again with another body`);
      twice.add(s.id);
    }
  }
  return [...twice].sort();
}
