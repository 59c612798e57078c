// Daemon two as a process.
import type { Config } from '../shared/config/index.js';
import { closeAll, type Stoppable } from '../shared/runtime/daemon.js';
import { ExpiryListener } from '../shared/pipeline/listener.js';
import type { Logger } from '../shared/runtime/logger.js';
import { migrate } from '../shared/runtime/migrate.js';
import { startOpsServer } from '../shared/runtime/ops-server.js';
import { connect } from '../shared/runtime/services.js';

export async function startExpiryListener(
  config: Config,
  logger: Logger,
): Promise<Stoppable & { listener: ExpiryListener }> {
  const log = logger.child({ daemon: 'expiry-listener' });
  const { pool, redis, replicaAcks, close } = await connect(config, log);
  await migrate(pool, log);
  const ops = await startOpsServer(config, redis, pool);
  const listener = new ExpiryListener({ pool, redis, replicaAcks, logger: log, config });
  try {
    await listener.start();
  } catch (err) {
    await closeAll(log, [
      ['ops', () => ops?.close()],
      ['connections', close],
    ]);
    throw err;
  }
  let stopping: Promise<void> | undefined;
  return {
    listener,
    failed: listener.failed,
    stop: () =>
      (stopping ??= closeAll(log, [
        ['ops', () => ops?.close()],
        ['listener', () => listener.stop()],
        ['connections', close],
      ])),
  };
}
