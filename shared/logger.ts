import { pino, type Logger } from 'pino';
import type { Config } from './config.js';

export type { Logger };

/** One root logger per process: JSON on stdout, pretty only in development. */
export function createLogger(config: Pick<Config, 'logLevel' | 'development'>, name = 'flashsale'): Logger {
  return pino({
    name,
    level: config.logLevel,
    transport: config.development ? { target: 'pino-pretty', options: { colorize: true } } : undefined,
  });
}
