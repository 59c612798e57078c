// The cron replay as a process (or one pass with --once).
import type { Config } from '../shared/config.js';
import { closeAll, type Stoppable } from '../shared/daemon.js';
import type { Logger } from '../shared/logger.js';
import { migrate } from '../shared/migrate.js';
import { startOpsServer } from '../shared/ops-server.js';
import { Replay, replayOnce, type ReplayReport } from '../shared/replay.js';
import { connect } from '../shared/services.js';

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
    stop: () => (stopping ??= closeAll(log, [['ops', () => ops?.close()], ['replay', () => replay.stop()], ['connections', close]])),
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
