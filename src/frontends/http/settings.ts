/**
 * The logging and trace setting extensions: their state, Triton's defaults,
 * and the validation of updates (texts and status classes as Triton's).
 * Both frontends can share one instance of each.
 */
import { Errors } from '../../errors.js';

type JsonObject = Record<string, unknown>;

const NON_BOOL = 'attempt to access JSON non-boolean as boolean';
const NON_UINT = 'attempt to access JSON non-unsigned-integer as unsigned-integer';
const NON_STRING = 'attempt to access JSON non-string as string';
const NON_ARRAY = 'attempt to access JSON non-array as array';

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

  /** Applies a POST /v2/logging body; throws as Triton does (keys before the failing one stay applied, as in Triton). */
  updateFromJson(body: unknown): void {
    const req: JsonObject = typeof body === 'object' && body !== null && !Array.isArray(body) ? (body as JsonObject) : {};
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
      `"log_error":${s.log_error},"log_verbose_level":${s.log_verbose_level},"log_format":${JSON.stringify(s.log_format)}}`
    );
  }
}

const LEVEL_TIMESTAMPS = 1;
const LEVEL_TENSORS = 2;

interface TraceValues {
  level: number;
  rate: number;
  count: number;
  logFrequency: number;
}

type TraceOverride = Partial<TraceValues>;

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

/** Trace settings (`/v2/trace/setting`, global and per model). No traces are written yet. */
export class TraceSettings {
  private global: TraceValues;
  private readonly initial: TraceValues;
  private readonly models = new Map<string, TraceOverride>();

  constructor(
    initial: Partial<TraceValues> = {},
    private readonly traceFile = '',
    private readonly mode = 'triton',
  ) {
    this.initial = { level: 0, rate: 1000, count: -1, logFrequency: 0, ...initial };
    this.global = { ...this.initial };
  }

  /** The settings as the gRPC TraceSetting RPC reports them (every value a list of strings). */
  get(model?: string): Record<string, string[]> {
    const json = JSON.parse(this.toJson(model ?? '')) as Record<string, string | string[]>;
    const out: Record<string, string[]> = {};
    for (const key of Object.keys(json)) {
      const v = json[key]!;
      out[key] = Array.isArray(v) ? v : [v];
    }
    return out;
  }

  /** Applies gRPC TraceSetting changes (an empty list clears back to the global value); returns the result. */
  update(model: string | undefined, changes: Record<string, string[]>): Record<string, string[]> {
    const body: Record<string, unknown> = {};
    for (const key of Object.keys(changes)) {
      const list = changes[key]!;
      body[key] = list.length === 0 ? null : key === 'trace_level' ? list : list[0];
    }
    this.updateFromJson(model ?? '', body);
    return this.get(model);
  }

  /** Applies a POST trace/setting body for `model` ('' = global). */
  updateFromJson(model: string, body: unknown): void {
    const req: JsonObject = typeof body === 'object' && body !== null && !Array.isArray(body) ? (body as JsonObject) : {};
    if (req['trace_file'] !== undefined) {
      throw Errors.unsupported('trace file location can not be updated through network protocol');
    }
    const update: TraceOverride = {};
    const clear: Array<keyof TraceValues> = [];

    const level = req['trace_level'];
    if (level !== undefined) {
      if (level === null) {
        clear.push('level');
      } else {
        if (!Array.isArray(level)) throw Errors.jsonValue(NON_ARRAY);
        let value = 0;
        let seen = false;
        for (const item of level) {
          if (typeof item !== 'string') throw Errors.jsonValue(NON_STRING);
          if (item === 'OFF') {
            if (level.length !== 1) throw Errors.invalidRequest("Expect only one trace level 'OFF' is specified");
            value = 0;
            seen = true;
          } else if (item === 'TIMESTAMPS') {
            value |= LEVEL_TIMESTAMPS;
            seen = true;
          } else if (item === 'TENSORS') {
            value |= LEVEL_TENSORS;
            seen = true;
          }
        }
        if (seen) update.level = value;
      }
    }
    this.readNumber(req, 'trace_rate', 'rate', `[ 0, 4294967295 ]`, update, clear);
    this.readNumber(req, 'trace_count', 'count', `[ -1, ${INT32_MAX} ]`, update, clear);
    this.readNumber(req, 'log_frequency', 'logFrequency', `[ 0, 4294967295 ]`, update, clear);

    if (model === '') {
      for (const key of clear) this.global[key] = this.initial[key];
      Object.assign(this.global, update);
    } else {
      const current = { ...(this.models.get(model) ?? {}) };
      for (const key of clear) delete current[key];
      Object.assign(current, update);
      this.models.set(model, current);
    }
  }

  private readNumber(
    req: JsonObject,
    key: string,
    field: keyof TraceValues,
    range: string,
    update: TraceOverride,
    clear: Array<keyof TraceValues>,
  ): void {
    const v = req[key];
    if (v === undefined) return;
    if (v === null) {
      clear.push(field);
      return;
    }
    if (typeof v !== 'string') throw Errors.jsonValue(NON_STRING);
    const parsed = stoi(v);
    if (parsed === 'invalid') throw Errors.invalidRequest(`Unable to parse '${key}', got: ${v}`);
    if (parsed === 'range') throw Errors.invalidRequest(`Unable to parse '${key}', value is out of range ${range}, got: ${v}`);
    if (field === 'count' && parsed < -1) {
      throw Errors.invalidRequest(`Unable to parse 'trace_count'. Expecting value >= -1, got:${v}`);
    }
    update[field] = field === 'count' ? parsed : parsed >>> 0;
  }

  toJson(model: string): string {
    const values: TraceValues = { ...this.global, ...(model === '' ? {} : this.models.get(model)) };
    const levels: string[] = [];
    if (values.level === 0) levels.push('"OFF"');
    if (values.level & LEVEL_TIMESTAMPS) levels.push('"TIMESTAMPS"');
    if (values.level & LEVEL_TENSORS) levels.push('"TENSORS"');
    let s = `{"trace_level":[${levels.join(',')}],"trace_rate":"${values.rate}","trace_count":"${values.count}"`;
    if (this.mode === 'triton') {
      s += `,"log_frequency":"${values.logFrequency}","trace_file":${JSON.stringify(this.traceFile)}`;
    }
    return s + `,"trace_mode":${JSON.stringify(this.mode)}}`;
  }
}
