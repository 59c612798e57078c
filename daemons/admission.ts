// The admission loop as a process: waiting rooms' passes (and draws', see shared/admission/loop.ts).
import type { Config } from '../shared/config/index.js';
import { closeAll, type Stoppable } from '../shared/runtime/daemon.js';
import { AdmissionLoop } from '../shared/admission/loop.js';
import type { Logger } from '../shared/runtime/logger.js';
import { migrate } from '../shared/runtime/migrate.js';
import { startOpsServer } from '../shared/runtime/ops-server.js';
import { connect } from '../shared/runtime/services.js';

export async function startAdmission(config: Config, logger: Logger): Promise<Stoppable & { loop: AdmissionLoop }> {
  const log = logger.child({ daemon: 'admission' });
  const { pool, redis, close } = await connect(config, log);
  await migrate(pool, log);
  const ops = await startOpsServer(config, redis, pool);
  const loop = new AdmissionLoop({ pool, redis, logger: log, buyCountTtlSeconds: config.buyCountTtlSeconds });
  loop.start();
  log.info({ loop: loop.id }, 'admission loop started');
  let stopping: Promise<void> | undefined;
  return {
    loop,
    failed: loop.failed,
    stop: () =>
      (stopping ??= closeAll(log, [
        ['ops', () => ops?.close()],
        ['admission', () => loop.stop()],
        ['connections', close],
      ])),
  };
}
