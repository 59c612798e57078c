import { pino, type Logger } from 'pino';
import type { Config } from '../config/index.js';

export type { Logger };

/**
 * One root logger per process: JSON on stdout, pretty only in development. One-shot commands log
 * to stderr (`to: 2`), so what they print on stdout (a report, JSON) stays clean.
 */
export function createLogger(
  config: Pick<Config, 'logLevel' | 'development'>,
  name = 'flashsale',
  to: 1 | 2 = 1,
): Logger {
  const options = { name, level: config.logLevel };
  if (config.development)
    return pino({ ...options, transport: { target: 'pino-pretty', options: { colorize: true, destination: to } } });
  // The process's own streams, not raw file descriptors: PM2's cluster mode collects a worker's
  // output by wrapping process.stdout, and writes straight to fd 1 never reach its logs.
  return pino(options, to === 1 ? process.stdout : process.stderr);
}
