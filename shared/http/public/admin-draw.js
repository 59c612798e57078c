// A draw's entrants in the live view, as Postgres records them (GET .../live's `draw`, its panel `draw`).
import { when } from './admin-sales.js';
import { setText } from './admin-session.js';

export const drawLive = {
  key: 'draw',
  render(draw, sale) {
    setText('draw-entries', String(draw.entries));
    setText('draw-made', draw.drawn ? `drawn ${when(draw.drawnAt)}` : `draw at ${when(sale.entriesCloseAt)}`);
    setText('draw-awarded', String(draw.awarded));
    setText('draw-waiting', String(draw.waiting));
    setText(
      'draw-backfill',
      draw.over ? 'backfill over' : draw.drawn ? `next in line until ${when(sale.backfillUntil)}` : 'not drawn yet',
    );
    setText('draw-lost', String(draw.lost));
  },
};
