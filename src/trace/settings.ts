/**
 * Trace settings, global and per model (`/v2/trace/setting`, the gRPC
 * TraceSetting RPC), with Triton's semantics and texts, and the settings in
 * force with their sampling counters (Triton's TraceSetting objects: an
 * update replaces them, so it takes effect for the next request).
 */
import { Errors } from '../errors.js';

type JsonObject = Record<string, unknown>;

const NON_STRING = 'attempt to access JSON non-string as string';
const NON_ARRAY = 'attempt to access JSON non-array as array';
/** The keys a trace/setting POST may carry (trace_file only to be refused with Triton's text). */
const UPDATABLE = new Set(['trace_file', 'trace_level', 'trace_rate', 'trace_count', 'log_frequency']);

export const LEVEL_OFF = 0;
export const LEVEL_TIMESTAMPS = 1;
export const LEVEL_TENSORS = 2;

export type TraceMode = 'triton' | 'opentelemetry';

export interface TraceValues {
  /** Bit set of LEVEL_TIMESTAMPS and LEVEL_TENSORS (0: OFF). */
  level: number;
  rate: number;
  /** Traces still to take; -1: no limit. */
  count: number;
  logFrequency: number;
}

const INT32_MIN = -2147483648;
const INT32_MAX = 2147483647;

/** C++ std::stoi: leading whitespace, sign, digits, then anything; 'invalid' or 'range' when it would throw. */
function stoi(text: string): number | 'invalid' | 'range' {
  const m = /^[\s]*([+-]?\d+)/.exec(text);
  if (m === null) return 'invalid';
  const v = Number(m[1]);
  if (v < INT32_MIN || v > INT32_MAX) return 'range';
  return v;
}

/**
 * A setting in force and its counters. Sampling follows Triton's
 * TraceSetting::SampleTrace: every `rate`-th request while `count` lasts; a
 * request that carries a W3C context (opentelemetry mode) is always traced.
 */
export class ActiveSetting {
  private seen = 0;
  /** Traces taken by the sampler, and traces written. */
  created = 0;
  collected = 0;
  remaining: number;
  readonly invalidReason: string;
  /** Slot for the file sink: finished traces of this setting not yet in a file, and how many groups they are. */
  pending: unknown = undefined;
  pendingGroups = 0;

  constructor(
    readonly values: Readonly<TraceValues>,
    readonly mode: TraceMode,
    file: string,
  ) {
    this.remaining = values.count;
    if (values.level === LEVEL_OFF) this.invalidReason = 'tracing is disabled';
    else if (values.rate === 0) this.invalidReason = 'sample rate must be non-zero';
    else if (mode === 'triton' && file === '') this.invalidReason = 'trace file name is not given';
    else this.invalidReason = '';
  }

  get valid(): boolean {
    return this.invalidReason === '' && this.remaining !== 0;
  }

  /** Whether this request is traced; `forced` when it carries a W3C context. */
  sample(forced: boolean): boolean {
    const rate = this.values.rate;
    if (rate === 0) return forced;
    if (!this.valid && !forced) return false;
    const hit = ++this.seen % rate === 0 && this.take();
    return hit || forced;
  }

  /** The rate's next request (counted here, or by a frontend thread): traced unless the count is spent. */
  take(): boolean {
    if (!this.valid) return false;
    if (this.remaining > 0) {
      this.remaining -= 1;
      this.created += 1;
    }
    return true;
  }
}

/** The settings a trace/setting reply shows beside Triton's four (opentelemetry's url, resource, bsp_*). */
export type ModeOptions = ReadonlyArray<readonly [string, string]>;

export class TraceSettings {
  private global: TraceValues;
  private readonly initial: TraceValues;
  private readonly models = new Map<string, Partial<TraceValues>>();
  private globalActive: ActiveSetting;
  private readonly modelActive = new Map<string, ActiveSetting>();
  /** Told each setting taken out of force (the file sink writes what it still holds). */
  onReplaced: ((old: ActiveSetting) => void) | undefined = undefined;

  constructor(
    initial: Partial<TraceValues> = {},
    readonly traceFile = '',
    readonly mode: TraceMode = 'triton',
    private readonly modeOptions: ModeOptions = [],
  ) {
    this.initial = { level: 0, rate: 1000, count: -1, logFrequency: 0, ...initial };
    this.global = { ...this.initial };
    this.globalActive = new ActiveSetting(this.global, mode, traceFile);
    this.enabled = this.global.level !== LEVEL_OFF;
  }

  private refreshEnabled(): void {
    let on = this.globalActive.values.level !== LEVEL_OFF;
    for (const s of this.modelActive.values()) on ||= s.values.level !== LEVEL_OFF;
    this.enabled = on;
  }

  /** True when some setting may trace: the one check an untraced request pays. */
  enabled = false;

  /**
   * The rate frontend threads may count requests at for the main thread (Tracer.threadRate): the global setting's
   * while no model has one of its own and it may trace, else 0.
   */
  get threadRate(): number {
    const g = this.globalActive;
    return this.modelActive.size === 0 && g.values.level !== LEVEL_OFF && g.valid ? g.values.rate : 0;
  }

  /** Whether nothing can be traced any more although a level is on: one global setting, its count reached. */
  get spent(): boolean {
    return this.modelActive.size === 0 && this.globalActive.remaining === 0;
  }

