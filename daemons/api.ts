// The HTTP purchase endpoint as a process.
import { requireApiSecrets, type Config } from '../shared/config.js';
import { closeAll, type Stoppable } from '../shared/daemon.js';
import { buildApp } from '../shared/http.js';
import { STOCK_CHANNEL } from '../shared/keys.js';
import type { Logger } from '../shared/logger.js';
import { migrate } from '../shared/migrate.js';
import { Purchaser } from '../shared/purchase.js';
import { connect } from '../shared/services.js';

export async function startApi(config: Config, logger: Logger): Promise<Stoppable & { port: number }> {
  requireApiSecrets(config);
  const log = logger.child({ daemon: 'api' });
  const { pool, redis, close } = await connect(config, log, { poolSize: 20, redis: { enableAutoPipelining: true } });
  await migrate(pool, log);
  const purchaser = new Purchaser(redis, config);
  const subscriber = redis.duplicate();
  subscriber.on('error', () => {});
  subscriber.on('message', (_channel: string, saleId: string) => purchaser.stockRestored(saleId));
  await subscriber.subscribe(STOCK_CHANNEL);
  const app = buildApp({ config, pool, redis, purchaser, logger: log });
  await app.listen({ port: config.port, host: config.host });
  const { port } = app.server.address() as { port: number };
  log.info({ port, host: config.host, authMode: config.authMode }, 'api listening');
  let stopping: Promise<void> | undefined;
  return {
    port,
    stop: () => (stopping ??= closeAll(log, [['http', () => app.close()], ['subscriber', () => subscriber.quit()], ['connections', close]])),
  };
}
