// `flashsale draw verify <saleId>`: recomputes a draw from Postgres alone and compares it with what
// was recorded. The seed must hash to the published seedSha256; every entry must be dated before
// the close; every ticket must be its buyer's (with its secret); the entries must be the ones the
// draw committed to when made (their count and digest, so none was dropped since); every stored
// drawRank must be the documented order's (shared/admission/draw/draw.ts). The award is recomputed
// per variant (awardWalk over the ranks with each variant's stock): those it gives must hold
// exactly that variant, given in rank order; a unit given beyond them (backfill) only once they
// all were, of a variant its entrant wants, never past an entrant without one who wants it too,
// and no more of a variant than its orders that came back. Every winner holds its rank's order
// id, and the sale's orders in Postgres must be those and no others, each its winner's, of one
// unit of its variant.
import type { Pool } from '../../runtime/db.js';
import { awardWalk, drawOrder, entriesDigest, seedHash, ticketOf } from './draw.js';
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
  const stock = new Map(sale.variants.map((v) => [v.sku, v.stock]));
  for (const r of rows)
    for (const sku of [r.variant, r.second_choice])
      if (sku !== null && !stock.has(sku))
        return fail(`ticket ${r.ticket} wants variant ${sku}, which the sale does not sell`);
  const byRank = [...rows].sort((a, b) => a.draw_rank! - b.draw_rank!);
  const fromStock = awardWalk(
    byRank.map((r) => ({ variant: r.variant, secondChoice: r.second_choice })),
    stock,
  );
  // The stock's units go in rank order: once one of them is not given, none after it is.
  let notGiven: number | null = null;
  const backfilled = new Map<string, number>();
  for (const [i, r] of byRank.entries()) {
    const expected = fromStock[i];
    const won = r.status === 'won';
    if (won && r.order_id !== drawOrderId(saleId, r.draw_rank!))
      return fail(`rank ${r.draw_rank} holds order ${r.order_id}, not its rank's ${drawOrderId(saleId, r.draw_rank!)}`);
    if (expected === null) {
      if (won) backfilled.set(r.sku!, (backfilled.get(r.sku!) ?? 0) + 1);
      continue;
    }
    if (!won) notGiven ??= r.draw_rank;
    else if (notGiven !== null)
      return fail(`rank ${r.draw_rank} holds a unit of the stock, but rank ${notGiven} before it has none`);
    else if (r.sku !== expected)
      return fail(`rank ${r.draw_rank} was given variant ${r.sku}, the recomputed award gives it ${expected}`);
  }
  if (backfilled.size > 0 && notGiven !== null)
    return fail(`units came back to later ranks while rank ${notGiven} still had the stock's unit to come`);
  // A unit that came back goes to the lowest rank without one that wants its variant.
  const firstWithout = new Map<string, number>();
  for (const r of byRank)
    if (r.status !== 'won')
      for (const sku of [r.variant, r.second_choice])
        if (sku !== null && !firstWithout.has(sku)) firstWithout.set(sku, r.draw_rank!);
  for (const [i, r] of byRank.entries()) {
    if (r.status !== 'won' || fromStock[i] !== null) continue;
    if (r.sku !== r.variant && r.sku !== r.second_choice)
      return fail(`rank ${r.draw_rank} was given variant ${r.sku}, which its entry does not want`);
    const before = firstWithout.get(r.sku!);
    if (before !== undefined && before < r.draw_rank!)
      return fail(
        `rank ${r.draw_rank} was given a unit of ${r.sku} that came back, but rank ${before} before it wants ${r.sku} and has none`,
      );
  }
  if (progress.over && rows.some((r) => r.status === 'waiting'))
    return fail('backfill is over but entrants still wait');
  // A sale ended before backfillUntil may have ended its draw before every unit was given.
  const cutShort = sale.endsAt !== null && sale.endsAt < sale.backfillUntil!;
  if (progress.over && !cutShort && notGiven !== null)
    return fail(`rank ${notGiven} was never given the unit of the stock the award gives it`);
  const winnerOf = new Map(won.map((r) => [r.order_id!, r]));
  const orders = await pool.query<{ id: string; user_id: string; qty: number; sku: string; back: boolean }>(
    "select id, user_id, qty, sku, status in ('expired', 'cancelled') as back from orders where sale_id = $1",
    [saleId],
  );
  const cameBack = new Map<string, number>();
  for (const o of orders.rows) {
    const winner = winnerOf.get(o.id);
    if (winner === undefined) return fail(`order ${o.id} of this sale was not given by the draw`);
    if (winner.buyer !== o.user_id)
      return fail(
        `order ${o.id} belongs to ${JSON.stringify(o.user_id)}, the draw gave it to ${JSON.stringify(winner.buyer)}`,
      );
    if (o.qty !== 1) return fail(`order ${o.id} is for ${o.qty} units, the draw gives 1`);
    if (o.sku !== winner.sku) return fail(`order ${o.id} is of variant ${o.sku}, the draw gave variant ${winner.sku}`);
    if (o.back) cameBack.set(o.sku, (cameBack.get(o.sku) ?? 0) + 1);
  }
  // An order is closed in Postgres before its unit goes back in Redis (orders/close.ts): a unit
  // given beyond the stock is one of those.
  for (const [sku, n] of backfilled)
    if (n > (cameBack.get(sku) ?? 0))
      return fail(
        `${n} units of ${sku} were given beyond the stock, but only ${cameBack.get(sku) ?? 0} of its orders came back`,
      );
  return {
    ok: true,
    entries: rows.length,
    winners: won.length,
    line: `draw ${saleId} verified: seed matches seedSha256, ${rows.length} entries${committed ? ' (as committed when drawn)' : ' (drawn before commitments)'}, all before the close, ranked as the seed orders them, ${won.length} winners${sale.variants.length > 1 ? ` over ${sale.variants.length} variants` : ''} as the award per variant gives them, with their orders${progress.over ? ', backfill over' : ''}`,
  };
}
