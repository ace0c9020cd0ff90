/**
 * The trace manager (Triton's TraceManager): the settings, the sampler the
 * frontends ask once per request, and the sink traces go to (the trace
 * file, or OpenTelemetry).
 */
import type { Logger } from 'pino';
import { OtelExporter, type OtelOptions } from './otel.js';
import { TritonFileSink } from './file-sink.js';
import {
  LEVEL_OFF,
  LEVEL_TENSORS,
  type ModeOptions,
  type TraceMode,
  TraceSettings,
  type TraceValues,
} from './settings.js';
import { Trace, TraceGroup, type TraceGroupSink } from './trace.js';
import { parseTraceparent } from './traceparent.js';

export interface TracerOptions extends Partial<TraceValues> {
  mode?: TraceMode;
  /** Triton mode: the trace file ('' : no traces until one is given at start). */
  file?: string;
  /** opentelemetry mode. */
  otel?: OtelOptions;
  /** The settings beside Triton's four that trace/setting replies show. */
  modeOptions?: ModeOptions;
  logger?: Logger;
}

const DISCARD: TraceGroupSink = { finished: () => undefined };

export class Tracer {
  readonly settings: TraceSettings;
  readonly mode: TraceMode;
  private readonly file: TritonFileSink | undefined;
  private readonly otel: OtelExporter | undefined;
  private readonly sink: TraceGroupSink;
  /** Requests whose traceparent was malformed (ignored, as the W3C spec says). */
  invalidContexts = 0;

  constructor(options: TracerOptions = {}) {
    this.mode = options.mode ?? 'triton';
    let level = options.level ?? LEVEL_OFF;
    if (this.mode === 'opentelemetry' && level & LEVEL_TENSORS) {
      options.logger?.error('Tensor level tracing is not supported by the mode: opentelemetry');
      level &= ~LEVEL_TENSORS;
    }
    const initial: Partial<TraceValues> = { level };
    if (options.rate !== undefined) initial.rate = options.rate;
    if (options.count !== undefined) initial.count = options.count;
    if (options.logFrequency !== undefined) initial.logFrequency = options.logFrequency;
    this.settings = new TraceSettings(initial, options.file ?? '', this.mode, options.modeOptions ?? []);
    if (this.mode === 'triton' && options.file) {
      this.file = new TritonFileSink(options.file, options.logger);
      this.settings.onReplaced = (old) => this.file!.replaced(old);
    }
    if (this.mode === 'opentelemetry' && options.otel !== undefined)
      this.otel = new OtelExporter(options.otel, options.logger);
    this.sink = this.file ?? this.otel ?? DISCARD;
  }

  /** Whether any setting may trace: frontends look at this before anything else. */
  get enabled(): boolean {
    return this.settings.enabled;
  }

  /** Spans dropped by the OpenTelemetry exporter (none in Triton mode). */
  get droppedSpans(): { readonly queueFull: number; readonly exportFailed: number } {
    return this.otel?.dropped ?? { queueFull: 0, exportFailed: 0 };
  }

  /**
   * A trace for a request to `model`, or undefined when it is not sampled.
   * In opentelemetry mode a valid `traceparent` joins the caller's trace and
   * forces the request to be traced (Triton reads it in that mode only).
   */
  sample(model: string, traceparent?: string, tracestate?: string): Trace | undefined {
    const setting = this.settings.active(model);
    let remote;
    if (this.otel !== undefined && traceparent !== undefined && setting.values.level !== LEVEL_OFF) {
      const parsed = parseTraceparent(traceparent, tracestate);
      if (parsed === 'invalid') this.invalidContexts += 1;
      else remote = parsed;
    }
    if (!setting.sample(remote !== undefined)) return undefined;
    const group = new TraceGroup(setting.values.level, this.sink, this.otel, setting);
    const trace = new Trace(group, undefined);
    this.otel?.startRoot(group, remote);
    return trace;
  }

  /** Shutdown: the trace file is written, queued spans exported (bounded wait). */
  async close(): Promise<void> {
    await Promise.all([this.file?.close(), this.otel?.close()]);
  }
}
