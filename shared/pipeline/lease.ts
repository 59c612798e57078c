// Writers' leases: a writer holds its batch in its own processing list under a lease it renews with
// every claim. Once the lease has run out the writer is taken for dead and its batch goes back to
// the winners list whole (recover_writer.lua); inserts are idempotent, so a batch written twice is
// still one order each. The writer and the replay both re-drive.
import type { RedisClient } from '../redis/connect.js';
import { saleKeys } from '../redis/keys.js';
import { recoverWriter } from './writer-scripts.js';

/**
 * Moves the batches of writers whose lease ran out (all but `except`) back to the winners lists.
 * Run out by Redis's clock, as claim.lua set them: recover_writer.lua judges each writer, so a
 * process whose own clock runs ahead never takes a live writer's batch.
 */
export async function recoverDeadWriters(redis: RedisClient, saleIds: string[], except?: string): Promise<number> {
  let moved = 0;
  for (const saleId of saleIds) {
    const writers = await redis.zrange(saleKeys(saleId).writers, '0', '-1');
    for (const writerId of writers) {
      if (writerId !== except) moved += await recoverWriter(redis, saleId, writerId);
    }
  }
  return moved;
}
