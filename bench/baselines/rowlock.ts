// Baseline: the Postgres row-lock design as an HTTP server. Every buyer is one transaction on a
// pool of POOL_SIZE connections (20, as the product API's pool); the order exists when it answers.
import { createPool } from '../../shared/runtime/db.js';
import { HttpError } from '../../shared/runtime/errors.js';
import { baseApp, buyerOf, env, serve, SoldOutMemory } from './common.js';
import { rowLockPurchase } from './rowlock-tx.js';

const pool = createPool(env('DATABASE_URL'), Number(env('POOL_SIZE', '20')));
const memory = new SoldOutMemory();
const app = baseApp();
app.post('/api/sales/:saleId/purchases', async (req, reply) => {
  const { saleId, userId, qty } = buyerOf(req);
  memory.check(saleId);
  try {
    const orderId = await rowLockPurchase(pool, saleId, userId, qty);
    return await reply.code(201).send({ orderId, status: 'pending_payment' });
  } catch (err) {
    if (err instanceof HttpError && err.code === 'sold_out') memory.soldOut(saleId);
    throw err;
  }
});
await serve(app, [() => pool.end()]);
