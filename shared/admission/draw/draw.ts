// A draw (admission 'draw'), the algorithm anyone can recompute from what GET /api/sales/:saleId/draw
// publishes (the seed once the draw is made, every entry's ticket):
//
//   ticket(entry)  = hex(sha256(saleId + ':' + buyer + ':' + secret))  what the list shows instead of the buyer
//                    secret: 64 hex digits drawn at entry, told to the entrant only, so a ticket
//                    does not tell whether a known buyer entered; each entrant checks their own.
//                    Entries made before secrets (secret null) keep hex(sha256(saleId + ':' + buyer)).
//   key(ticket)    = hex(sha256(seed + ':' + ticket))              seed: the 64 lower-case hex digits published
//   draw order     = the tickets sorted by key ascending, as lower-case hex strings (a tie, which
//                    sha256 makes impossible in practice, is broken by the ticket, ascending)
//   drawRank       = 1 + the ticket's position in that order
//   drawnEntriesSha256 = hex(sha256(the tickets in draw order joined by ':')), with drawnEntries, their
//                    count: stored when the draw is made, so no entry can be dropped afterwards
//
// sha256(seed) is published from the sale's creation, so the seed cannot be chosen after the
// entries are known, and the seed itself only once the draw is made (drawn_at, in Postgres), so
// nobody holds it while entries are taken. Entries are judged by Postgres's now() in their insert;
// once it has passed entries_close_at, the admission loop gives the ranks in one transaction.
// An entry names the variant wanted and optionally a second choice; the ranking reads neither.
//   award          = walk the ranks in order, each variant starting with its stock: an entrant gets a
//                    unit of their variant if it has one left, else of their second choice if it
//                    has, else none (awardWalk); on a sale of one variant, the first `stock` ranks
// A unit that comes back (an order expired or cancelled), once the stock is given, goes to the
// lowest rank still waiting that wants its variant (first or second choice), until backfillUntil.
// Then every entrant still waiting has lost. Each award's order id is derived from the sale and
// the rank (ids.ts drawOrderId). `flashsale draw verify` checks it all, per variant.
import { createHash, randomBytes } from 'node:crypto';
import { drawOrderId } from '../../runtime/ids.js';

export const ENTRY_STATES = ['entered', 'won', 'waiting', 'lost'] as const;
export type EntryState = (typeof ENTRY_STATES)[number];

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** An entry's ticket: with its secret, or (an entry made before secrets) without. */
export const ticketOf = (saleId: string, buyer: string, secret: string | null): string =>
  sha256(secret === null ? `${saleId}:${buyer}` : `${saleId}:${buyer}:${secret}`);

/** A new entry's secret: 64 hex digits. */
export const newSecret = (): string => randomBytes(32).toString('hex');

export const drawKey = (seed: string, ticket: string): string => sha256(`${seed}:${ticket}`);

export const seedHash = (seed: string): string => sha256(seed);

/**
 * What the draw commits to when it is made, stored on the sale and published: sha256 of the
 * tickets in draw order joined by ':' (with their count beside it). An entry deleted later no
 * longer adds up.
 */
export const entriesDigest = (ordered: readonly string[]): string => sha256(ordered.join(':'));

/** The tickets in draw order: index i holds drawRank i + 1. */
export function drawOrder(seed: string, tickets: readonly string[]): string[] {
  const keyed = tickets.map((ticket) => ({ ticket, key: drawKey(seed, ticket) }));
  keyed.sort((a, b) =>
    a.key < b.key ? -1 : a.key > b.key ? 1 : a.ticket < b.ticket ? -1 : a.ticket > b.ticket ? 1 : 0,
  );
  return keyed.map((k) => k.ticket);
}

/** What an entrant wants: a variant, and the one taken when it has none left. */
export interface Choices {
  variant: string;
  secondChoice: string | null;
}

/** The variant an entrant is given from `units` (sku -> units left), taken from it; null: neither choice has one. */
export function pick(want: Choices, units: Map<string, number>): string | null {
  for (const sku of [want.variant, want.secondChoice]) {
    if (sku === null || !((units.get(sku) ?? 0) > 0)) continue;
    units.set(sku, units.get(sku)! - 1);
    return sku;
  }
  return null;
}

