// Daemon one as a process: WRITER_CONCURRENCY writers side by side, each with a batch in flight
// under a writer id of its own, so one batch's Postgres insert overlaps another's Redis claim and
// acknowledgement. Each id leases and holds its batch as a writer process of its own would: a
// restart under the same WRITER_ID takes each batch back, and a slot that is gone (the concurrency
// was lowered) is re-driven once its lease runs out.
import type { Config } from '../shared/config/index.js';
import { closeAll, type Stoppable } from '../shared/runtime/daemon.js';
import type { Logger } from '../shared/runtime/logger.js';
import { migrate } from '../shared/runtime/migrate.js';
import { startOpsServer } from '../shared/runtime/ops-server.js';
import { connect } from '../shared/runtime/services.js';
import { OrderWriter } from '../shared/pipeline/writer.js';

/** Slot 0 keeps WRITER_ID itself, so a writer run with WRITER_CONCURRENCY=1 is what it always was. */
export const slotWriterId = (writerId: string, slot: number) => (slot === 0 ? writerId : `${writerId}/${slot}`);

export async function startOrderWriter(
  config: Config,
  logger: Logger,
): Promise<Stoppable & { writers: OrderWriter[] }> {
  const log = logger.child({ daemon: 'order-writer', writerId: config.writerId });
  // One connection per batch in flight, and room for the overdue closes and the gauges.
  const { pool, redis, replicaAcks, close } = await connect(config, log, {
    poolSize: Math.max(10, config.writerConcurrency * 2),
  });
  await migrate(pool, log);
  const ops = await startOpsServer(config, redis, pool);
  const writers = Array.from({ length: config.writerConcurrency }, (_, slot) => {
    const writerId = slotWriterId(config.writerId, slot);
    return new OrderWriter({
      pool,
      redis,
      replicaAcks,
      logger: slot === 0 ? log : log.child({ writerId }),
      config: { ...config, writerId },
    });
  });
  for (const w of writers) w.start();
  log.info({ batchSize: config.writerBatchSize, concurrency: writers.length }, 'order writer started');
  let stopping: Promise<void> | undefined;
  return {
    writers,
    failed: Promise.race(writers.map((w) => w.failed)),
    stop: () =>
      (stopping ??= closeAll(log, [
        ['ops', () => ops?.close()],
        ['writer', () => Promise.all(writers.map((w) => w.stop())).then(() => {})],
        ['connections', close],
      ])),
  };
}
