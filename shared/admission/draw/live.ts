// A draw's figures for the operator (GET /api/sales/:saleId/live, `draw`): how many entered, whether
// and when the draw was made, and what became of the entrants. One query on Postgres, the record
// of the draw (Redis holds only a copy of the entries, for counting).
import type { Pool } from '../../runtime/db.js';
import { count, figuresSchema } from '../../http/schema-parts.js';

const FIGURES = {
  entries: count('entries in the draw'),
  drawn: { type: 'boolean', description: 'the ranks have been given' },
  drawnAt: { type: 'string', format: 'date-time', nullable: true, description: 'when the draw was made; null before' },
  awarded: count('entrants handed an order: the first `stock` ranks, then those backfill reached'),
  waiting: count('drawn, no order yet: next in line for a unit that comes back until backfillUntil'),
  lost: count('still waiting when backfill ended'),
  over: { type: 'boolean', description: 'backfill is over: nothing changes any more' },
};

/** DrawFigures as the live view's schema shows them. */
export const drawFiguresSchema = figuresSchema(
  'the draw (admission: draw), read from Postgres in one query; null for other sales',
  FIGURES,
);

export interface DrawFigures {
  /** Entries in the draw (draw_entries). */
  entries: number;
  /** The ranks have been given. */
  drawn: boolean;
  /** When the draw was made (ISO 8601); null before. */
  drawnAt: string | null;
  /** Entrants handed an order: the first `stock` ranks, then those backfill reached. */
  awarded: number;
  /** Drawn, no order yet: a unit that comes back goes to the lowest rank until backfillUntil. */
  waiting: number;
  /** Still waiting when backfill ended. */
  lost: number;
  /** Backfill is over: nothing changes any more. */
  over: boolean;
}

export async function drawFigures(pool: Pool, saleId: string): Promise<DrawFigures> {
  const res = await pool.query<{
    drawn_at: Date | null;
    over: boolean;
    entries: number;
    awarded: number;
    waiting: number;
    lost: number;
  }>(
    `select s.drawn_at, s.draw_over_at is not null as over,
            count(d.buyer)::int as entries,
            count(d.buyer) filter (where d.status = 'won')::int as awarded,
            count(d.buyer) filter (where d.status = 'waiting')::int as waiting,
            count(d.buyer) filter (where d.status = 'lost')::int as lost
     from sales s left join draw_entries d on d.sale_id = s.id
     where s.id = $1 group by s.id`,
    [saleId],
  );
  const row = res.rows[0];
  if (!row) return { entries: 0, drawn: false, drawnAt: null, awarded: 0, waiting: 0, lost: 0, over: false };
  return {
    entries: row.entries,
    drawn: row.drawn_at !== null,
    drawnAt: row.drawn_at?.toISOString() ?? null,
    awarded: row.awarded,
    waiting: row.waiting,
    lost: row.lost,
    over: row.over,
  };
}
