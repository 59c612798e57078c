// A draw's rows in Postgres (draw_entries, and the sale's drawn_at and draw_over_at): the record of
// the draw. Every state change says what it expects; the draw and the awards run under the sale's
// row lock (shared/admission/draw/steps.ts), which an entry's insert shares, so no entry slips in after the
// ranks. Time is Postgres's now() throughout: entries and the draw are judged by the same clock.
import type { Pool, PoolClient } from '../../runtime/db.js';
import type { EntryRecord } from './draw.js';
import { drawWonFrom, lostEventsFrom } from '../../events/record.js';

type Db = Pool | PoolClient;

export interface EntryRow extends EntryRecord {
  buyer: string;
}

const ENTRY_COLUMNS = 'buyer, ticket, secret, status, draw_rank, order_id, variant, second_choice, sku';

/** Why an entry was refused, as the insert judged it by Postgres's clock. */
export type EntryRefusal = 'entries_not_open' | 'entries_closed' | 'ended';

/**
 * Enters `buyer` (idempotent: a second entry changes nothing) and answers the entry, in one
 * statement judged by Postgres's now(): an entry is taken only from entries_open_at until
 * entries_close_at and while the sale is not drawn. No API's clock decides, so an API whose clock
 * runs late cannot take an entry after the close. The insert reads the sale's row FOR SHARE: it
 * waits for a draw being made and then finds it drawn, or the draw waits for it. A buyer who had
 * entered gets their entry back, whenever they ask, with the choices it was made with.
 */
export async function insertEntry(
  db: Db,
  saleId: string,
  buyer: string,
  ticket: string,
  secret: string,
  choices: { variant: string; secondChoice: string | null } | null = null,
): Promise<EntryRow | EntryRefusal> {
  // On a conflict the insert returns nothing and the second branch, which cannot see a row this
  // statement inserted, finds the one entered before.
  const res = await db.query<{ opened: boolean; ended: boolean } & Partial<EntryRow>>(
    `with s as (
       select id, now() >= entries_open_at as opened,
              now() < entries_close_at and drawn_at is null as taking,
              -- Ended, or ended early (an end before the close): ending a draw also makes it, so it takes nothing.
              ends_at is not null and (now() >= ends_at or ends_at < entries_close_at) as ended
       from sales where id = $1 for share),
     ins as (
       insert into draw_entries (sale_id, buyer, ticket, secret, variant, second_choice)
       -- No choices: the sale's first variant (its one), set by the table's trigger (sql/0018).
       select id, $2, $3, $4, $5, $6 from s where opened and taking
       on conflict (sale_id, buyer) do nothing
       returning ${ENTRY_COLUMNS}),
     e as (
       select * from ins
       union all
       select ${ENTRY_COLUMNS} from draw_entries where sale_id = $1 and buyer = $2)
     select s.opened, s.ended, e.* from s left join e on true`,
    [saleId, buyer, ticket, secret, choices?.variant ?? null, choices?.secondChoice ?? null],
  );
  const row = res.rows[0];
  if (row?.buyer !== undefined && row.buyer !== null) return row as EntryRow;
  return row?.ended ? 'ended' : row?.opened === false ? 'entries_not_open' : 'entries_closed';
}

export async function entryOf(db: Db, saleId: string, buyer: string): Promise<EntryRow | null> {
  const res = await db.query<EntryRow>(`select ${ENTRY_COLUMNS} from draw_entries where sale_id = $1 and buyer = $2`, [
    saleId,
    buyer,
  ]);
  return res.rows[0] ?? null;
}

export async function countEntries(db: Db, saleId: string): Promise<number> {
  const res = await db.query<{ n: number }>('select count(*)::int as n from draw_entries where sale_id = $1', [saleId]);
  return res.rows[0]!.n;
}

/**
 * Takes the sale's row lock for the transaction (null when the sale is not a draw): the draw's
 * steps take turns, and an entry's insert (FOR SHARE) waits. NO KEY: the order writer's inserts
 * (FOR KEY SHARE on the sale) go on meanwhile. `closed`: entries have closed by Postgres's clock,
 * the one the entries' insert is judged by; `backfillOver`: backfillUntil has come, by that clock too.
 */
