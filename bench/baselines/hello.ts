// The ceiling: a hello-world POST on the product's HTTP stack (fastify 5, one Node process, same
// route and body). It parses the JSON body and answers 202; no auth check, no Redis, no Postgres.
import { baseApp, serve } from './common.js';

const app = baseApp();
app.post('/api/sales/:saleId/purchases', async (_req, reply) => reply.code(202).send({ status: 'queued' }));
await serve(app);
