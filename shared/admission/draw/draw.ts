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
// once it has passed entries_close_at, the admission loop gives the ranks in one transaction,
// then an order to each entrant in rank order while units are left (the first `stock` entrants);
// a unit that comes back (an order expired or cancelled) goes to the lowest rank still waiting,
// until backfillUntil. Then every entrant still waiting has lost. Each award's order id is derived
// from the sale and the rank (ids.ts drawOrderId). `flashsale draw verify` checks it all.
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

/** What a tick of the admission loop tells a draw's entry streams (DRAW_CHANNEL). */
export interface DrawTick {
  saleId: string;
  /** Ranks have been given. */
  drawn: boolean;
  entries: number;
  /** Every rank up to this one has been given an order (0: none yet). */
  through: number;
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
  entries: number;
}

/** The view of an entry as Postgres has it. */
export function entryView(
  saleId: string,
  row: { ticket: string; secret: string | null; status: EntryState; draw_rank: number | null; order_id: string | null },
  entries: number,
): EntryView {
  return {
    saleId,
    state: row.status,
    ticket: row.ticket,
    secret: row.secret,
    drawRank: row.draw_rank,
    orderId: row.order_id,
    entries,
  };
}

/**
 * The view of an entry of rank `rank` (null: not drawn when it was read) from a tick alone: awards
 * go in rank order, so the tick's `through` says whether this rank has its order, whose id is derived.
 * null: the rank is needed and unknown (read it again).
 */
export function viewFromTick(
  entry: { ticket: string; secret: string | null },
  rank: number | null,
  tick: DrawTick,
): EntryView | null {
  const base = { saleId: tick.saleId, ticket: entry.ticket, secret: entry.secret, entries: tick.entries };
  if (!tick.drawn) return { ...base, state: 'entered', drawRank: null, orderId: null };
  if (rank === null) return null;
  if (rank <= tick.through) return { ...base, state: 'won', drawRank: rank, orderId: drawOrderId(tick.saleId, rank) };
  return { ...base, state: tick.over ? 'lost' : 'waiting', drawRank: rank, orderId: null };
}
