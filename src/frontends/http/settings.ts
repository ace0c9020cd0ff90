/**
 * The logging setting extension: its state, Triton's defaults,
 * and the validation of updates (texts and status classes as Triton's).
 * Both frontends can share one instance of each.
 */
import { Errors } from '../../errors.js';

type JsonObject = Record<string, unknown>;

const NON_BOOL = 'attempt to access JSON non-boolean as boolean';
const NON_UINT = 'attempt to access JSON non-unsigned-integer as unsigned-integer';
const NON_STRING = 'attempt to access JSON non-string as string';

export type LogFormat = 'default' | 'ISO8601' | 'json';

export interface LogSettingsState {
  log_file: string;
  log_info: boolean;
  log_warning: boolean;
  log_error: boolean;
  log_verbose_level: number;
  log_format: LogFormat;
}

/** Dynamic logging settings (`/v2/logging`). `onChange` lets the owner apply them to its logger. */
export class LogSettings {
  private state: LogSettingsState = {
    log_file: '',
    log_info: true,
    log_warning: true,
    log_error: true,
    log_verbose_level: 0,
    log_format: 'default',
  };

  constructor(
    private readonly onChange?: (state: Readonly<LogSettingsState>) => void,
    initial?: Partial<LogSettingsState>,
  ) {
    if (initial) this.state = { ...this.state, ...initial };
  }

  get(): Readonly<LogSettingsState> {
    return this.state;
  }

  /** Applies changes that were already validated (the gRPC LogSettings RPC); returns the result. */
  update(changes: Partial<Omit<LogSettingsState, 'log_file'>> | { log_format?: string }): Readonly<LogSettingsState> {
    const next = { ...this.state, ...(changes as Partial<LogSettingsState>) };
    this.state = next;
    this.onChange?.(next);
    return next;
  }

  /**
   * Applies a POST /v2/logging body; throws as Triton does (keys before the failing one stay applied, as in Triton).
   */
  updateFromJson(body: unknown): void {
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      throw Errors.invalidRequest('a log setting request must be a JSON object');
    }
    const req = body as JsonObject;
    // Triton passes over keys it does not know; refused here before anything changes, naming the key.
    for (const key of Object.keys(req)) {
      if (!Object.hasOwn(this.state, key)) throw Errors.unknownLogSetting(key);
    }
    const next = { ...this.state };
    try {
      const file = req['log_file'];
      if (file !== undefined && file !== null) {
        throw Errors.unsupported('log file location can not be updated through network protocol');
      }
      for (const key of ['log_info', 'log_warning', 'log_error'] as const) {
        const v = req[key];
        if (v === undefined || v === null) continue;
        if (typeof v !== 'boolean') throw Errors.jsonValue(NON_BOOL);
        next[key] = v;
      }
      const verbose = req['log_verbose_level'];
      if (verbose !== undefined && verbose !== null) {
        if (typeof verbose !== 'number' || !Number.isInteger(verbose) || verbose < 0) throw Errors.jsonValue(NON_UINT);
        next.log_verbose_level = verbose;
      }
      const format = req['log_format'];
      if (format !== undefined && format !== null) {
        if (typeof format !== 'string') throw Errors.jsonValue(NON_STRING);
        if (format !== 'default' && format !== 'ISO8601' && format !== 'json') {
          throw Errors.invalidLogFormat(format);
        }
        next.log_format = format;
      }
    } finally {
      this.state = next;
      this.onChange?.(next);
    }
  }

  toJson(): string {
    const s = this.state;
    return (
      `{"log_file":${JSON.stringify(s.log_file)},"log_info":${s.log_info},"log_warning":${s.log_warning},` +
      `"log_error":${s.log_error},"log_verbose_level":` +
      `${s.log_verbose_level},"log_format":${JSON.stringify(s.log_format)}}`
    );
  }
}

const INT32_MIN = -2147483648;
const INT32_MAX = 2147483647;

/** C++ std::stoi: leading whitespace, sign, digits, then anything; 'invalid' or 'range' when it would throw. */
export function stoi(text: string): number | 'invalid' | 'range' {
  const m = /^[\s]*([+-]?\d+)/.exec(text);
  if (m === null) return 'invalid';
  const v = Number(m[1]);
  if (v < INT32_MIN || v > INT32_MAX) return 'range';
  return v;
}

/** Trace settings live with the tracer (src/trace); the HTTP routes take them from there. */
export { TraceSettings } from '../../trace/settings.js';
