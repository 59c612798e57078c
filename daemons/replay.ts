// The cron replay as a process (or one pass with --once).
import type { Config } from '../shared/config/index.js';
import { closeAll, type Stoppable } from '../shared/runtime/daemon.js';
import type { Logger } from '../shared/runtime/logger.js';
import { migrate } from '../shared/runtime/migrate.js';
import { startOpsServer } from '../shared/runtime/ops-server.js';
import { Replay, replayOnce, type ReplayReport } from '../shared/pipeline/replay.js';
import { connect } from '../shared/runtime/services.js';

export async function startReplay(config: Config, logger: Logger): Promise<Stoppable> {
  const log = logger.child({ daemon: 'replay' });
  const { pool, redis, replicaAcks, close } = await connect(config, log);
  await migrate(pool, log);
  const ops = await startOpsServer(config, redis, pool);
  const replay = new Replay({ pool, redis, replicaAcks, logger: log }, config.replayIntervalSeconds);
  replay.start();
  log.info({ intervalSeconds: config.replayIntervalSeconds }, 'replay scheduled');
  let stopping: Promise<void> | undefined;
  return {
    failed: replay.failed,
    stop: () =>
      (stopping ??= closeAll(log, [
        ['ops', () => ops?.close()],
        ['replay', () => replay.stop()],
        ['connections', close],
      ])),
  };
}

export async function replayPassOnce(config: Config, logger: Logger): Promise<ReplayReport> {
  const log = logger.child({ daemon: 'replay' });
  const { pool, redis, replicaAcks, close } = await connect(config, log);
  try {
    await migrate(pool, log);
    return await replayOnce({ pool, redis, replicaAcks, logger: log });
  } finally {
    await close();
  }
}
