// The admission loop as a process: waiting rooms' passes (and draws', see shared/admission.ts).
import type { Config } from '../shared/config.js';
import { closeAll, type Stoppable } from '../shared/daemon.js';
import { AdmissionLoop } from '../shared/admission.js';
import type { Logger } from '../shared/logger.js';
import { migrate } from '../shared/migrate.js';
import { startOpsServer } from '../shared/ops-server.js';
import { connect } from '../shared/services.js';

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
    stop: () => (stopping ??= closeAll(log, [['ops', () => ops?.close()], ['admission', () => loop.stop()], ['connections', close]])),
  };
}
