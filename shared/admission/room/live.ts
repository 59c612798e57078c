// A waiting room's figures for the operator (GET /api/sales/:saleId/live, `room`): who joined,
// who still waits, and what became of the passes. Read in one MULTI, so the counts are one
// snapshot of the room (its keys share the sale's slot).
import { saleKeys } from '../../redis/keys.js';
import type { RedisClient } from '../../redis/connect.js';
import { count, figuresSchema } from '../../http/schema-parts.js';

const FIGURES = {
  open: {
    type: 'boolean',
    description: 'the room has opened (places drawn at the start); before, everyone is in the pre-queue',
  },
  joined: count('buyers who joined'),
  waiting: count('joined, not yet admitted'),
  admitted: count('passes ever handed out: outstanding + used + expired'),
  passesOutstanding: count('passes that can still buy'),
  passesUsed: count('passes that bought'),
  passesExpired: count('passes that ran out unused (no-shows)'),
  noShowRate: {
    type: 'number',
    nullable: true,
    description: 'passesExpired / (passesUsed + passesExpired); null while both are 0',
  },
};

/** RoomFigures as the live view's schema shows them. */
export const roomFiguresSchema = figuresSchema(
  'the waiting room (admission: queue), read in one snapshot; null for other sales',
  FIGURES,
);

export interface RoomFigures {
  /** Whether admit.lua has opened the room (places drawn); before that everyone is in the pre-queue. */
  open: boolean;
  /** Everyone who joined (the queue's size). */
  joined: number;
  /** Joined and not yet admitted. */
  waiting: number;
  /** Passes ever handed out: outstanding + used + expired. */
  admitted: number;
  /** Passes handed out that can still buy. */
  passesOutstanding: number;
  /** Passes that bought. */
  passesUsed: number;
  /** Passes that ran out unused (no-shows). */
  passesExpired: number;
  /** expired / (used + expired); null until a pass has bought or expired. */
  noShowRate: number | null;
}

export async function roomFigures(redis: RedisClient, saleId: string, now: number): Promise<RoomFigures> {
  const k = saleKeys(saleId);
  const replies = await redis
    .multi()
    .zcard(k.queue)
    .hmget(k.room, 'phase', 'admitted', 'expired')
    .zcount(k.passes, `(${now}`, '+inf')
    .zcount(k.passes, 0, 0)
    // Past their expiry but not yet swept by the loop's next step (within a tick): expired too,
    // so that used + expired + outstanding = admitted at every instant.
    .zcount(k.passes, '(0', now)
    .exec();
  if (!replies) throw new Error(`The read of sale ${saleId}'s waiting room was aborted.`);
  for (const [err] of replies) if (err) throw err;
  const [joined, [phase, admitted, swept], outstanding, used, unswept] = replies.map(([, v]) => v) as [
    number,
    (string | null)[],
    number,
    number,
    number,
  ];
  const open = phase === 'open';
  const admittedCount = open ? Number(admitted ?? 0) : 0;
  const expired = Number(swept ?? 0) + unswept;
  return {
    open,
    joined,
    waiting: Math.max(0, joined - admittedCount),
    admitted: admittedCount,
    passesOutstanding: outstanding,
    passesUsed: used,
    passesExpired: expired,
    noShowRate: used + expired === 0 ? null : expired / (used + expired),
  };
}
