// What the baseline servers share with each other and with the product: fastify 5, the product's
// error catalogue and user-id check, the same 200 ms sold-out memory, one process each, ready
// reported over IPC once listening. Settings come from the environment the bench passes.
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import { checkUserId } from '../../shared/buyers/buyer.js';
import { HttpError } from '../../shared/runtime/errors.js';

/** The enqueue design's BullMQ queue, and the flag its worker raises when a sale is sold out. */
export const PURCHASE_QUEUE = 'purchases';
export const soldOutKey = (saleId: string) => `bench:sold-out:${saleId}`;

/** The delayed-job closer's BullMQ queue. */
export const CLOSE_QUEUE = 'close-unpaid';

export function env(name: string, fallback?: string): string {
  const v = process.env[name] ?? fallback;
  if (v === undefined) throw new Error(`set ${name}`);
  return v;
}

export function baseApp(): FastifyInstance {
  const app = Fastify({ logger: false, bodyLimit: 16 * 1024 });
  app.setErrorHandler((err: Error & { statusCode?: number }, _req, reply) => {
    const e =
      err instanceof HttpError
        ? err
        : new HttpError(err.statusCode && err.statusCode < 500 ? 'bad_request' : 'unavailable', err.message);
    if (e.status >= 500) process.stderr.write(`${err.stack ?? err.message}\n`);
    void reply.code(e.status).send(e.body());
  });
  return app;
}

/** The buyer (X-User-Id, as the product's trusted-header mode) and qty, checked as the product checks them. */
export function buyerOf(req: FastifyRequest): { saleId: string; userId: string; qty: number } {
  const userId = checkUserId(req.headers['x-user-id']);
  const qty = (req.body as { qty?: unknown } | undefined)?.qty ?? 1;
  if (typeof qty !== 'number' || !Number.isInteger(qty) || qty < 1 || qty > 1000) throw new HttpError('invalid_qty');
  return { saleId: (req.params as { saleId: string }).saleId, userId, qty };
}

/** The product's SOLD_OUT_CACHE_MS: a sold_out answer is remembered this long (default 200 ms). */
export class SoldOutMemory {
  private until = new Map<string, number>();
  constructor(private readonly ms = Number(process.env.SOLD_OUT_CACHE_MS ?? 200)) {}
  check(saleId: string): void {
    const u = this.until.get(saleId);
    if (u !== undefined && Date.now() < u) throw new HttpError('sold_out');
  }
  soldOut(saleId: string): void {
    if (this.ms > 0) this.until.set(saleId, Date.now() + this.ms);
  }
}

/** Listens, tells the parent it is ready, closes `resources` on SIGTERM. */
export async function serve(app: FastifyInstance, resources: (() => Promise<unknown>)[] = []): Promise<void> {
  // The product API's accept queue (daemons/api.ts), so a crowd connecting at once is treated alike.
  await app.listen({ port: Number(env('PORT')), host: '127.0.0.1', backlog: 4096 });
  process.send?.('ready');
  process.once('SIGTERM', () => {
    void (async () => {
      for (const close of [() => app.close(), ...resources]) await close().catch(() => {});
      process.exit(0);
    })();
  });
}
