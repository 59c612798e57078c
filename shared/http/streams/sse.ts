// How the event streams (routes/order-events.ts; routes/room-events.ts and routes/draw-events.ts through feed-stream.ts) take their token and start their answer: headers, the
// load-shedding slot given back (a stream is no request in flight), a heartbeat comment, and one
// end that clears it all. Their caps are shared/http/streams/slots.ts.
import type { FastifyReply } from 'fastify';
import type { ServerResponse } from 'node:http';
import { refusal } from '../plugins/errors.js';
import { releaseSlot } from '../plugins/load-shedding.js';

/** An event stream's query: the token alone, for EventSource, which cannot send Authorization (url-token.ts takes it from there). */
export const streamQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    access_token: {
      type: 'string',
      minLength: 1,
      description: 'the buyer token, for clients that cannot send Authorization',
      ...refusal('bad_request', 'access_token must be a token.'),
    },
  },
  ...refusal('bad_request', 'The query takes access_token only.', 'Unknown query parameter(s): {fields}.'),
};

/** A comment line this often keeps proxies from closing a quiet stream. */
export const HEARTBEAT_MS = 15_000;

/**
 * Turns the reply into an event stream registered in `open` (a shutdown ends each). `onEnd` runs
 * once, whoever ends it: the client leaving, the route, or the shutdown.
 */
export function startStream(
  reply: FastifyReply,
  open: Set<() => void>,
  onEnd: () => void,
  onHeartbeat?: () => void,
): { res: ServerResponse; end: () => void } {
  reply.hijack();
  const res = reply.raw;
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-store',
    'x-accel-buffering': 'no',
  });
  releaseSlot(reply);
  const heartbeat = setInterval(() => {
    res.write(': heartbeat\n\n');
    onHeartbeat?.();
  }, HEARTBEAT_MS).unref();
  const end = () => {
    if (!open.delete(end)) return;
    clearInterval(heartbeat);
    onEnd();
    res.end();
  };
  open.add(end);
  res.once('close', end);
  return { res, end };
}
