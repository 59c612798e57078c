// `flashsale draw verify <saleId>`: recomputes a draw from Postgres alone and compares it with what
// was recorded. The seed must hash to the published seedSha256; every entry must be dated before
// the close; every ticket must be its buyer's (with its secret); the entries must be the ones the
// draw committed to when made (their count and digest, so none was dropped since); every stored
// drawRank must be the documented order's (shared/admission/draw/draw.ts); the winners must be exactly a prefix
// of that order, each with its rank's order id, and the sale's orders in Postgres must be those
// and no others, each its winner's, of one unit.
import type { Pool } from '../../runtime/db.js';
import { drawOrder, entriesDigest, seedHash, ticketOf } from './draw.js';
import { allEntries, readProgress } from './queries.js';
import { HttpError } from '../../runtime/errors.js';
import { drawOrderId } from '../../runtime/ids.js';
import { getSale } from '../../sales/sale.js';

export interface Verdict {
  ok: boolean;
  /** One line: what was checked, or the first mismatch. */
  line: string;
  entries: number;
  winners: number;
}

export async function verifyDraw(pool: Pool, saleId: string): Promise<Verdict> {
  const sale = await getSale(pool, saleId);
  if (!sale) throw new HttpError('sale_not_found', `No sale with id "${saleId}".`);
  if (sale.admission !== 'draw')
    throw new HttpError('not_a_draw', `Sale ${saleId} is not a draw (admission ${sale.admission}).`);
  const [progress, rows] = await Promise.all([readProgress(pool, saleId), allEntries(pool, saleId)]);
  const won = rows.filter((r) => r.status === 'won').sort((a, b) => a.draw_rank! - b.draw_rank!);
  const fail = (why: string): Verdict => ({
    ok: false,
    line: `draw ${saleId} MISMATCH: ${why}`,
    entries: rows.length,
    winners: won.length,
  });
  if (!progress.drawn) return fail('the draw has not been made yet');
  if (seedHash(sale.seed!) !== sale.seedSha256)
    return fail(`sha256(seed) is ${seedHash(sale.seed!)}, the published seedSha256 is ${sale.seedSha256}`);
  const close = sale.entriesCloseAt!;
  const late = rows.find((r) => r.late);
  if (late)
    return fail(
      `ticket ${late.ticket} was entered at ${late.entered_at.toISOString()}, at or after the close ${close.toISOString()}`,
    );
  for (const r of rows) {
    const ticket = ticketOf(saleId, r.buyer, r.secret);
    if (r.ticket !== ticket)
      return fail(
        `buyer ${JSON.stringify(r.buyer)} has ticket ${r.ticket}, not ${r.secret === null ? 'sha256(saleId:buyer)' : 'sha256(saleId:buyer:secret)'} = ${ticket}`,
      );
  }
  const ordered = drawOrder(
    sale.seed!,
    rows.map((r) => r.ticket),
  );
  const committed = progress.committed;
  // A draw made before commitments has none; one whose entries carry secrets was made after.
  if (!committed && rows.some((r) => r.secret !== null))
    return fail("the draw's commitment to its entries (drawn_entries, drawn_entries_sha256) is missing");
  if (committed && committed.entries !== rows.length)
    return fail(`the draw ranked ${committed.entries} entries, ${rows.length} are recorded now`);
  if (committed && committed.sha256 !== entriesDigest(ordered))
    return fail(
      `the entries recorded now hash to ${entriesDigest(ordered)}, not to the ${committed.sha256} committed when the draw was made`,
    );
  const expected = new Map(ordered.map((ticket, i) => [ticket, i + 1]));
  for (const r of rows) {
    if (r.draw_rank !== expected.get(r.ticket))
      return fail(`ticket ${r.ticket} has drawRank ${r.draw_rank}, the seed's order gives ${expected.get(r.ticket)}`);
  }
  for (const [i, r] of won.entries()) {
    if (r.draw_rank !== i + 1)
      return fail(`rank ${i + 1} has no order but rank ${r.draw_rank} has: winners must be the first ranks`);
    if (r.order_id !== drawOrderId(saleId, r.draw_rank))
      return fail(`rank ${r.draw_rank} holds order ${r.order_id}, not its rank's ${drawOrderId(saleId, r.draw_rank)}`);
  }
  if (progress.over && rows.some((r) => r.status === 'waiting'))
    return fail('backfill is over but entrants still wait');
  // A sale ended before backfillUntil may have ended its draw before every unit was given.
  const cutShort = sale.endsAt !== null && sale.endsAt < sale.backfillUntil!;
  if (progress.over && !cutShort && won.length < Math.min(sale.stock, rows.length))
    return fail(`only ${won.length} orders for ${sale.stock} units and ${rows.length} entries`);
  const buyerOf = new Map(won.map((r) => [r.order_id!, r.buyer]));
  const orders = await pool.query<{ id: string; user_id: string; qty: number }>(
    'select id, user_id, qty from orders where sale_id = $1',
    [saleId],
  );
  for (const o of orders.rows) {
    const buyer = buyerOf.get(o.id);
    if (buyer === undefined) return fail(`order ${o.id} of this sale was not given by the draw`);
    if (buyer !== o.user_id)
      return fail(
        `order ${o.id} belongs to ${JSON.stringify(o.user_id)}, the draw gave it to ${JSON.stringify(buyer)}`,
      );
    if (o.qty !== 1) return fail(`order ${o.id} is for ${o.qty} units, the draw gives 1`);
  }
  return {
    ok: true,
    entries: rows.length,
    winners: won.length,
    line: `draw ${saleId} verified: seed matches seedSha256, ${rows.length} entries${committed ? ' (as committed when drawn)' : ' (drawn before commitments)'}, all before the close, ranked as the seed orders them, ${won.length} winners are ranks 1-${won.length} with their orders${progress.over ? ', backfill over' : ''}`,
  };
}
