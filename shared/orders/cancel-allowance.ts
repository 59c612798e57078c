// How many orders a buyer may cancel in one sale (MAX_CANCELS_PER_SALE): without a bound, a bot
// can hold stock for free by buying and cancelling in a loop, each cancel handing it its quota back.
//
// The count is the buyer's cancelled orders in Postgres, not a counter kept beside them. Postgres
// is the record of which cancel won (a cancel that loses to a payment, an expiry or the writer
// changes no row), so a count of rows can never disagree with it: a refused or lost cancel uses up
// nothing, a repeated one is one row, and it survives any process restart and a Redis failover. A
// Redis counter would have to be taken before Postgres decides and given back when it refuses, and
// a crash in between would leak or double it; it would also be one more per-buyer key per sale.
//
// Cancels are serialised per buyer and sale by a transaction-scoped advisory lock, taken before the
// count: the count and the cancelling write are then one decision across every API process, so
// concurrent cancels of different orders cannot all read "one left". Two buyers whose (sale, buyer)
// hashes collide only wait for each other. The index orders_user_newest finds a buyer's orders.
import { withTransaction, type Pool, type PoolClient } from '../runtime/db.js';
import { sqlState, TRANSITIONS } from './states.js';

/** The buyer has used up their cancels in this sale. */
export const CANCEL_LIMIT = Symbol('cancel_limit');

async function cancelled(db: Pool | PoolClient, saleId: string, userId: string): Promise<number> {
  const res = await db.query<{ n: number }>(
    `select count(*)::int as n from orders where user_id = $2 and sale_id = $1 and status = ${sqlState(TRANSITIONS.cancel.to)}`,
    [saleId, userId],
  );
  return res.rows[0]!.n;
}

/** Whether the buyer may still cancel in this sale, as of now (unlocked: a hint, for refusing before any write). */
export async function cancelsLeft(pool: Pool, saleId: string, userId: string, max: number): Promise<boolean> {
  return (await cancelled(pool, saleId, userId)) < max;
}

/**
 * Runs `cancel` (one conditional write that may make an order of this buyer cancelled) in a
 * transaction holding the buyer's lock for this sale, if the buyer has a cancel left; otherwise
 * writes nothing and returns CANCEL_LIMIT.
 */
export function withCancelAllowance<T>(
  pool: Pool,
  saleId: string,
  userId: string,
  max: number,
  cancel: (client: PoolClient) => Promise<T>,
): Promise<T | typeof CANCEL_LIMIT> {
  return withTransaction(pool, async (client) => {
    await client.query('select pg_advisory_xact_lock(hashtext($1), hashtext($2))', [saleId, userId]);
    // Read committed: this statement's snapshot is taken after the lock, so it sees every cancel
    // committed by whoever held the lock before.
    if ((await cancelled(client, saleId, userId)) >= max) return CANCEL_LIMIT;
    return cancel(client);
  });
}