/** The award of the stock (sku -> units) to entrants in rank order: each one's variant, or null. */
export function awardWalk(ranked: readonly Choices[], stock: ReadonlyMap<string, number>): (string | null)[] {
  const units = new Map(stock);
  return ranked.map((want) => pick(want, units));
}

/** What a tick of the admission loop tells a draw's entry streams (DRAW_CHANNEL). */
export interface DrawTick {
  saleId: string;
  /** Ranks have been given. */
  drawn: boolean;
  entries: number;
  /** The highest rank given an order (0: none yet): on a sale of one variant, every rank below has one too. */
  through: number;
  /** A sale of several variants: entrants given a unit, per variant (sku -> count); absent on a sale of one. */
  won?: Record<string, number>;
  /** Backfill is over: every entrant without an order has lost. */
  over: boolean;
  at: number;
}

/** What a buyer is shown (POST .../entries, GET .../entries/me, each stream event). */
export interface EntryView {
  saleId: string;
  state: EntryState;
  ticket: string;
  /** The entry's secret (null for an entry made before secrets): shown to its buyer only. */
  secret: string | null;
  drawRank: number | null;
  orderId: string | null;
  /** The variant wanted (its sku), and the one taken when it has none left (null: none). */
  variant: string;
  secondChoice: string | null;
  /** With won: the variant of the unit given. */
  sku: string | null;
  entries: number;
}

/** An entry as Postgres has it (draw_entries, less the buyer). */
export interface EntryRecord {
  ticket: string;
  secret: string | null;
  status: EntryState;
  draw_rank: number | null;
  order_id: string | null;
  /** The variant wanted (its sku), and the one taken when it has none left (null: none). */
  variant: string;
  second_choice: string | null;
  /** With won: the variant of the unit given. */
  sku: string | null;
}

/** The view of an entry as Postgres has it. */
export function entryView(saleId: string, row: EntryRecord, entries: number): EntryView {
  return {
    saleId,
    state: row.status,
    ticket: row.ticket,
    secret: row.secret,
    drawRank: row.draw_rank,
    orderId: row.order_id,
    variant: row.variant,
    secondChoice: row.second_choice,
    sku: row.sku,
    entries,
  };
}

/** What an entry stream knows of its entry between reads of Postgres. */
export type StreamEntry = Pick<EntryView, 'ticket' | 'secret' | 'variant' | 'secondChoice'>;

/**
 * The view of an entry of rank `rank` (null: not drawn when it was read) from a tick alone. On a
 * sale of one variant awards go in rank order, so the tick's `through` says whether this rank has
 * its order, whose id is derived. On a sale of several, a tick tells only how many units of each
 * variant were given: `seen` is that count for this entry's choices at its last read, and a change
 * means its state may have too. null: the rank is needed and unknown, or the state may have changed
 * (read it again).
 */
export function viewFromTick(entry: StreamEntry, rank: number | null, tick: DrawTick, seen?: string): EntryView | null {
  const base = { saleId: tick.saleId, ...entry, entries: tick.entries };
  if (!tick.drawn) return { ...base, state: 'entered', drawRank: null, orderId: null, sku: null };
  if (rank === null) return null;
  if (tick.won) {
    if (seen !== wonMark(entry, tick)) return null;
  } else if (rank <= tick.through) {
    return { ...base, state: 'won', drawRank: rank, orderId: drawOrderId(tick.saleId, rank), sku: entry.variant };
  }
  return { ...base, state: tick.over ? 'lost' : 'waiting', drawRank: rank, orderId: null, sku: null };
}

/** A tick's units given of an entry's choices: what viewFromTick compares. */
export const wonMark = (entry: Choices, tick: DrawTick): string =>
  `${tick.won?.[entry.variant] ?? 0}:${entry.secondChoice === null ? '' : (tick.won?.[entry.secondChoice] ?? 0)}`;