export async function lockDraw(
  client: PoolClient,
  saleId: string,
): Promise<{ drawn: boolean; over: boolean; closed: boolean; backfillOver: boolean } | null> {
  const res = await client.query<{
    drawn_at: Date | null;
    draw_over_at: Date | null;
    closed: boolean;
    backfill_over: boolean;
  }>(
    `select drawn_at, draw_over_at, now() >= entries_close_at and now() >= starts_at as closed, now() >= backfill_until as backfill_over
     from sales where id = $1 and admission = 'draw' for no key update`,
    [saleId],
  );
  const row = res.rows[0];
  return row
    ? {
        drawn: row.drawn_at !== null,
        over: row.draw_over_at !== null,
        closed: row.closed,
        backfillOver: row.backfill_over,
      }
    : null;
}

/** The entries not yet ranked (all of them, the first time). */
export async function unranked(client: PoolClient, saleId: string): Promise<{ buyer: string; ticket: string }[]> {
  return (
    await client.query<{ buyer: string; ticket: string }>(
      "select buyer, ticket from draw_entries where sale_id = $1 and status = 'entered'",
      [saleId],
    )
  ).rows;
}

/**
 * Gives the ranks and marks the sale drawn now (Postgres's clock), with what the draw commits to:
 * how many entries it ranked and `digest` of their tickets. Returns how many entries were ranked.
 */
export async function recordRanks(
  client: PoolClient,
  saleId: string,
  buyers: string[],
  ranks: number[],
  digest: string,
): Promise<number> {
  const res = await client.query(
    `update draw_entries d set status = 'waiting', draw_rank = u.rank
     from unnest($2::text[], $3::int[]) as u(buyer, rank)
     where d.sale_id = $1 and d.buyer = u.buyer and d.status = 'entered'`,
    [saleId, buyers, ranks],
  );
  await client.query(
    'update sales set drawn_at = now(), drawn_entries = $2, drawn_entries_sha256 = $3 where id = $1 and drawn_at is null',
    [saleId, buyers.length, digest],
  );
  return res.rowCount ?? 0;
}

/** An entrant waiting for a unit, with what they want. */
export interface Waiting {
  buyer: string;
  draw_rank: number;
  variant: string;
  second_choice: string | null;
}

/** The next entrants waiting for a unit after rank `after`, lowest rank first. */
export async function waitingAfter(db: Db, saleId: string, after: number, limit: number): Promise<Waiting[]> {
  return (
    await db.query<Waiting>(
      `select buyer, draw_rank, variant, second_choice from draw_entries
       where sale_id = $1 and status = 'waiting' and draw_rank > $2 order by draw_rank limit $3`,
      [saleId, after, limit],
    )
  ).rows;
}

/**
 * Records that rank `rank` holds order `orderId`, of variant `sku`, with its draw.won event in the
 * same statement; false if it was not waiting (already recorded: no second event).
 */
export async function recordWon(db: Db, saleId: string, rank: number, orderId: string, sku: string): Promise<boolean> {
  const res = await db.query<{ n: number }>(
    `with w as (
       update draw_entries set status = 'won', order_id = $3, sku = $4
       where sale_id = $1 and draw_rank = $2 and status = 'waiting' returning *),
     e as (${drawWonFrom('w')})
     select count(*)::int as n from w`,
    [saleId, rank, orderId, sku],
  );
  return res.rows[0]!.n === 1;
}

/**
 * The units of each variant the draw's stock has still to give (the stock less the entries won of
 * it), and whether anyone waiting wants one of them: while so, the award gives the stock alone, as
 * `awardWalk` recomputes it; a unit that came back waits for the backfill after it.
 */
