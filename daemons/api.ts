// The HTTP purchase endpoint as a process.
import { requireSecrets, type Config } from '../shared/config/index.js';
import { closeAll, type Stoppable } from '../shared/runtime/daemon.js';
import { buildApp } from '../shared/http/app.js';
import { STOCK_CHANNEL } from '../shared/redis/keys.js';
import type { Logger } from '../shared/runtime/logger.js';
import { migrate } from '../shared/runtime/migrate.js';
import { startOpsServer } from '../shared/runtime/ops-server.js';
import { Purchaser } from '../shared/purchase/purchaser.js';
import { hintSubscriber, quitRedis } from '../shared/redis/connect.js';
import { connect } from '../shared/runtime/services.js';

const LISTEN_BACKLOG = 4096;

export async function startApi(config: Config, logger: Logger): Promise<Stoppable & { port: number }> {
  requireSecrets(config, { webhook: true });
  const log = logger.child({ daemon: 'api' });
  // A buyer gets an answer, never a hang: with Redis unreachable, commands fail at once (503), and
  // a purchase in flight when the connection drops is not resent (it may have run; a second run
  // would be a second order the buyer never heard of).
  const { pool, redis, replicaAcks, close } = await connect(config, log, {
    poolSize: 20,
    redis: {
      enableAutoPipelining: true,
      enableOfflineQueue: false,
      autoResendUnfulfilledCommands: false,
      commandTimeout: 5000,
    },
  });
  await migrate(pool, log);
  const purchaser = new Purchaser(redis, config, replicaAcks);
  const subscriber = hintSubscriber(redis, log, 'redis subscriber');
  subscriber.on('message', (_channel: string, saleId: string) => purchaser.stockRestored(saleId));
  await subscriber.subscribe(STOCK_CHANNEL);
  const app = buildApp({ config, pool, redis, replicaAcks, purchaser, logger: log });
  // A crowd connects at once; past Node's default accept queue (511) the kernel drops connections
  // and each buyer's TCP retries 1, 3, 7 s later. Linux caps this at net.core.somaxconn.
  await app.listen({ port: config.port, host: config.host, backlog: LISTEN_BACKLOG });
  const { port } = app.server.address() as { port: number };
  // Instances in PM2 cluster mode share PORT, so its /metrics is whichever instance took the
  // request; each one's own ops port (OPS_PORT + its instance number) is what Prometheus scrapes.
  const ops = await startOpsServer(config, redis, pool);
  const purchaseRate = {
    perBuyer: config.purchaseRatePerBuyer,
    perIp: config.purchaseRatePerIp,
    windowMs: config.purchaseRateWindowMs,
  };
  const challengeRate = { perBuyer: config.challengeRatePerBuyer, windowMs: config.challengeRateWindowMs };
  log.info(
    {
      port,
      opsPort: config.opsPort || undefined,
      host: config.host,
      opsHost: config.opsPort ? config.opsHost : undefined,
      authMode: config.authMode,
      purchaseRate,
      challengeRate,
    },
    'api listening',
  );
  if (config.directPay && !config.development) {
    log.warn(
      { directPay: true },
      'DIRECT_PAY is on: any buyer can mark an order paid without paying (DIRECT_PAY_I_UNDERSTAND_BUYERS_PAY_NOTHING=yes); set DIRECT_PAY=off for real sales',
    );
  }
  let stopping: Promise<void> | undefined;
  return {
    port,
    stop: () =>
      (stopping ??= closeAll(log, [
        ['ops', () => ops?.close()],
        ['http', () => app.close()],
        ['subscriber', () => quitRedis(subscriber)],
        ['connections', close],
      ])),
  };
}
