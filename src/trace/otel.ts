/**
 * OpenTelemetry mode: spans made as Triton makes them, with the official
 * SDK, exported over OTLP/HTTP (protobuf) through a batch span processor.
 * A root `InferRequest` span holds the frontend's timestamps as events;
 * each model's request is a span named after the model (an ensemble step's
 * nested in the ensemble's, a BLS call's in its caller's) holding the
 * core's timestamps, with a `compute` span around the execution.
 *
 * An export never delays a request: spans past the queue bound, and those
 * of a batch the collector did not take, are dropped and counted.
 */
import {
  ROOT_CONTEXT,
  SpanKind,
  type Span,
  type SpanContext,
  type Tracer as OtelTracer,
  trace as traceApi,
} from '@opentelemetry/api';
import { ExportResultCode, TraceState, type ExportResult } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOnSampler,
  BasicTracerProvider,
  BatchSpanProcessor,
  type ReadableSpan,
  type SpanExporter,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import type { Logger } from 'pino';
import type { TraceStampName } from '../types/api.js';
import type { RemoteContext } from './traceparent.js';
import { contextJson } from './traceparent.js';
import type { Trace, TraceGroup, TraceGroupSink, TraceRecorder } from './trace.js';

export interface OtelOptions {
  url: string;
  /** Resource attributes (service.name and the rest). */
  resource: Readonly<Record<string, string>>;
  bspMaxQueueSize: number;
  bspScheduleDelayMs: number;
  bspMaxExportBatchSize: number;
}

/** hrtime (ns) → the wall-clock time the SDK takes, measured once: spans keep the monotonic clock's durations. */
const EPOCH_OFFSET_NS =
  BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6)) - process.hrtime.bigint();

function wallTime(ns: bigint): [number, number] {
  const t = ns + EPOCH_OFFSET_NS;
  return [Number(t / 1_000_000_000n), Number(t % 1_000_000_000n)];
}

/** Counts the spans that leave the processor's queue, and those whose export failed. */
class CountingExporter implements SpanExporter {
  taken = 0;
  constructor(
    private readonly inner: SpanExporter,
    private readonly lost: (count: number, error: Error | undefined) => void,
  ) {}

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    this.taken += spans.length;
    this.inner.export(spans, (result) => {
      if (result.code !== ExportResultCode.SUCCESS) this.lost(spans.length, result.error);
      done(result);
    });
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}

/** The batch span processor, with the spans it would drop for a full queue counted before it drops them. */
class CountingProcessor implements SpanProcessor {
  private given = 0;
  constructor(
    private readonly inner: BatchSpanProcessor,
    private readonly exporter: CountingExporter,
    private readonly maxQueueSize: number,
    private readonly dropped: (count: number) => void,
  ) {}

  onStart(): void {}

  onEnd(span: ReadableSpan): void {
    if (this.given - this.exporter.taken >= this.maxQueueSize) this.dropped(1);
    else this.given += 1;
    this.inner.onEnd(span);
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }
}

/** The open spans of one trace, innermost last. */
type SpanStack = Span[];

const FRONTEND_PREFIXES = ['HTTP_', 'GRPC_'];

export class OtelExporter implements TraceRecorder, TraceGroupSink {
  private readonly provider: BasicTracerProvider;
  private readonly tracer: OtelTracer;
  /** Spans dropped: queue full, or the collector did not take them (nereid_trace_spans_dropped_total). */
  readonly dropped = { queueFull: 0, exportFailed: 0 };
  private failing = false;

  constructor(
    options: OtelOptions,
    private readonly logger: Logger | undefined,
  ) {
    const exporter = new CountingExporter(new OTLPTraceExporter({ url: options.url }), (count, error) => {
      this.dropped.exportFailed += count;
      if (!this.failing) {
        this.failing = true;
        this.logger?.warn(
          { url: options.url, err: error },
          `trace export failed; ${count} spans dropped (counted in nereid_trace_spans_dropped_total)`,
        );
      }
    });
    const batch = new BatchSpanProcessor(exporter, {
      maxQueueSize: options.bspMaxQueueSize,
      scheduledDelayMillis: options.bspScheduleDelayMs,
      maxExportBatchSize: Math.min(options.bspMaxExportBatchSize, options.bspMaxQueueSize),
    });
    const processor = new CountingProcessor(
      batch,
      exporter,
      options.bspMaxQueueSize,
      (n) => (this.dropped.queueFull += n),
    );
    this.provider = new BasicTracerProvider({
      resource: resourceFromAttributes({ ...options.resource }),
      sampler: new AlwaysOnSampler(),
      spanProcessors: [processor],
    });
    this.tracer = this.provider.getTracer('triton-server');
  }