  /** The setting in force for `model` ('' or unknown: the global one). */
  active(model: string): ActiveSetting {
    // Most servers set no per-model setting: no lookup of the model's name then.
    return this.modelActive.size === 0 ? this.globalActive : (this.modelActive.get(model) ?? this.globalActive);
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

  /** Applies a POST trace/setting body for `model` ('' = global); nothing changes when it throws. */
  updateFromJson(model: string, body: unknown): void {
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      throw Errors.invalidRequest('a trace setting request must be a JSON object');
    }
    const req = body as JsonObject;
    // Triton passes over keys it does not update; here a key that would change nothing is refused, naming it.
    for (const key of Object.keys(req)) {
      if (UPDATABLE.has(key)) continue;
      if (key === 'trace_mode' || this.modeOptions.some(([name]) => name === key)) {
        throw Errors.unsupported(`${key} can not be updated through network protocol`);
      }
      throw Errors.invalidRequest(`unknown trace setting '${key}'`);
    }
    if (req['trace_file'] !== undefined) {
      throw Errors.unsupported('trace file location can not be updated through network protocol');
    }
    const update: Partial<TraceValues> = {};
    const clear: Array<keyof TraceValues> = [];

    const level = req['trace_level'];
    if (level !== undefined) {
      if (level === null) {
        clear.push('level');
      } else {
        if (!Array.isArray(level)) throw Errors.jsonValue(NON_ARRAY);
        if (level.length === 0) {
          throw Errors.invalidRequest('trace_level must list at least one level, or be null to clear it');
        }
        let value = 0;
        for (const item of level) {
          if (typeof item !== 'string') throw Errors.jsonValue(NON_STRING);
          if (item === 'OFF') {
            if (level.length !== 1) throw Errors.invalidRequest("Expect only one trace level 'OFF' is specified");
          } else if (item === 'TIMESTAMPS') {
            value |= LEVEL_TIMESTAMPS;
          } else if (item === 'TENSORS') {
            value |= LEVEL_TENSORS;
          } else {
            // Triton skips a level it does not know; refused here, as the flag refuses it.
            throw Errors.invalidRequest(`invalid value for trace level option: ${item}`);
          }
        }
        update.level = value;
      }
    }
    readNumber(req, 'trace_rate', 'rate', `[ 0, 4294967295 ]`, update, clear);
    readNumber(req, 'trace_count', 'count', `[ -1, ${INT32_MAX} ]`, update, clear);
    readNumber(req, 'log_frequency', 'logFrequency', `[ 0, 4294967295 ]`, update, clear);

    if (model === '') {
      const next = { ...this.global };
      for (const key of clear) next[key] = this.initial[key];
      Object.assign(next, update);
      const active = this.checked(next);
      this.global = next;
      this.replaceGlobal(active);
    } else {
      const current = { ...(this.models.get(model) ?? {}) };
      for (const key of clear) delete current[key];
      Object.assign(current, update);
      const active = this.checked({ ...this.global, ...current });
      this.models.set(model, current);
      this.replace(model, active);
    }
  }

  /** The setting that would be in force, refused as Triton refuses it when it could never trace (unless OFF). */
  private checked(values: TraceValues): ActiveSetting {
    const active = new ActiveSetting(values, this.mode, this.traceFile);
    if (!active.valid && values.level !== LEVEL_OFF) {
      throw Errors.invalidRequest(`Attempting to set invalid trace setting :${active.invalidReason}`);
    }
    return active;
  }

  private replaceGlobal(active: ActiveSetting): void {
    const old = this.globalActive;
    this.globalActive = active;
    this.onReplaced?.(old);
    this.refreshEnabled();
    // Models follow the global values in the fields they do not set themselves.
    for (const [model, override] of this.models) {
      this.replace(model, new ActiveSetting({ ...this.global, ...override }, this.mode, this.traceFile));
    }
  }

  private replace(model: string, active: ActiveSetting): void {
    const old = this.modelActive.get(model);
    this.modelActive.set(model, active);
    if (old !== undefined) this.onReplaced?.(old);
    this.refreshEnabled();
  }

  /** Every setting in force (the file sink writes what they hold at shutdown). */
  allActive(): ActiveSetting[] {
    return [this.globalActive, ...this.modelActive.values()];
  }

  toJson(model: string): string {
    const active = this.active(model);
    const values = active.values;
    const levels: string[] = [];
    if (values.level === 0) levels.push('"OFF"');
    if (values.level & LEVEL_TIMESTAMPS) levels.push('"TIMESTAMPS"');
    if (values.level & LEVEL_TENSORS) levels.push('"TENSORS"');
    // trace_count shows what is left to take, as Triton's does.
    let s = `{"trace_level":[${levels.join(',')}],"trace_rate":"${values.rate}","trace_count":"${active.remaining}"`;
    if (this.mode === 'triton') {
      s += `,"log_frequency":"${values.logFrequency}","trace_file":${JSON.stringify(this.traceFile)}`;
    }
    s += `,"trace_mode":${JSON.stringify(this.mode)}`;
    for (const [key, value] of this.modeOptions) s += `,${JSON.stringify(key)}:${JSON.stringify(value)}`;
    return s + '}';
  }
}

function readNumber(
  req: JsonObject,
  key: string,
  field: keyof TraceValues,
  range: string,
  update: Partial<TraceValues>,
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
  if (parsed === 'range')
    throw Errors.invalidRequest(`Unable to parse '${key}', value is out of range ${range}, got: ${v}`);
  if (field === 'count' && parsed < -1) {
    throw Errors.invalidRequest(`Unable to parse 'trace_count'. Expecting value >= -1, got:${v}`);
  }
  update[field] = field === 'count' ? parsed : parsed >>> 0;
}
