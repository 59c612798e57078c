// GET /api/sales/:saleId/draw (public): everything an outsider needs to recompute a draw, read from
// Postgres (the record of the draw). One read per sale per RECORD_TTL_MS in this process, whatever
// the crowd: the answer holds every ticket.
import type { FastifyPluginCallback } from 'fastify';
import type { Pool } from '../../../runtime/db.js';
import { allEntries, readProgress } from '../../../admission/draw/queries.js';
import type { Sale } from '../../../sales/model.js';
import { errorResponses, saleIdParams } from '../../schemas.js';
import { drawSale, type DrawDeps } from './draw.js';

const RECORD_TTL_MS = 1000;
const MAX_HELD = 256;

export interface DrawRecord {
  saleId: string;
  seedSha256: string;
  seed: string | null;
  entriesCloseAt: string;
  backfillUntil: string;
  entries: number;
  drawn: boolean;
  /** What the draw committed to when made: the entries it ranked and the digest of their tickets in draw order. */
  drawnEntries: number | null;
  drawnEntriesSha256: string | null;
  tickets: string[];
  /** Each ticket's choices, in the order of `tickets`. */
  choices: { ticket: string; variant: string; secondChoice: string | null }[];
  /** The stock the award walks, per variant. */
  stock: { sku: string; units: number }[];
  winners: { ticket: string; drawRank: number; orderId: string; sku: string }[];
}

const hex64 = { type: 'string', pattern: '^[0-9a-f]{64}$' };

const recordSchema = {
  description: "the draw's public record",
  type: 'object',
  required: [
    'saleId',
    'seedSha256',
    'seed',
    'entriesCloseAt',
    'backfillUntil',
    'entries',
    'drawn',
    'drawnEntries',
    'drawnEntriesSha256',
    'tickets',
    'choices',
    'stock',
    'winners',
  ],
  properties: {
    saleId: { type: 'string' },
    seedSha256: { ...hex64, description: "sha256(seed) in hex, published from the sale's creation" },
    seed: {
      ...hex64,
      nullable: true,
      description: 'the seed (64 lower-case hex digits) once the draw is made (`drawn`); null before',
    },
    entriesCloseAt: { type: 'string', format: 'date-time' },
    backfillUntil: { type: 'string', format: 'date-time' },
    entries: { type: 'integer', description: 'entries in the draw' },
    drawn: { type: 'boolean', description: 'the ranks have been given' },
    drawnEntries: {
      type: 'integer',
      nullable: true,
      description:
        'how many entries the draw ranked when it was made; null before (and for a draw made before this was recorded)',
    },
    drawnEntriesSha256: {
      ...hex64,
      nullable: true,
      description:
        'sha256 of the tickets in draw order joined by ":", recorded when the draw was made: no entry can be dropped afterwards',
    },
    tickets: {
      type: 'array',
      items: hex64,
      description: "every entry's ticket, sorted, once the draw is made (empty before)",
    },
    choices: {
      type: 'array',
      description: "each ticket's choices, in the order of `tickets` (empty before the draw)",
      items: {
        type: 'object',
        required: ['ticket', 'variant', 'secondChoice'],
        properties: {
          ticket: hex64,
          variant: { type: 'string', description: 'the sku wanted' },
          secondChoice: { type: 'string', nullable: true, description: 'the sku taken when `variant` has none left' },
        },
      },
    },
    stock: {
      type: 'array',
      description: 'the units of each variant the award gives out, in the order the sale lists them',
      items: {
        type: 'object',
        required: ['sku', 'units'],
        properties: { sku: { type: 'string' }, units: { type: 'integer' } },
      },
    },
    winners: {
      type: 'array',
      description:
        'the entrants given an order, in draw order, with the variant of its unit: the award of the stock, then those backfill reached',
      items: {
        type: 'object',
        required: ['ticket', 'drawRank', 'orderId', 'sku'],
        properties: {
          ticket: hex64,
          drawRank: { type: 'integer' },
          orderId: { type: 'string' },
          sku: { type: 'string' },
        },
      },
    },
  },
};

const DESCRIPTION =
  'How to recompute the draw: each entry\'s ticket is hex(sha256(saleId + ":" + buyer + ":" + secret)), the secret told to its entrant only ' +
  '(so a ticket does not tell who entered; an entrant checks their own ticket with their secret; an entry made before secrets has hex(sha256(saleId + ":" + buyer))); key = hex(sha256(seed + ":" + ticket)); ' +
  'the draw order is the tickets sorted by key ascending (as lower-case hex strings), drawRank = 1 + the position. ' +
  'Check first that sha256(seed) = seedSha256. The award walks the ranks in order, each variant starting with its `stock`: an entrant gets a unit of their ' +
  '`variant` if it has one left, else of their `secondChoice` if it has, else none (on a sale of one variant, the first `stock` ranks win). ' +
  'Then, as orders expire or are cancelled before backfillUntil, a unit that came back goes to the lowest rank without an order that wants its variant (first or second choice). ' +
  'The draw committed to its entries when made: ' +
  'drawnEntries tickets whose draw order, joined by ":", hashes to drawnEntriesSha256. `flashsale draw verify <saleId>` checks it all.';

async function readRecord(pool: Pool, sale: Sale): Promise<DrawRecord> {
  // The seed and the tickets are shown once Postgres says the draw is made, never by this process's clock.
  const progress = await readProgress(pool, sale.id);
  const rows = progress.drawn ? await allEntries(pool, sale.id) : [];
  const byTicket = [...rows].sort((a, b) => (a.ticket < b.ticket ? -1 : a.ticket > b.ticket ? 1 : 0));
  return {
    saleId: sale.id,
    seedSha256: sale.seedSha256!,
    seed: progress.drawn ? sale.seed : null,
    entriesCloseAt: sale.entriesCloseAt!.toISOString(),
    backfillUntil: sale.backfillUntil!.toISOString(),
    entries: progress.entries,
    drawn: progress.drawn,
    drawnEntries: progress.committed?.entries ?? null,
    drawnEntriesSha256: progress.committed?.sha256 ?? null,
    tickets: byTicket.map((r) => r.ticket),
    choices: byTicket.map((r) => ({ ticket: r.ticket, variant: r.variant, secondChoice: r.second_choice })),
    stock: sale.variants.map((v) => ({ sku: v.sku, units: v.stock })),
    winners: rows
      .filter((r) => r.status === 'won')
      .map((r) => ({ ticket: r.ticket, drawRank: r.draw_rank!, orderId: r.order_id!, sku: r.sku! })),
  };
}

export const drawRecord: FastifyPluginCallback<DrawDeps> = (app, { pool, saleCache }, done) => {
  const held = new Map<string, { until: number; record: Promise<DrawRecord> }>();
  app.get<{ Params: { saleId: string } }>(
    '/api/sales/:saleId/draw',
    {
      schema: {
        summary: "A draw's public record: the seed once the draw is made, every ticket, the winners in draw order",
        tags: ['draw'],
        params: saleIdParams,
        description: DESCRIPTION,
        response: { 200: recordSchema, ...errorResponses('invalid_id', 'sale_not_found', 'not_a_draw', 'unavailable') },
      },
    },
    async (req) => {
      const sale = await drawSale(saleCache, req.params.saleId);
      const now = Date.now();
      const hit = held.get(sale.id);
      if (hit && hit.until > now) return hit.record;
      if (held.size >= MAX_HELD) held.clear();
      const record = readRecord(pool, sale);
      held.set(sale.id, { until: now + RECORD_TTL_MS, record });
      record.catch(() => held.delete(sale.id));
      return record;
    },
  );
  done();
};