  /** Starts the group's `InferRequest` span, joined to the caller's trace when the request carried one. */
  startRoot(group: TraceGroup, remote: RemoteContext | undefined): void {
    let parent = ROOT_CONTEXT;
    if (remote !== undefined) {
      const ctx: SpanContext = {
        traceId: remote.traceId,
        spanId: remote.spanId,
        traceFlags: remote.flags,
        isRemote: true,
        traceState: remote.traceState === undefined ? undefined : new TraceState(remote.traceState),
      };
      parent = traceApi.setSpanContext(ROOT_CONTEXT, ctx);
    }
    group.root = this.tracer.startSpan(
      'InferRequest',
      { kind: SpanKind.SERVER, startTime: wallTime(process.hrtime.bigint()) },
      parent,
    );
  }

  stamped(trace: Trace, name: TraceStampName, ns: bigint): void {
    const root = trace.group.root as Span | undefined;
    if (root === undefined) return;
    const time = wallTime(ns);
    if (name.startsWith(FRONTEND_PREFIXES[0]!) || name.startsWith(FRONTEND_PREFIXES[1]!)) {
      root.addEvent(name, time);
      return;
    }
    const stack = ((trace.spans as SpanStack | undefined) ??= []);
    if (name === 'REQUEST_START') {
      // A spawned trace's span nests in its parent's innermost open span (the ensemble's or the caller's model span).
      const parentStack = trace.parent?.spans as SpanStack | undefined;
      const parentSpan = parentStack?.[parentStack.length - 1] ?? root;
      const span = this.tracer.startSpan(
        trace.modelName,
        {
          kind: SpanKind.SERVER,
          startTime: time,
          attributes: {
            'triton.model_name': trace.modelName,
            'triton.model_version': Number(trace.modelVersion),
            'triton.trace_id': trace.id,
            'triton.trace_parent_id': trace.parentId,
            ...(trace.requestId !== '' ? { 'triton.request_id': trace.requestId } : {}),
          },
        },
        traceApi.setSpan(ROOT_CONTEXT, parentSpan),
      );
      stack.push(span);
    } else if (name === 'COMPUTE_START') {
      const parentSpan = stack[stack.length - 1] ?? root;
      stack.push(
        this.tracer.startSpan(
          'compute',
          { kind: SpanKind.SERVER, startTime: time },
          traceApi.setSpan(ROOT_CONTEXT, parentSpan),
        ),
      );
    }
    const top = stack[stack.length - 1];
    if (top === undefined) return;
    top.addEvent(name, time);
    if (name === 'REQUEST_END' || name === 'COMPUTE_END') {
      top.end(time);
      stack.pop();
    }
  }

  context(trace: Trace): string | undefined {
    const stack = trace.spans as SpanStack | undefined;
    const span = stack?.[stack.length - 1] ?? (trace.group.root as Span | undefined);
    if (span === undefined) return undefined;
    const c = span.spanContext();
    return contextJson(c.traceId, c.spanId, c.traceFlags, c.traceState?.serialize());
  }

  /** The W3C trace id of the group's spans. */
  traceIdOf(group: TraceGroup): string | undefined {
    return (group.root as Span | undefined)?.spanContext().traceId;
  }

  ended(group: TraceGroup): void {
    const now = wallTime(process.hrtime.bigint());
    for (const trace of group.traces) {
      const stack = trace.spans as SpanStack | undefined;
      if (stack === undefined) continue;
      while (stack.length > 0) stack.pop()!.end(now);
    }
    (group.root as Span | undefined)?.end(now);
  }

  finished(): void {}

  /** Exports what is queued, waiting at most `timeoutMs` (a collector that is down must not hold the shutdown). */
  async close(timeoutMs = 5000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.provider.shutdown().catch(() => undefined),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
        timer.unref();
      }),
    ]);
    clearTimeout(timer);
  }
}
