// An admission mode: who may buy a sale and how they come to (first come, a waiting room, a draw,
// an invitation list). The generic code (the sale's input, load_sale's meta, purchase.lua's gate,
// the purchase rules, the admission loop, the live view, the API's routes) asks
// the sale's mode through this interface instead of branching on its name. The built-in modes are
// registered in modes.ts; a new one is a folder of its own and one line there.
//
// This file is the registry's store and imports types only: the sale's definition, its input and
// its scripts read it without pulling in the modes themselves (whose routes and steps import sales).
import type { FastifyPluginCallback } from 'fastify';
import type { PurchaseRule } from '../purchase/rules/rule.js';
import type { RedisClient } from '../redis/connect.js';
import type { Pool, PoolClient } from '../runtime/db.js';
import type { Logger } from '../runtime/logger.js';
import type { Sale } from '../sales/model.js';

/**
 * The one gate purchase.lua requires of a purchase of the mode's sales (the sale's meta `gate`):
 * 'pass' a waiting room's pass, spent with the reservation; 'draw' the draw's own award (no request
 * carries it); 'member' the buyer is in the mode's list (`saleKeys(id).modeList(mode)`).
 */
export type Gate = 'pass' | 'draw' | 'member';

/** What a mode's step in the admission loop gets. */
export interface StepDeps {
  pool: Pool;
  redis: RedisClient;
  logger: Logger;
  buyCountTtlSeconds: number;
}

/** A mode's part of each admission tick (shared/admission/loop.ts), over the unsettled sales of the mode. */
export interface ModeStep {
  /**
   * Postgres work: run beside the loop's Redis-only steps, one pass at a time, never waited for
   * by the loop itself (tests wait), so a slow Postgres never holds up the others nor the lease.
   */
  beside?: boolean;
  /** One tick; the ticks it published (for tests). Must not throw for one sale's failure. */
  tick(sales: Sale[], now: number): Promise<object[]>;
  /** Forgets what it knew of sales no longer among the loop's. */
  keepOnly?(saleIds: Set<string>): void;
  /** Forgets everything: the loop has just become the leader, where another may have failed mid-step. */
  forget?(): void;
  /** This loop has stopped leading: its figures go. */
  resign?(): void;
}

export interface AdmissionMode {
  /** The sale's `admission`. */
  name: string;
  /** How the admin's new-sale form names it. */
  label: string;
  /** What purchase.lua requires of a purchase (left out: none, whatever the sale's challenge, whose token the mode's own doors take). */
  gate?: Gate;
  /** Its sales get a seed and its sha256 (an order anyone can recompute once the seed is public). */
  seeded?: boolean;
  /** Its stock is what its record commits to (a draw's award is recomputed from it): an operator may not restock or remove units. */
  fixedStock?: boolean;
  /** Its seed is kept in the sale's meta too (load_sale), for its scripts to order by; else it stays in Postgres. */
  seedInMeta?: boolean;
  /** Its judgement of a purchase, beside the sale's other rules (sale-rules.ts). */
  rule?: PurchaseRule;
  /** Its step in the admission loop. */
  step?: (deps: StepDeps) => ModeStep;
  /** Its figures in GET /api/sales/:saleId/live, under `key` (null for other sales), with their schema. */
  live?: {
    key: string;
    schema: Record<string, unknown>;
    figures(pool: Pool, redis: RedisClient, sale: Sale, now: number): Promise<object>;
  };
  /** Its routes (joining, entering, the buyer's streams, its record), given ModeRouteDeps (http/routes/admission/deps.ts) by buildApp. */
  routes?: FastifyPluginCallback<never>;
  /** Whether the sale's seed is public yet. */
  seedPublic?(redis: RedisClient, sale: Sale): Promise<boolean>;
  /** Ending the sale early (sales/admin.ts endSale): inside its transaction, then after it committed. */
  ending?(client: PoolClient, redis: RedisClient, sale: Sale): Promise<void>;
  ended?(pool: Pool, redis: RedisClient, sale: Sale): Promise<void>;
}

export const FIRST_COME = 'first-come';

const byName = new Map<string, AdmissionMode>();
const list: AdmissionMode[] = [];

/** Every admission a sale may have: first come, then each registered mode (the input's enum, shared, kept current). */
export const ADMISSIONS: string[] = [FIRST_COME];
/** The new-sale form's options (shared, kept current). */
export const ADMISSION_LABELS: Record<string, string> = { [FIRST_COME]: 'First come' };

/** Adds a mode: before the app, the loop or a sale's input is built. */
export function registerMode(mode: AdmissionMode): void {
  if (mode.name === FIRST_COME || byName.has(mode.name))
    throw new Error(`admission mode ${mode.name} is registered already`);
  byName.set(mode.name, mode);
  list.push(mode);
  ADMISSIONS.push(mode.name);
  ADMISSION_LABELS[mode.name] = mode.label;
}

/** The sale's mode; undefined for first come (and a mode this process has not registered). */
export const modeOf = (admission: string | null | undefined): AdmissionMode | undefined =>
  admission ? byName.get(admission) : undefined;

/** The registered modes, in registration order. */
export const registeredModes = (): readonly AdmissionMode[] => list;