export async function stockLeft(
  db: Db,
  saleId: string,
  stock: ReadonlyMap<string, number>,
): Promise<{ left: Map<string, number>; wanted: boolean }> {
  const won = await db.query<{ sku: string; n: number }>(
    "select sku, count(*)::int as n from draw_entries where sale_id = $1 and status = 'won' group by sku",
    [saleId],
  );
  const left = new Map(stock);
  for (const r of won.rows) left.set(r.sku, Math.max(0, (left.get(r.sku) ?? 0) - r.n));
  const open = [...left].filter(([, n]) => n > 0).map(([sku]) => sku);
  if (open.length === 0) return { left, wanted: false };
  const res = await db.query<{ wanted: boolean }>(
    `select exists(select 1 from draw_entries where sale_id = $1 and status = 'waiting'
       and (variant = any($2::text[]) or second_choice = any($2::text[]))) as wanted`,
    [saleId, open],
  );
  return { left, wanted: res.rows[0]!.wanted };
}

/** Backfill is over (or the sale ended): every entrant still waiting has lost, and the sale's draw is marked over now. */
export async function recordOver(client: PoolClient, saleId: string): Promise<number> {
  // Their draw.lost events in the same statement: one draws.lost row per 9,999 (record.ts).
  const res = await client.query<{ n: number }>(
    `with l as (update draw_entries set status = 'lost' where sale_id = $1 and status = 'waiting' returning *),
     e as (${lostEventsFrom('l')})
     select count(*)::int as n from l`,
    [saleId],
  );
  await client.query('update sales set draw_over_at = now() where id = $1 and draw_over_at is null', [saleId]);
  return res.rows[0]!.n;
}

export interface Progress {
  drawn: boolean;
  /** What the draw committed to when made (null before, and for a draw made before commitments). */
  committed: { entries: number; sha256: string } | null;
  over: boolean;
  entries: number;
  /** The highest rank given an order (awards go in rank order, so every rank below has one too); 0 none. */
  through: number;
  /** Entrants given a unit, per variant (sku -> count). */
  won: Record<string, number>;
  waiting: number;
  /** Postgres's clock (ms) at the read: the loop places the draw's times on it, not on its own. */
  dbNow: number;
}

export async function readProgress(db: Db, saleId: string): Promise<Progress> {
  const res = await db.query<
    Omit<Progress, 'committed'> & { drawn_entries: number | null; drawn_entries_sha256: string | null }
  >(
    `select s.drawn_at is not null as drawn, s.draw_over_at is not null as over, s.drawn_entries, s.drawn_entries_sha256,
            count(d.buyer)::int as entries,
            coalesce(max(d.draw_rank) filter (where d.status = 'won'), 0)::int as through,
            count(d.buyer) filter (where d.status = 'waiting')::int as waiting,
            (select coalesce(json_object_agg(w.sku, w.n), '{}') from (select sku, count(*)::int as n from draw_entries
               where sale_id = s.id and status = 'won' group by sku) w) as won,
            (extract(epoch from now()) * 1000)::float8 as "dbNow"
     from sales s left join draw_entries d on d.sale_id = s.id
     where s.id = $1 group by s.id`,
    [saleId],
  );
  const row = res.rows[0];
  if (!row)
    return {
      drawn: false,
      committed: null,
      over: false,
      entries: 0,
      through: 0,
      won: {},
      waiting: 0,
      dbNow: Date.now(),
    };
  const { drawn_entries: n, drawn_entries_sha256: sha256, ...rest } = row;
  return { ...rest, committed: n === null || sha256 === null ? null : { entries: n, sha256 } };
}

/**
 * Every entry of the sale, in draw order once drawn (then by ticket): the public record and `draw
 * verify`'s input. `late`: entered at or after the close, judged by Postgres in microseconds (a
 * Date keeps milliseconds, and an entry made in the close's last millisecond is on time).
 */
export async function allEntries(db: Db, saleId: string): Promise<(EntryRow & { entered_at: Date; late: boolean })[]> {
  return (
    await db.query<EntryRow & { entered_at: Date; late: boolean }>(
      `select e.buyer, e.ticket, e.secret, e.status, e.draw_rank, e.order_id, e.variant, e.second_choice, e.sku, e.entered_at,
              e.entered_at >= s.entries_close_at as late
       from draw_entries e join sales s on s.id = e.sale_id
       where e.sale_id = $1 order by e.draw_rank nulls last, e.ticket`,
      [saleId],
    )
  ).rows;
}
