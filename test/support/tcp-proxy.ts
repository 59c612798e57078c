// A TCP proxy between one process and Redis or Postgres, for the network scenario: it adds a
// seeded delay with jitter to every chunk (this kernel has no netem qdisc), and the scenario turns
// the delay on and off while it runs. Chunks of a connection are delivered in the order they came,
// however their delays fall: a chunk never overtakes the one before it.
import { createServer, connect, type Server, type Socket } from 'node:net';
import { seededRandom } from './fixtures.js';

/** A delay range in ms: each chunk waits a uniform draw from it. */
export type DelayRange = [min: number, max: number];

/** One direction of a connection: chunks waiting for their time, oldest first. */
class Pipe {
  private readonly queue: { at: number; chunk: Buffer }[] = [];
  private timer: NodeJS.Timeout | undefined;
  private ended = false;

  constructor(
    private readonly to: Socket,
    private readonly delayOf: () => number,
  ) {}

  push(chunk: Buffer): void {
    const d = this.delayOf();
    if (d === 0 && this.queue.length === 0) {
      this.to.write(chunk);
      return;
    }
    // Never before the chunk ahead of it: a later chunk with a shorter draw waits its turn.
    const at = Math.max(this.queue.at(-1)?.at ?? 0, Date.now() + d);
    this.queue.push({ at, chunk });
    this.schedule();
  }

  /** The source ended: the other side is ended once what is queued has gone. */
  end(): void {
    this.ended = true;
    if (this.queue.length === 0) this.to.end();
  }

  stop(): void {
    clearTimeout(this.timer);
    this.queue.length = 0;
  }

  private schedule(): void {
    if (this.timer || this.queue.length === 0) return;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        const now = Date.now();
        while (this.queue.length > 0 && this.queue[0]!.at <= now) this.to.write(this.queue.shift()!.chunk);
        if (this.queue.length > 0) this.schedule();
        else if (this.ended) this.to.end();
      },
      Math.max(0, this.queue[0]!.at - Date.now()),
    );
  }
}

export class TcpProxy {
  private range: DelayRange | undefined;
  private readonly sockets = new Set<Socket>();
  private connections = 0;
  /** Connections accepted so far, and chunks that went through delayed (for the scenario's figures). */
  accepted = 0;
  delayedChunks = 0;

  private constructor(
    private readonly server: Server,
    readonly port: number,
    private readonly seed: number,
  ) {}

  /** Listens on 127.0.0.1:`port` (any free one by default) and forwards to 127.0.0.1:`target`. */
  static async start(target: number, opts: { seed: number; port?: number; delay?: DelayRange }): Promise<TcpProxy> {
    let proxy!: TcpProxy;
    // Half-open allowed: a side that ends still gets what is queued for it before the other end follows.
    const server = createServer({ allowHalfOpen: true }, (client) => proxy.accept(client, target));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(opts.port ?? 0, '127.0.0.1', () => resolve());
    });
    proxy = new TcpProxy(server, (server.address() as { port: number }).port, opts.seed);
    proxy.setDelay(opts.delay);
    return proxy;
  }

  /** Delays every chunk from now on by a draw from `range` (undefined: none; queued chunks still go in order). */
  setDelay(range: DelayRange | undefined): void {
    this.range = range && range[1] > 0 ? range : undefined;
  }

  get delay(): DelayRange | undefined {
    return this.range;
  }

  /** Stops listening and drops every connection. */
  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket, target: number): void {
    this.accepted++;
    // Each connection draws its own delays from the seed and its number, so a run replays.
    const rand = seededRandom(this.seed * 1000 + ++this.connections);
    const delayOf = () => {
      const r = this.range;
      if (!r) return 0;
      this.delayedChunks++;
      return r[0] + rand() * (r[1] - r[0]);
    };
    const upstream = connect({ port: target, host: '127.0.0.1', allowHalfOpen: true });
    for (const s of [client, upstream]) {
      this.sockets.add(s);
      s.setNoDelay(true);
    }
    const up = new Pipe(upstream, delayOf);
    const down = new Pipe(client, delayOf);
    const drop = () => {
      up.stop();
      down.stop();
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    client.on('data', (c: Buffer) => up.push(c));
    upstream.on('data', (c: Buffer) => down.push(c));
    client.on('end', () => up.end());
    upstream.on('end', () => down.end());
    for (const s of [client, upstream]) {
      s.on('error', drop);
      s.on('close', drop);
    }
  }
}
