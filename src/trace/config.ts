/**
 * tritonserver's trace flags: `--trace-config [<mode>,]<setting>=<value>`
 * and the deprecated `--trace-file`, `--trace-level`, `--trace-rate`,
 * `--trace-count`, `--trace-log-frequency`, read as Triton reads them (its
 * messages and warnings), and checked further where Triton lets a mistake
 * pass silently (an unknown setting, a malformed URL, an unwritable file).
 */
import { accessSync, constants, existsSync } from 'node:fs';
import path from 'node:path';
import { Errors } from '../errors.js';
import type { OtelOptions } from './otel.js';
import { LEVEL_OFF, LEVEL_TENSORS, LEVEL_TIMESTAMPS, type TraceMode } from './settings.js';
import type { TracerOptions } from './tracer.js';

export const DEFAULT_OTLP_URL = 'http://localhost:4318/v1/traces';

export interface TraceFlags {
  config: readonly string[];
  file?: string | undefined;
  level: readonly string[];
  rate?: string | undefined;
  count?: string | undefined;
  logFrequency?: string | undefined;
}

export interface TraceFlagResult {
  options: TracerOptions;
  /** Triton's deprecation and override warnings, printed at start. */
  warnings: string[];
}

function bad(option: string, detail: string): Error {
  return Errors.config(`Bad option: "${option}".\n${detail}`);
}

/** std::stoi as Triton's ParseOption<int> uses it, without accepting trailing text. */
function parseInt32(option: string, text: string, min = -2147483648): number {
  if (!/^\s*[+-]?\d+$/.test(text)) throw bad(option, `Invalid option value. Got ${text}`);
  const v = Number(text);
  if (v < -2147483648 || v > 2147483647) throw bad(option, `Provided option value is out of bound. Got ${text}`);
  if (v < min) throw bad(option, `Invalid option value. Got ${text} (the smallest value is ${min})`);
  return v;
}

function parseUint32(option: string, text: string): number {
  if (!/^\s*\+?\d+$/.test(text)) throw bad(option, `Invalid option value. Got ${text}`);
  const v = Number(text);
  if (v > 4294967295) throw bad(option, `Provided option value is out of bound. Got ${text}`);
  return v;
}

/** ParseTraceLevelOption. */
function parseLevel(option: string, text: string): number {
  const v = text.toLowerCase();
  if (v === 'false' || v === 'off') return LEVEL_OFF;
  if (v === 'true' || v === 'on' || v === 'min' || v === 'max' || v === 'timestamps') return LEVEL_TIMESTAMPS;
  if (v === 'tensors') return LEVEL_TENSORS;
  throw bad(option, `invalid value for trace level option: ${text}`);
}

function parseMode(text: string): TraceMode {
  const v = text.toLowerCase();
  if (v === 'triton' || v === 'opentelemetry') return v;
  throw Errors.config(
    `invalid value for trace mode option: ${text}. Available options are "triton" and "opentelemetry"`,
  );
}

interface ConfigEntry {
  mode: TraceMode | '';
  setting: string;
  value: string;
}

/** ParseTraceConfigOption: `<mode>,<setting>=<value>` or `<setting>=<value>`. */
function parseConfigEntry(arg: string): ConfigEntry {
  const comma = arg.indexOf(',');
  const eq = arg.indexOf('=', comma + 1);
  let mode: TraceMode | '' = '';
  if (comma === 0) {
    throw Errors.config(
      `No trace mode specified. --trace-config option format is <trace ` +
      `mode>,<setting>=<value> or <setting>=<value>. Got ${arg}`,
    );
  }
  // A comma after the '=' belongs to the value (opentelemetry,resource=a=b,c has none before it).
  const firstEq = arg.indexOf('=');
  if (comma > 0 && (firstEq === -1 || comma < firstEq)) mode = parseMode(arg.slice(0, comma));
  const start = mode === '' ? 0 : comma + 1;
  const at = mode === '' ? firstEq : eq;
  const setting = at < 0 ? '' : arg.slice(start, at);
  const value = at < 0 ? '' : arg.slice(at + 1);
  if (at < 0 || setting === '' || value === '') {
    throw Errors.config(`--trace-config option format is '<trace mode>,<setting>=<value>'. Got ${arg}`);
  }
  return { mode, setting, value };
}

