// The delivery attempts kept for EVENTS_ATTEMPTS_RETENTION_DAYS (docs/events.md), then deleted by
// the delivery daemon in short batches, each its own statement: a backlog of millions never holds
// locks for long. Several daemons prune side by side: `skip locked` gives each other rows. The
// attempts of a delivery still pending are kept whatever their age, as they say why it is.
import type { Pool } from '../runtime/db.js';

export const PRUNE_BATCH = 1000;

/** Deletes up to `batch` attempts older than `days`; returns how many (fewer than `batch`: none left). */
export async function pruneAttempts(pool: Pool, days: number, batch = PRUNE_BATCH): Promise<number> {
  const res = await pool.query(
    `delete from delivery_attempts where id in (
       select a.id from delivery_attempts a
       where a.at < now() - make_interval(days => $1)
         and not exists (select 1 from deliveries d
           where d.event_id = a.event_id and d.endpoint_id = a.endpoint_id and d.status = 'pending')
       order by a.at limit $2 for update skip locked)`,
    [days, batch],
  );
  return res.rowCount ?? 0;
}
