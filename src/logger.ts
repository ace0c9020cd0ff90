/**
 * The server's logger: pino underneath, one sink that decides what a line
 * looks like. People at a terminal get Triton's line formats (`default`:
 * `I1201 10:22:23.123456 4242 nereid] message`, or `ISO8601`); anything else
 * (a pipe, a file, a log collector) gets one JSON object per line with an ISO
 * timestamp and each key once. Triton's four switches (error, warning, info,
 * verbose) are independent, so the sink filters by them as well.
 */
import { pino, type Logger } from 'pino';

export type { Logger } from 'pino';

/** Triton's --log-format values, plus json. */
export type LogFormat = 'default' | 'ISO8601' | 'json';

export const LOG_FORMATS: readonly LogFormat[] = ['default', 'ISO8601', 'json'];

/** Which kinds of line are written (Triton's --log-error/--log-warning/--log-info/--log-verbose). */
export interface LogSwitches {
  error: boolean;
  warning: boolean;
  info: boolean;
  verbose: number;
}

export interface LoggerOptions {
  /** A pino level name; when given it wins over the switches (NEREID_LOG_LEVEL, tests). */
  level?: string;
  switches?: Partial<LogSwitches>;
  /** Default: `default` when the destination is a terminal, `json` otherwise. */
  format?: LogFormat;
  /** A file to append to (--log-file), or a file descriptor (default 2, stderr). */
  destination?: number | string;
}

const LEVEL_LETTER: Record<number, string> = { 10: 'V', 20: 'V', 30: 'I', 40: 'W', 50: 'E', 60: 'E' };
/** Fields every pino line carries that the text formats show in their own way (or not at all). */
const HEADER_KEYS = new Set(['level', 'time', 'pid', 'hostname', 'msg', 'service']);

const pad = (n: number, width = 2): string => String(n).padStart(width, '0');

/** Formats one parsed pino record as a Triton-style text line. */
export function formatTextLine(record: Record<string, unknown>, format: 'default' | 'ISO8601'): string {
  const level = typeof record['level'] === 'number' ? record['level'] : 30;
  const letter = LEVEL_LETTER[level] ?? 'I';
  const t = new Date(
    typeof record['time'] === 'string' || typeof record['time'] === 'number' ? record['time'] : Date.now(),
  );
  const pid = typeof record['pid'] === 'number' ? record['pid'] : process.pid;
  const head =
    format === 'ISO8601'
      ? `${t.getUTCFullYear()}-${pad(t.getUTCMonth() + 1)}-${pad(t.getUTCDate())}T${pad(t.getUTCHours())}:` +
        `${pad(t.getUTCMinutes())}:${pad(t.getUTCSeconds())}Z ${letter} ${pid} nereid]`
      : `${letter}${pad(t.getMonth() + 1)}${pad(t.getDate())} ${pad(t.getHours())}:${pad(t.getMinutes())}:` +
        `${pad(t.getSeconds())}.${pad(t.getMilliseconds() * 1000, 6)} ${pid} nereid]`;
  let line = `${head} ${typeof record['msg'] === 'string' ? record['msg'] : ''}`;
  for (const [key, value] of Object.entries(record)) {
    if (HEADER_KEYS.has(key)) continue;
    line += ` ${key}=${typeof value === 'string' && /^[^\s"=]+$/.test(value) ? value : JSON.stringify(value)}`;
  }
  return `${line}\n`;
}

/** Where pino writes: turns each record into the chosen format, filtered by the switches. */
export class LogSink {
  format: LogFormat;
  switches: LogSwitches;
  /** Receives every warning and error record (the dashboard's recent problems). */
  problems: ((record: Record<string, unknown>) => void) | undefined;
  private readonly out: pino.DestinationStream & { flushSync?: () => void };

  constructor(destination: number | string, format: LogFormat | undefined, switches: LogSwitches) {
    this.out = pino.destination(
      typeof destination === 'string'
        ? { dest: destination, append: true, mkdir: true, sync: true }
        : { dest: destination, sync: true },
    );
    const tty =
      typeof destination === 'number' &&
      (destination === 2 ? process.stderr.isTTY : destination === 1 ? process.stdout.isTTY : false);
    this.format = format ?? (tty ? 'default' : 'json');
    this.switches = switches;
  }

  write(chunk: string): void {
    let record: Record<string, unknown>;
    try {
      record = JSON.parse(chunk) as Record<string, unknown>;
    } catch {
      this.out.write(chunk);
      return;
    }
    const level = typeof record['level'] === 'number' ? record['level'] : 30;
    if (level >= 40) this.problems?.(record);
    if (!this.enabled(level)) return;
    // Re-serialising drops repeated keys (a child logger and its caller both naming the model).
    this.out.write(this.format === 'json' ? `${JSON.stringify(record)}\n` : formatTextLine(record, this.format));
  }

  private enabled(level: number): boolean {
    const s = this.switches;
    if (level >= 50) return s.error;
    if (level >= 40) return s.warning;
    if (level >= 30) return s.info;
    return s.verbose > 0;
  }

  /** The lowest pino level any switch lets through. */
  pinoLevel(): string {
    const s = this.switches;
    if (s.verbose > 0) return 'debug';
    if (s.info) return 'info';
    if (s.warning) return 'warn';
    if (s.error) return 'error';
    return 'silent';
  }
}

const sinks = new WeakMap<Logger, LogSink>();

/** The server's logger. Level from options.level when given, else from the switches (default: error, warning, info). */
export function createLogger(options: LoggerOptions = {}): Logger {
  const switches: LogSwitches = { error: true, warning: true, info: true, verbose: 0, ...options.switches };
  const sink = new LogSink(options.destination ?? 2, options.format, switches);
  const level = options.level || sink.pinoLevel();
  const logger = pino({ level, base: { service: 'nereid' }, timestamp: pino.stdTimeFunctions.isoTime }, sink);
  sinks.set(logger, sink);
  return logger;
}

/** Applies new switches or format to a logger made by createLogger (the logging extension). */
export function reconfigureLogger(
  logger: Logger,
  change: { switches?: Partial<LogSwitches>; format?: LogFormat },
): void {
  const sink = sinks.get(logger);
  if (sink === undefined) return;
  if (change.switches) sink.switches = { ...sink.switches, ...change.switches };
  if (change.format) sink.format = change.format;
  logger.level = sink.pinoLevel();
}

/** Hands every warning and error `logger` (made by createLogger) writes to `listener`; false for other loggers. */
export function watchLogProblems(logger: Logger, listener: (record: Record<string, unknown>) => void): boolean {
  const sink = sinks.get(logger);
  if (sink === undefined) return false;
  sink.problems = listener;
  return true;
}

/** A logger that drops everything. */
export const silentLogger: Logger = pino({ level: 'silent' });
