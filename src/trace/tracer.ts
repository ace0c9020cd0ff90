/**
 * The trace manager (Triton's TraceManager): the settings, the sampler the
 * frontends ask once per request, and the sink traces go to (the trace
 * file, or OpenTelemetry).
 */
import type { Logger } from 'pino';
import { OtelExporter, type OtelOptions } from './otel.js';
import { TritonFileSink } from './file-sink.js';
import { RequestLog, RequestLogEntry } from './request-log.js';
import {
  LEVEL_OFF,
  LEVEL_TENSORS,
  LEVEL_TIMESTAMPS,
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
  /** --log-requests: every `requestLogRate`-th request gets a log line (0 or undefined: off). */
  requestLogRate?: number;
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
  private readonly requestLog: RequestLog | undefined;
  /** Groups the request log takes: traced ones go on to the sink, log-only ones nowhere else. */
  private readonly loggedTraced: TraceGroupSink;
  private readonly loggedOnly: TraceGroupSink;

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
    const rate = options.requestLogRate ?? 0;
    this.requestLog = rate > 0 && options.logger !== undefined ? new RequestLog(options.logger, rate) : undefined;
    this.loggedTraced = { finished: (group) => this.logged(group, this.sink, true) };
    this.loggedOnly = { finished: (group) => this.logged(group, DISCARD, false) };
  }

  private logged(group: TraceGroup, next: TraceGroupSink, traced: boolean): void {
    next.finished(group);
    const root = group.traces[0];
    if (root === undefined || group.log === undefined) return;
    let traceId: string | number | undefined;
    if (traced) traceId = this.otel !== undefined ? this.otel.traceIdOf(group) : root.id;
    this.requestLog!.write(root, group.log, traceId);
  }

  /** Whether any setting may trace (or the request log is on): frontends look at this before anything else. */
  /** Whether sample() reads a W3C context (opentelemetry mode): else frontends need not look for one. */
  get readsContext(): boolean {
    return this.otel !== undefined;
  }

  /** Whether the request log is on (frontend threads then send infer requests to the main thread whole). */
  get logsRequests(): boolean {
    return this.requestLog !== undefined;
  }

  get enabled(): boolean {
    return this.settings.enabled || this.requestLog !== undefined;
  }

  /** Whether frontend threads must send what tracing needs with infer requests (or pick them, threadRate). */
  get threadsForward(): boolean {
    return this.requestLog !== undefined || (this.settings.enabled && !this.settings.spent);
  }

  /**
   * N > 0 while tracing is every N-th request and nothing else (Triton mode, one global setting, no request log):
   * the frontend threads then count the requests and only the picked ones carry what tracing needs, so untraced
   * requests carry nothing more (docs/tracing.md, "Frontend threads"). 0 otherwise.
   */
  get threadRate(): number {
    return this.otel === undefined && this.requestLog === undefined ? this.settings.threadRate : 0;
  }

  /** Spans dropped by the OpenTelemetry export (none in Triton mode), once every span finished so far is counted. */
  async droppedSpans(): Promise<{ readonly queueFull: number; readonly exportFailed: number }> {
    return (await this.otel?.droppedNow()) ?? { queueFull: 0, exportFailed: 0 };
  }

  /**
   * A trace for a request to `model`, or undefined when it is not sampled.
   * In opentelemetry mode a valid `traceparent` joins the caller's trace and
   * forces the request to be traced (Triton reads it in that mode only).
   */
  sample(
    model: string,
    traceparent?: string,
    tracestate?: string,
    picked?: boolean,
    /** A frontend thread served the request: when it began reading it (ns since BASE_HR), the root span's start. */
    start?: number,
  ): Trace | undefined {
    const setting = this.settings.active(model);
    if (picked !== undefined) {
      // Counted by a frontend thread (threadRate): picked or not, its count is not this one's.
      if (!picked || setting.values.level === LEVEL_OFF || !setting.take()) return undefined;
      const group = new TraceGroup(setting.values.level, this.sink, this.otel, setting);
      return new Trace(group, undefined);
    }
    let remote;
    if (this.otel !== undefined && traceparent !== undefined && setting.values.level !== LEVEL_OFF) {
      const parsed = parseTraceparent(traceparent, tracestate);
      if (parsed === 'invalid') this.invalidContexts += 1;
      else remote = parsed;
    }
    const traced = setting.values.level !== LEVEL_OFF && setting.sample(remote !== undefined);
    const logged = this.requestLog !== undefined && this.requestLog.pick();
    if (!traced && !logged) return undefined;
    if (!logged) {
      const group = new TraceGroup(setting.values.level, this.sink, this.otel, setting);
      const trace = new Trace(group, undefined);
      this.otel?.startRoot(group, remote, start);
      return trace;
    }
    // A logged request records its timestamps whatever the level, for the log line's timings.
    const group = traced
      ? new TraceGroup(setting.values.level | LEVEL_TIMESTAMPS, this.loggedTraced, this.otel, setting)
      : new TraceGroup(LEVEL_TIMESTAMPS, this.loggedOnly, undefined, undefined);
    group.log = new RequestLogEntry();
    const trace = new Trace(group, undefined);
    if (traced) this.otel?.startRoot(group, remote, start);
    return trace;
  }

  /** Shutdown: the trace file is written, queued spans exported (bounded wait). */
  async close(): Promise<void> {
    await Promise.all([this.file?.close(), this.otel?.close()]);
  }
}
