import { pino, type Logger } from 'pino';

export type { Logger } from 'pino';

/** The server's JSON logger. Level from NEREID_LOG_LEVEL (default info; tests set "silent"). */
export function createLogger(options: { level?: string; destination?: number | string } = {}): Logger {
  const level = options.level ?? process.env.NEREID_LOG_LEVEL ?? 'info';
  return pino({ level, base: { service: 'nereid' } }, pino.destination(options.destination ?? 2));
}

/** A logger that drops everything. */
export const silentLogger: Logger = pino({ level: 'silent' });
