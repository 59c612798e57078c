// Cancellation: the buyer gives back an order that is pending or still queued. It becomes
// `cancelled` (final), and its stock and the buyer's quota come back at once through the same
// exactly-once restore as expiry (shared/orders/close.ts `restore`), recorded in restored_at; a crash in
// between is finished by the replay's sweep, as for an expired order.
//
// Postgres decides every race, by conditional writes on the order's one row:
// - pending: `pending -> cancelled` only inside the window, the mirror of payment (`pending ->
//   paid`, row locked) and of expiry (`pending -> expired` only past the deadline). Exactly one wins;
//   a payment that loses is refund_due, a cancel that loses answers 409.
// - still queued (reserved in Redis, no row yet): the API inserts the row itself, as cancelled. The
//   primary key decides against the writer: if the writer's insert came first, the order is pending
//   and cancelled as above; if the cancel came first, the writer's insert does nothing and it finds
//   the order cancelled (no expiry key is set for it). No Redis state has to say "cancelled", so a
//   writer stalled past its lease, holding an old view, cannot write the order as pending.
import type { RedisClient } from '../redis/connect.js';
import type { Pool } from '../runtime/db.js';
import { CANCEL_LIMIT, cancelsLeft, withCancelAllowance } from './cancel-allowance.js';
import { HttpError } from '../runtime/errors.js';
import { withOrderEvent } from '../events/record.js';
import { finishClosed } from './close.js';
import { cancelPending, findOrder, insertCancelled, settledOrder, type ClosedOrder, type OrderRow } from './queries.js';
import { allows, TRANSITIONS } from './states.js';
import { checkOrderId, queuedOrder } from './view.js';
import { dropExpiry, markCancelling, unmarkCancelling } from './scripts.js';
import { confirmReplicated, type ReplicaAcks } from '../redis/replication.js';

export interface Cancelled {
  orderId: string;
  status: 'cancelled';
}

/**
 * Cancels the buyer's order (pending or queued); cancelling it again answers the same. Another
 * buyer's order is not found. At most `maxCancels` orders per buyer and sale. `acks`: what the
 * replicas must confirm first (REDIS_MIN_REPLICAS_ACK), where set.
 */
export async function cancelOrder(
  pool: Pool,
  redis: RedisClient,
  orderId: string,
  userId: string,
  maxCancels: number,
  acks?: ReplicaAcks,
): Promise<Cancelled> {
  const saleId = checkOrderId(orderId);
  let row = await findOrder(pool, orderId);
  if (!row) {
    const closed = await cancelQueued(pool, redis, saleId, orderId, userId, maxCancels, acks);
    if (closed) return giveBack(pool, redis, closed, acks);
    // The writer's row came first, or the order was written meanwhile (the writer forgets a queued
    // entry only after its row is committed): Postgres has it now, or there is no such order.
    row = await findOrder(pool, orderId);
  }
  if (row?.user_id !== userId) throw new HttpError('order_not_found');
  return cancelWritten(pool, redis, row, maxCancels, acks);
}

/** A queued order of this buyer written as cancelled; undefined when it is not queued for them or the writer's row came first. */
async function cancelQueued(
  pool: Pool,
  redis: RedisClient,
  saleId: string,
  orderId: string,
  userId: string,
  maxCancels: number,
  acks: ReplicaAcks | undefined,
): Promise<ClosedOrder | undefined> {
  // A buyer at the limit is refused before cancel.lua writes its note, so nothing changes; unless
  // this very order is already cancelled (its row is in Postgres, its queued entry not yet gone).
  if (!(await cancelsLeft(pool, saleId, userId, maxCancels))) return refuseQueued(pool, redis, saleId, orderId, userId);
  const winner = await markCancelling(redis, saleId, orderId, userId);
  if (!winner) return undefined;
  // The reservation must be on the replicas before Postgres records the order (see cancel.lua).
  await confirmReplicated(acks, [saleId]);
  const closed = await withCancelAllowance(
    pool,
    saleId,
    userId,
    maxCancels,
    withOrderEvent('order.cancelled', (client) => insertCancelled(client, saleId, winner)),
  );
  if (closed !== CANCEL_LIMIT) return closed;
  // A concurrent cancel used the last one up. The count never falls, so no cancel of this order can
  // win after this: its note goes, and the order stays queued (or pending, if written meanwhile).
  await unmarkCancelling(redis, saleId, orderId);
  return refuseQueued(pool, redis, saleId, orderId, userId);
}

/** The buyer has no cancel left: 409 cancel_limit for their queued order; undefined once it is written (the caller answers from the row). */
async function refuseQueued(
  pool: Pool,
  redis: RedisClient,
  saleId: string,
  orderId: string,
  userId: string,
): Promise<undefined> {
  // Redis first: the writer forgets a queued entry only after its row is committed.
  if ((await queuedOrder(redis, saleId, orderId, userId)) && !(await findOrder(pool, orderId)))
    throw new HttpError('cancel_limit');
  return undefined;
}

async function cancelWritten(
  pool: Pool,
  redis: RedisClient,
  row: OrderRow,
  maxCancels: number,
  acks: ReplicaAcks | undefined,
): Promise<Cancelled> {
  if (allows('cancel', row.status)) {
    const closed = await withCancelAllowance(
      pool,
      row.sale_id,
      row.user_id,
      maxCancels,
      withOrderEvent('order.cancelled', (client) => cancelPending(client, row.id, row.user_id)),
    );
    if (closed && closed !== CANCEL_LIMIT) {
      // Best effort: a key left behind fires an event that finds the order closed and does nothing.
      await dropExpiry(redis, closed.saleId, closed.id).catch(() => {});
      return giveBack(pool, redis, closed, acks);
    }
    // A payment, an expiry or another cancel decided first (or the deadline has passed): say which,
    // once a payment that took the row before the deadline has committed. Still open, it was the limit.
    row = (await settledOrder(pool, row.id))!;
    if (closed === CANCEL_LIMIT && allows('cancel', row.status) && !row.due) throw new HttpError('cancel_limit');
  }
  switch (row.status) {
    case 'cancelled':
      return { orderId: row.id, status: 'cancelled' };
    case 'paid':
      throw new HttpError('order_paid');
    default:
      throw new HttpError('order_expired');
  }
}

async function giveBack(
  pool: Pool,
  redis: RedisClient,
  closed: ClosedOrder,
  acks: ReplicaAcks | undefined,
): Promise<Cancelled> {
  await finishClosed(pool, redis, [closed], 'cancel', TRANSITIONS.cancel.to, acks);
  return { orderId: closed.id, status: 'cancelled' };
}
