// What the delivery's gauges show (flashsale_events_pending, _oldest_pending_seconds): per enabled
// endpoint, its deliveries not yet delivered and the age of the oldest one's event. A disabled
// endpoint's are left out: nothing is being tried for them (`flashsale events endpoint list` says why).
import type { Pool } from '../runtime/db.js';
import { metrics } from '../runtime/metrics.js';

export interface EndpointBacklog {
  endpoint: string;
  pending: number;
  oldestSeconds: number;
}

export async function backlog(pool: Pool): Promise<EndpointBacklog[]> {
  const res = await pool.query<EndpointBacklog>(
    `select ep.id as endpoint, count(d.event_id)::int as pending,
            coalesce(extract(epoch from now() - min(e.created_at)), 0)::float8 as "oldestSeconds"
     from endpoints ep
       left join deliveries d on d.endpoint_id = ep.id and d.status = 'pending'
       left join events e on e.id = d.event_id
     where ep.enabled group by ep.id order by ep.id`,
  );
  return res.rows;
}

/** Sets the gauges from the table; an endpoint no longer enabled drops out of them. */
export async function refreshGauges(pool: Pool): Promise<void> {
  const rows = await backlog(pool);
  metrics.eventsPending.reset();
  metrics.eventsOldestPending.reset();
  for (const r of rows) {
    metrics.eventsPending.set({ endpoint: r.endpoint }, r.pending);
    metrics.eventsOldestPending.set({ endpoint: r.endpoint }, Math.round(r.oldestSeconds));
  }
}
