// The delivery of outbound events as a process (docs/events.md): several may run at once.
import type { Config } from '../shared/config/index.js';
import { EventDelivery } from '../shared/events/delivery.js';
import { closeAll, type Stoppable } from '../shared/runtime/daemon.js';
import type { Logger } from '../shared/runtime/logger.js';
import { migrate } from '../shared/runtime/migrate.js';
import { startOpsServer } from '../shared/runtime/ops-server.js';
import { connect } from '../shared/runtime/services.js';

export async function startEvents(config: Config, logger: Logger): Promise<Stoppable> {
  const log = logger.child({ daemon: 'events' });
  const { pool, redis, close } = await connect(config, log);
  await migrate(pool, log);
  const ops = await startOpsServer(config, redis, pool);
  const delivery = new EventDelivery(pool, config, log);
  delivery.start();
  log.info(
    { concurrency: config.eventsConcurrency, horizonSeconds: config.eventsRetryHorizonSeconds },
    'delivering events',
  );
  let stopping: Promise<void> | undefined;
  return {
    failed: delivery.failed,
    stop: () =>
      (stopping ??= closeAll(log, [
        ['ops', () => ops?.close()],
        ['delivery', () => delivery.stop()],
        ['connections', close],
      ])),
  };
}
