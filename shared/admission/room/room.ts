// The waiting room of a sale with admission 'queue': buyers join (join_queue.lua), the admission
// loop hands out passes at the sale's rate while units are left (admit.lua, run by
// shared/admission/loop.ts), and a buyer follows their place (queue_status.lua) until admitted with a
// signed pass that purchase.lua requires. Places are final once the room opens, so a buyer's
// position is their place minus the admitted count, which every tick publishes
// (shared/http/routes/admission/room-events.ts): a stream computes it without asking Redis.
import { TOKEN_EXPIRED, type CheckedToken } from '../../purchase/challenge.js';
import { HttpError } from '../../runtime/errors.js';
import { saleKeys } from '../../redis/keys.js';
import type { RedisClient } from '../../redis/connect.js';
import { run } from '../../redis/scripts.js';
import { TOKEN_MARK_MARGIN_MS } from '../../sales/scripts.js';
import type { Sale } from '../../sales/model.js';

/** join_queue.lua's refusals, as purchase.lua numbers the ones they share. */
const JOIN_REFUSALS: Record<number, () => HttpError> = {
  [-1]: () => new HttpError('sale_not_found'),
  [-3]: () => new HttpError('ended'),
  [-8]: () =>
    new HttpError(
      'purchase_token_required',
      'This sale needs a purchase token to join its waiting room: solve GET /api/sales/:saleId/challenge and exchange it at POST /api/sales/:saleId/purchase-token.',
    ),
  [-9]: () => new HttpError('purchase_token_used'),
  [-13]: () => new HttpError('no_waiting_room'),
  [-14]: () => new HttpError('invalid_purchase_token', TOKEN_EXPIRED),
};

/** Joins `buyer` to the sale's room (idempotent): true if this call joined, false if they had before. */
export async function joinQueue(
  redis: RedisClient,
  saleId: string,
  buyer: string,
  token?: CheckedToken,
): Promise<boolean> {
  const k = saleKeys(saleId);
  const t = token?.kind === 'token' ? token : undefined;
  const [code, joined] = (await run(
    redis,
    'join_queue',
    [k.meta, k.room, k.queue, k.tokenUsed(t ? t.id : '')],
    [buyer, t ? 1 : 0, t ? t.expiresAt : 0, TOKEN_MARK_MARGIN_MS],
  )) as [number, number];
  if (code === 1) return joined === 1;
  const refusal = JOIN_REFUSALS[code];
  if (!refusal) throw new Error(`Unknown join_queue result ${code}.`);
  throw refusal();
}

/** A buyer's raw place, as queue_status.lua reads it. */
export interface Place {
  /** 0-based place in the queue; -1 not joined. */
  rank: number;
  open: boolean;
  admitted: number;
  total: number;
  /** -1 no pass, 0 used, else its expiry (ms). */
  pass: number;
  available: number;
  expired: number;
  /** Redis's TIME at the read (ms): the clock the view judges the pass and the sale's end by. */
  now: number;
}

export async function readPlace(redis: RedisClient, saleId: string, buyer: string): Promise<Place> {
  const k = saleKeys(saleId);
  const [rank, open, admitted, total, pass, available, expired, now] = (await run(
    redis,
    'queue_status',
    [k.room, k.queue, k.passes, k.available],
    [buyer],
  )) as number[];
  return {
    rank: rank!,
    open: open === 1,
    admitted: admitted!,
    total: total!,
    pass: pass!,
    available: available!,
    expired: expired!,
    now: now!,
  };
}

export const QUEUE_STATES = ['waiting', 'admitted', 'used', 'expired', 'sold_out', 'ended'] as const;
export type QueueState = (typeof QUEUE_STATES)[number];

/** What a buyer is shown (GET .../queue/me and each stream event); the pass is added by the caller that signs it. */
export interface QueueView {
  saleId: string;
  state: QueueState;
  /** 1 = next; null before the room opens (places are drawn at the start) and once out of the line. */
  position: number | null;
  /** People in line ahead of this buyer (position - 1). */
  ahead: number | null;
  /** People in line not yet admitted. */
  waiting: number;
  /** ahead / the sale's rate, rounded up; null with position. */
  estimatedWaitSeconds: number | null;
  /** The seed that ordered the pre-queue, once the room has opened (null before): anyone can redo the order from it. */
  seed: string | null;
  /** With state admitted: the pass to send as the purchase token, and until when it buys. */
  pass?: string;
  passExpiresAt?: string;
}

/** Where a buyer stands, from their place and the room's counts, at Redis's time of the place. `place.rank` must be >= 0. */
export function viewOf(sale: Sale, place: Place): QueueView {
  const { now } = place;
  const base = {
    saleId: sale.id,
    waiting: Math.max(0, place.total - place.admitted),
    position: null,
    ahead: null,
    estimatedWaitSeconds: null,
    seed: place.open ? sale.seed : null,
  };
  if (place.open && place.rank < place.admitted) {
    if (place.pass === 0) return { ...base, state: 'used' };
    if (place.pass > now) return { ...base, state: 'admitted', passExpiresAt: new Date(place.pass).toISOString() };
    return { ...base, state: 'expired' };
  }
  if (sale.endsAt && now >= sale.endsAt.getTime()) return { ...base, state: 'ended' };
  if (!place.open) return { ...base, state: 'waiting' };
  if (place.available <= 0) return { ...base, state: 'sold_out' };
  const ahead = place.rank - place.admitted;
  return {
    ...base,
    state: 'waiting',
    position: ahead + 1,
    ahead,
    estimatedWaitSeconds: Math.ceil(ahead / (sale.admitRatePerSecond ?? 1)),
  };
}

/** admit.lua's phase codes. */
export enum Phase {
  NotQueue = -1,
  NotStarted = 0,
  Open = 1,
  SoldOut = 2,
  Ended = 3,
  /** An operator paused the sale: nobody is admitted until it resumes. */
  Paused = 4,
}

export interface AdmitStep {
  phase: Phase;
  admitted: number;
  admittedNow: number;
  waiting: number;
  outstanding: number;
  available: number;
  expiredNow: number;
  /** The expiry of the passes handed out in this step (ms), 0 when none. */
  passExpiresAt: number;
  /** Redis's TIME (ms) the step was judged at: the room's clock, never the loop's. */
  now: number;
}

/** One admission step for a queue sale (admit.lua, judged by Redis's TIME); `burst` caps a step after a pause. */
export async function admitStep(redis: RedisClient, sale: Sale, burst: number): Promise<AdmitStep> {
  const k = saleKeys(sale.id);
  const [phase, admitted, admittedNow, waiting, outstanding, available, expiredNow, passExpiresAt, now] = (await run(
    redis,
    'admit',
    [k.meta, k.room, k.queue, k.passes, k.available],
    [sale.admitRatePerSecond!, sale.admitOverbook!, sale.passSeconds! * 1000, burst],
  )) as number[];
  return {
    phase: phase!,
    admitted: admitted!,
    admittedNow: admittedNow!,
    waiting: waiting!,
    outstanding: outstanding!,
    available: available!,
    expiredNow: expiredNow!,
    passExpiresAt: passExpiresAt!,
    now: now!,
  };
}
