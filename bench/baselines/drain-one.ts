// Baseline: a one-at-a-time drain of the winners list. Per winner: move it to a processing list
// (so a crash loses nothing, as the product's writer guarantees), insert its order, then in one
// MULTI set its expiry key at the deadline, move its id from the purchased set to the deadlines
// index, forget the queued entry and drop it from the processing list. Same keys, same rows, same idempotence as the product's writer;
// only one order per round trip. Starts draining SALE_ID on the parent's 'go', exits when empty.
import { createPool } from '../../shared/runtime/db.js';
import { saleKeys } from '../../shared/redis/keys.js';
import { parseWinner } from '../../shared/runtime/ids.js';
import { createRedis } from '../../shared/redis/connect.js';
import { env } from './common.js';

const saleId = env('SALE_ID');
const pool = createPool(env('DATABASE_URL'), 2);
const redis = createRedis(env('REDIS_URL'));
const k = saleKeys(saleId);
const processing = k.processing('drain-one');

async function drainOne(): Promise<boolean> {
  const entry = await redis.lmove(k.winners, processing, 'RIGHT', 'LEFT');
  if (entry === null) return false;
  const w = parseWinner(entry);
  const inserted = await pool.query<{ expires_at: Date }>(
    `insert into orders (id, sale_id, user_id, qty, status, seq, purchased_at, created_at, expires_at)
     select $2, s.id, $3, $4, 'pending', $5, to_timestamp($6 / 1000.0), date_trunc('milliseconds', now()),
            date_trunc('milliseconds', now()) + make_interval(secs => s.payment_window_seconds)
     from sales s where s.id = $1
     on conflict (id) do nothing returning expires_at`,
    [saleId, w.orderId, w.userId, w.qty, w.seq, w.purchasedAt],
  );
  const row =
    inserted.rows[0] ??
    (await pool.query<{ expires_at: Date }>('select expires_at from orders where id = $1', [w.orderId])).rows[0]!;
  const deadline = row.expires_at.getTime();
  // As ack.lua does: the id moves from the purchased set to the deadlines index.
  await redis
    .multi()
    .set(k.expiry(w.orderId), '1', 'PXAT', deadline)
    .zadd(k.deadlines, deadline, w.orderId)
    .srem(k.purchased, w.orderId)
    .hdel(k.queued, w.orderId)
    .lrem(processing, 1, entry)
    .exec();
  return true;
}

process.once('message', (m) => {
  if (m !== 'go') return;
  void (async () => {
    let n = 0;
    while (await drainOne()) n++;
    process.send?.({ drained: n });
    await redis.quit();
    await pool.end();
    process.disconnect();
  })();
});
process.send?.('ready');
