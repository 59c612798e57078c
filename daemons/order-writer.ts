// Daemon one as a process.
import type { Config } from '../shared/config.js';
import { closeAll, type Stoppable } from '../shared/daemon.js';
import type { Logger } from '../shared/logger.js';
import { migrate } from '../shared/migrate.js';
import { startOpsServer } from '../shared/ops-server.js';
import { connect } from '../shared/services.js';
import { OrderWriter } from '../shared/writer.js';

export async function startOrderWriter(config: Config, logger: Logger): Promise<Stoppable & { writer: OrderWriter }> {
  const log = logger.child({ daemon: 'order-writer', writerId: config.writerId });
  const { pool, redis, close } = await connect(config, log);
  await migrate(pool, log);
  const ops = await startOpsServer(config.opsPort, config.host, redis, pool);
  const writer = new OrderWriter({ pool, redis, logger: log, config });
  writer.start();
  log.info({ batchSize: config.writerBatchSize }, 'order writer started');
  let stopping: Promise<void> | undefined;
  return { writer, failed: writer.failed, stop: () => (stopping ??= closeAll(log, [['ops', () => ops?.close()], ['writer', () => writer.stop()], ['connections', close]])) };
}
