// A shop's receiver of outbound events (docs/events.md) on 127.0.0.1: it checks each request with
// the standardwebhooks package, as a shop written from the documentation would.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

export interface Received {
  id: string;
  body: {
    type: string;
    version: number;
    sequence: number;
    sale_id: string;
    timestamp: string;
    data: Record<string, unknown>;
  };
}

/** A shop's receiver: verifies each request with `secrets` (any may sign), answers `answer(n)` to the n-th. */
export class Receiver {
  readonly got: Received[] = [];
  rejected = 0;
  requests = 0;
  private server: Server | undefined;
  constructor(
    public secrets: string[],
    private readonly answer: (n: number) => number = () => 204,
  ) {}
  async start(): Promise<string> {
    this.server = createServer((req: IncomingMessage, res: ServerResponse) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const n = this.requests++;
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
        const status = this.answer(n);
        if (status < 300) this.got.push({ id: headers['webhook-id']!, body: JSON.parse(payload) });
        res.writeHead(status).end();
      });
    });
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/hooks`;
  }
  stop(): Promise<void> {
    return new Promise((r) => (this.server ? this.server.close(() => r()) : r()));
  }
}
