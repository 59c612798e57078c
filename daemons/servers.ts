// Local Postgres and Redis for the PM2 ecosystem on a machine without its own servers.
import { localSecrets, localSecretsFile, type Config } from '../shared/config/index.js';
import type { Stoppable } from '../shared/runtime/daemon.js';
import type { Logger } from '../shared/runtime/logger.js';

export async function startServers(config: Config, logger: Logger): Promise<Stoppable> {
  // Imported here only: the embedded Postgres package is needed by the local stack alone.
  const { startLocalServers } = await import('../tools/local-stack.js');
  const servers = await startLocalServers(config);
  if (servers.orphansStopped.length > 0)
    logger.warn({ stopped: servers.orphansStopped }, 'stopped servers an earlier local stack left running');
  // The other apps of the PM2 local mode read the same file; the values are never logged.
  localSecrets(config.dataDir);
  logger.info(
    {
      databaseUrl: servers.databaseUrl,
      redisUrl: servers.redisUrl,
      dataDir: config.dataDir,
      secrets: localSecretsFile(config.dataDir),
    },
    'local servers up',
  );
  return servers;
}
