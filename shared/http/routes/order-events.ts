// GET /api/orders/:orderId/events: the owner's order as Server-Sent Events. The first event is the
// order as GET /api/orders/:orderId shows it, then one per transition (queued -> pending_payment ->
// paid | expired | cancelled) as shared/orders/events.ts hands them over; after a final state the
// stream ends. Polling GET /api/orders/:orderId works as before.
import type { FastifyPluginCallback } from 'fastify';
import type { RedisClient } from '../../redis/connect.js';
import type { Auth } from '../../buyers/auth.js';
import type { Config } from '../../config/index.js';
import type { Pool } from '../../runtime/db.js';
import type { Logger } from '../../runtime/logger.js';
import { OrderFeed, type OrderEvent } from '../../orders/events.js';
import { getOrder, type OrderStatus, type OrderView } from '../../orders/view.js';
import { errorResponses, SECURITY, textResponse } from '../schemas.js';
import { startStream, streamQuery } from '../streams/sse.js';
import { tokenFromQuery } from '../url-token.js';
import { orderIdParams } from './orders.js';

/** A pending order this long past its deadline with no news is read again (its close was missed, or not made yet). */
const OVERDUE_GRACE_MS = 2000;
const RANK: Record<OrderStatus, number> = { queued: 0, pending_payment: 1, paid: 2, expired: 2, cancelled: 2 };
const FINAL = 2;

const schema = {
  summary:
    "The buyer's order as Server-Sent Events: its state now, then each transition; the stream ends after paid, expired or cancelled",
  description:
    "Each event's data is the order as GET /api/orders/:orderId shows it. A comment line comes every 15 s. " +
    "Browsers' EventSource cannot send headers: the token may come as ?access_token= on this route only.",
  tags: ['orders'],
  security: SECURITY.buyer,
  params: orderIdParams,
  querystring: streamQuery,
  response: {
    200: textResponse(
      'text/event-stream',
      'the order\'s events: `data: {"orderId", "saleId", "qty", "status", "expiresAt"?}`',
    ),
    ...errorResponses('invalid_id', 'bad_request', 'unauthorized', 'order_not_found', 'busy', 'unavailable'),
  },
};

type Stream = { Params: { orderId: string }; Querystring: { access_token?: string } };

export const orderEvents: FastifyPluginCallback<{
  pool: Pool;
  redis: RedisClient;
  auth: Auth;
  limits: Pick<Config, 'sseMaxStreams' | 'sseMaxStreamsPerBuyer'>;
  logger: Logger;
}> = (app, { pool, redis, auth, limits, logger }, done) => {
  const feed = new OrderFeed(redis, limits, logger);
  /** How to end each open stream, for a shutdown: the server cannot close while one is open. */
  const open = new Set<() => void>();
  app.addHook('preClose', (next) => {
    for (const end of [...open]) end();
    next();
  });
  app.addHook('onClose', () => feed.close());

  app.get<Stream>(
    '/api/orders/:orderId/events',
    { onRequest: tokenFromQuery, preValidation: auth.buyer, schema },
    async (req, reply) => {
      const { orderId } = req.params;
      const buyer = req.buyer.id;
      // Joined before the order is read: a transition published meanwhile waits here, not lost.
      const early: (OrderEvent | null)[] = [];
      let deliver: (e: OrderEvent | null) => void = (e) => void early.push(e);
      const leave = await feed.join(orderId, buyer, (e) => deliver(e));
      let first: OrderView;
      try {
        first = await getOrder(pool, redis, orderId, buyer);
      } catch (err) {
        leave();
        throw err;
      }

      let sent: OrderView | undefined;
      let reading = false;
      // A queued order is written within milliseconds, a pending one closed at its deadline: one
      // still showing either at a heartbeat is read again, in case its message was lost with a crashed producer.
      const { res, end } = startStream(reply, open, leave, () => {
        if (
          sent?.status === 'queued' ||
          (sent?.status === 'pending_payment' && Date.now() > Date.parse(sent.expiresAt!) + OVERDUE_GRACE_MS)
        )
          reread();
      });
      // Transitions only go forward: an older state read or published late is never sent.
      const send = (view: OrderView) => {
        if (!open.has(end) || (sent && RANK[view.status] <= RANK[sent.status])) return;
        sent = view;
        res.write(`data: ${JSON.stringify(view)}\n\n`);
        if (RANK[view.status] === FINAL) end();
      };
      const reread = () => {
        if (reading || !open.has(end)) return;
        reading = true;
        getOrder(pool, redis, orderId, buyer)
          .then(send, () => {})
          .finally(() => (reading = false));
      };
      const { saleId, qty } = first;
      deliver = (e) => {
        if (e)
          send({
            orderId,
            saleId,
            qty,
            status: e.status,
            ...(e.status === 'pending_payment' && e.expiresAt ? { expiresAt: e.expiresAt } : {}),
          });
        else reread();
      };
      send(first);
      for (const e of early.splice(0)) deliver(e);
      // Gone while its order was read: its 'close' has fired already.
      if (res.destroyed) end();
    },
  );
  done();
};