/** OTEL_RESOURCE_ATTRIBUTES: `key=value` pairs, comma-separated, percent-encoded. */
export function parseResourceAttributes(text: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (text === undefined || text.trim() === '') return out;
  for (const pair of text.split(',')) {
    const eq = pair.indexOf('=');
    if (eq <= 0)
      throw Errors.config(`OTEL_RESOURCE_ATTRIBUTES must be key=value pairs separated by commas, got '${pair}'`);
    try {
      out[decodeURIComponent(pair.slice(0, eq).trim())] = decodeURIComponent(pair.slice(eq + 1).trim());
    } catch {
      throw Errors.config(`OTEL_RESOURCE_ATTRIBUTES has a malformed percent-encoding in '${pair}'`);
    }
  }
  return out;
}

/** The trace file must be writable at start, so a wrong path fails the start, not the shutdown. */
function checkWritable(flag: string, file: string): void {
  const target = existsSync(file) ? file : path.dirname(path.resolve(file));
  try {
    accessSync(target, constants.W_OK);
  } catch (err) {
    throw Errors.config(
      `${flag}: the trace file '${file}' cannot be written (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
    );
  }
}

export function parseTraceFlags(flags: TraceFlags, env: NodeJS.ProcessEnv = process.env): TraceFlagResult {
  const warnings: string[] = [];
  const options: TracerOptions = {};
  let level = LEVEL_OFF;
  let explicitOff = false;
  let fileFlag = '--trace-file';

  if (flags.file !== undefined) {
    warnings.push(
      "Warning: '--trace-file' has been deprecated and will be removed in future " +
      "releases. Please use '--trace-config triton,file=<filepath> instead.",
    );
  }
  for (const text of flags.level) {
    const l = parseLevel('--trace-level', text);
    explicitOff ||= l === LEVEL_OFF;
    level |= l;
  }
  if (flags.level.length > 0) {
    warnings.push(
      "Warning: '--trace-level' has been deprecated and will be removed in future " +
      "releases. Please use '--trace-config level=<OFF|TIMESTAMPS|TENSORS> instead.",
    );
  }
  if (flags.rate !== undefined) {
    warnings.push(
      "Warning: '--trace-rate' has been deprecated and will be removed in " +
      "future releases. Please use '--trace-config rate=<rate value> instead.",
    );
    options.rate = parseInt32('--trace-rate', flags.rate, 0);
  }
  if (flags.count !== undefined) {
    warnings.push(
      "Warning: '--trace-count' has been deprecated and will be removed in " +
      "future releases. Please use '--trace-config count=<count value> instead.",
    );
    options.count = parseInt32('--trace-count', flags.count, -1);
  }
  if (flags.logFrequency !== undefined) {
    warnings.push(
      "Warning: '--trace-log-frequency' has been deprecated and will be removed in future " +
      "releases. Please use '--trace-config triton,log-frequency=<log frequency value> instead.",
    );
    options.logFrequency = parseInt32('--trace-log-frequency', flags.logFrequency, 0);
  }

  const entries = flags.config.map(parseConfigEntry);
  let mode: TraceMode = 'triton';
  for (const e of entries) {
    if (e.mode !== '') continue;
    const option = `--trace-config ${e.setting}`;
    switch (e.setting) {
      case 'rate':
        if (flags.rate !== undefined)
          warnings.push(
            "Warning: Overriding deprecated '--trace-rate' in favor of provided rate value in --trace-config!",
          );
        options.rate = parseInt32(option, e.value, 0);
        break;
      case 'level': {
        if (flags.level.length > 0)
          warnings.push("Warning: Overriding deprecated '--trace-level' in favor of provided level in --trace-config!");
        const l = parseLevel(option, e.value);
        explicitOff ||= l === LEVEL_OFF;
        level |= l;
        break;
      }
      case 'mode':
        mode = parseMode(e.value);
        break;
      case 'count':
        if (flags.count !== undefined)
          warnings.push("Warning: Overriding deprecated '--trace-count' in favor of provided count in --trace-config!");
        options.count = parseInt32(option, e.value, -1);
        break;
      default:
        throw bad(option, `unknown trace setting '${e.setting}'; the global settings are rate, level, count and mode`);
    }
  }
  options.mode = mode;

  let file = flags.file;
  const otel = { url: DEFAULT_OTLP_URL, resources: [] as Array<[string, string]>, bsp: new Map<string, number>() };
  for (const e of entries) {
    if (e.mode === '') continue;
    if (e.mode === 'triton') {
      const option = `--trace-config triton,${e.setting}`;
      if (e.setting === 'file') {
        if (flags.file !== undefined)
          warnings.push("Warning: Overriding deprecated '--trace-file' in favor of provided file in --trace-config!");
        file = e.value;
        fileFlag = '--trace-config triton,file';
      } else if (e.setting === 'log-frequency') {
        if (flags.logFrequency !== undefined) {
          warnings.push(
            "Warning: Overriding deprecated '--trace-log-frequency' " +
            "in favor of provided log-frequency in --trace-config!",
          );
        }
        options.logFrequency = parseInt32(option, e.value, 0);
      } else {
        throw bad(option, `unknown trace setting '${e.setting}'; triton mode takes file and log-frequency`);
      }
      continue;
    }
    const option = `--trace-config opentelemetry,${e.setting}`;
    switch (e.setting) {
      case 'url': {
        let url: URL;
        try {
          url = new URL(e.value);
        } catch {
          throw bad(option, `Invalid URL. Got ${e.value}`);
        }
        if (url.protocol !== 'http:' && url.protocol !== 'https:')
          throw bad(option, `the URL must be http:// or https://. Got ${e.value}`);
        otel.url = e.value;
        break;
      }
      case 'resource': {
        const eq = e.value.indexOf('=');
        if (eq <= 0) throw bad(option, `a resource is <key>=<value>. Got ${e.value}`);
        otel.resources.push([e.value.slice(0, eq), e.value.slice(eq + 1)]);
        break;
      }
      case 'bsp_max_queue_size':
      case 'bsp_schedule_delay':
      case 'bsp_max_export_batch_size': {
        const v = parseUint32(option, e.value);
        if (v === 0 && e.setting !== 'bsp_schedule_delay')
          throw bad(option, `Invalid option value. Got ${e.value} (must be at least 1)`);
        otel.bsp.set(e.setting, v);
        break;
      }
      default:
        throw bad(
          option,
          `unknown trace setting '${e.setting}'; opentelemetry mode takes url, resource, ` +
          `bsp_max_queue_size, bsp_schedule_delay and bsp_max_export_batch_size`,
        );
    }
  }
  options.level = explicitOff ? LEVEL_OFF : level;

  if (mode === 'triton') {
    if (file !== undefined && file !== '') {
      checkWritable(fileFlag, file);
      options.file = file;
    }
  } else {
    if (flags.file !== undefined)
      warnings.push("Warning: '--trace-file' is deprecated and will be ignored with opentelemetry tracing mode. ");
    if (flags.logFrequency !== undefined) {
      warnings.push(
        "Warning: '--trace-log-frequency' is deprecated and will be ignored with opentelemetry tracing mode.",
      );
    }
    const bsp = (setting: string, envName: string, fallback: number): number => {
      const given = otel.bsp.get(setting);
      if (given !== undefined) return given;
      const fromEnv = env[envName];
      return fromEnv === undefined ? fallback : parseUint32(envName, fromEnv);
    };
    const resource: Record<string, string> = {
      'service.name': 'nereid',
      ...parseResourceAttributes(env.OTEL_RESOURCE_ATTRIBUTES),
    };
    for (const [k, v] of otel.resources) resource[k] = v;
    const o: OtelOptions = {
      url: otel.url,
      resource,
      bspMaxQueueSize: bsp('bsp_max_queue_size', 'OTEL_BSP_MAX_QUEUE_SIZE', 2048),
      bspScheduleDelayMs: bsp('bsp_schedule_delay', 'OTEL_BSP_SCHEDULE_DELAY', 5000),
      bspMaxExportBatchSize: bsp('bsp_max_export_batch_size', 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE', 512),
    };
    options.otel = o;
    options.modeOptions = [
      ['url', o.url],
      ['resource', Object.entries(resource).map(([k, v]) => `${k}=${v}`).join(',')],
      ['bsp_max_queue_size', String(o.bspMaxQueueSize)],
      ['bsp_schedule_delay', String(o.bspScheduleDelayMs)],
      ['bsp_max_export_batch_size', String(o.bspMaxExportBatchSize)],
    ];
  }
  return { options, warnings };
}
