// The local stack: embedded Postgres and a redis-server child (unless DATABASE_URL / REDIS_URL
// point elsewhere), a demo sale, and every daemon in this one process.
import '../shared/admission/modes.js';
import { redisConfigured, type Config } from '../shared/config/index.js';
import { closeAll, type Stoppable } from '../shared/runtime/daemon.js';
import type { Logger } from '../shared/runtime/logger.js';
import { createSale, getSale, parseSaleInput } from '../shared/sales/sale.js';
import { connect } from '../shared/runtime/services.js';
import { migrate } from '../shared/runtime/migrate.js';
import { startAdmission } from './admission.js';
import { startApi } from './api.js';
import { startEvents } from './events.js';
import { startExpiryListener } from './expiry-listener.js';
import { startOrderWriter } from './order-writer.js';
import { startReplay } from './replay.js';

/** What the local stack's servers keep across a crash (see tools/local-stack.ts). */
const LOCAL_DURABILITY =
  'Postgres fsync on and every commit of ours flushed (synchronous_commit on); Redis AOF, fsync every second';

export const DEMO_SALE = {
  id: 'demo',
  name: 'Demo flash sale',
  stock: 100,
  price: 1999,
  currency: 'EUR',
  perUserLimit: 1,
  maxPerOrder: 1,
  paymentWindowSeconds: 120,
};

export async function startDev(base: Config, logger: Logger): Promise<Stoppable> {
  const stops: [string, () => Promise<unknown>][] = [];
  const stopAll = () => closeAll(logger, stops.slice().reverse());
  try {
    // Secrets: random ones generated once under the data dir (shared/config/index.ts withLocalSecrets).
    // DIRECT_PAY: the demo page pays through the webhook path, signed with the local secret.
    const config: Config = { ...base, development: true, directPay: true };
    // Imported here only: the embedded Postgres package is needed by the local stack alone.
    if (!config.databaseUrl || !redisConfigured(config)) {
      const { startLocalServers } = await import('../tools/local-stack.js');
      const servers = await startLocalServers(config);
      stops.push(['local servers', servers.stop]);
      if (servers.orphansStopped.length > 0)
        logger.warn({ stopped: servers.orphansStopped }, 'stopped servers an earlier local stack left running');
      config.databaseUrl ??= servers.databaseUrl;
      if (!redisConfigured(config)) config.redisUrl = servers.redisUrl;
    }
    const setup = await connect(config, logger);
    try {
      await migrate(setup.pool, logger);
      if (!(await getSale(setup.pool, DEMO_SALE.id)))
        await createSale(setup.pool, setup.redis, parseSaleInput(DEMO_SALE), {
          legacyBuyCounts: config.legacyBuyCounts,
        });
    } finally {
      await setup.close();
    }
    const failures: Promise<never>[] = [];
    for (const [name, start] of [
      ['order-writer', startOrderWriter],
      ['expiry-listener', startExpiryListener],
      ['replay', startReplay],
      ['admission', startAdmission],
      ['events', startEvents],
    ] as const) {
      const s = await start(config, logger);
      stops.push([name, () => s.stop()]);
      if (s.failed) failures.push(s.failed);
    }
    const api = await startApi(config, logger);
    stops.push(['api', () => api.stop()]);
    const url = `http://${config.host}:${api.port}`;
    // `dev` is the only process that ever logs a secret: the local admin token, for the person at the keyboard.
    logger.info(
      { url, sale: `${url}/api/sales/${DEMO_SALE.id}`, adminToken: config.adminToken, durability: LOCAL_DURABILITY },
      `flashsale is up at ${url}; get a buyer token with: curl -s -X POST ${url}/api/dev/token -H 'content-type: application/json' -d '{"userId":"alice"}'`,
    );
    // A daemon that gives up ends the whole local stack, as it would end its own process.
    return { stop: stopAll, failed: Promise.race(failures) };
  } catch (err) {
    await stopAll();
    throw err;
  }
}
