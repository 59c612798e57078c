// One delivery's request (docs/events.md): the endpoint's name resolved and checked, the
// connection made to the checked address, a POST on a kept-alive connection, and the status it
// answered. node:http never follows a redirect: a 3xx is a status like any other, a failure.
import { Agent as HttpAgent, type IncomingMessage, request as httpRequest, type RequestOptions } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { AddressRefused, checkedAddress, pinnedLookup, type Resolve, systemResolve } from './address.js';
import type { Outcome } from './deliveries.js';

export class Sender {
  // Kept alive: a busy endpoint is sent to over a few connections, not one per event.
  private readonly http = new HttpAgent({ keepAlive: true });
  private readonly https = new HttpsAgent({ keepAlive: true });

  constructor(
    private readonly allowPrivate: boolean,
    private readonly resolve: Resolve = systemResolve,
  ) {}

  /** POSTs `payload` to `url`; a 2xx within `timeoutMs` is success, anything else an error saying what. */
  async post(url: string, headers: Record<string, string>, payload: string, timeoutMs: number): Promise<Outcome> {
    const t0 = performance.now();
    const latency = () => Math.round(performance.now() - t0);
    const signal = AbortSignal.timeout(timeoutMs);
    try {
      const u = new URL(url);
      const pin = await checkedAddress(u.hostname, this.allowPrivate, this.resolve);
      signal.throwIfAborted();
      const https = u.protocol === 'https:';
      const options: RequestOptions = {
        method: 'POST',
        headers: { ...headers, 'content-length': String(Buffer.byteLength(payload)) },
        agent: https ? this.https : this.http,
        // The checked address, not a second DNS answer (which could be another, private one).
        lookup: pinnedLookup(pin),
        signal,
      };
      const res = await new Promise<IncomingMessage>((resolve, reject) => {
        const req = (https ? httpsRequest : httpRequest)(u, options, resolve);
        req.on('error', reject);
        req.end(payload);
      });
      // Read through, so the connection goes back to the pool; a body cut short is no concern of ours.
      res.on('error', () => {});
      res.resume();
      const status = res.statusCode ?? 0;
      const ok = status >= 200 && status < 300;
      return { status, latencyMs: latency(), error: ok ? null : `HTTP ${status}` };
    } catch (err) {
      if (err instanceof AddressRefused) return { status: null, latencyMs: latency(), error: err.message };
      const e = err as NodeJS.ErrnoException;
      const error = signal.aborted ? 'TimeoutError' : (e.code ?? e.name ?? 'error');
      return { status: null, latencyMs: latency(), error };
    }
  }

  close(): void {
    this.http.destroy();
    this.https.destroy();
  }
}
