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
import { randomFillSync } from 'node:crypto';
import { type HrTime, type SpanContext, SpanKind, type Attributes } from '@opentelemetry/api';
import { ExportResultCode, TraceState, type ExportResult, type InstrumentationScope } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { type Resource, resourceFromAttributes } from '@opentelemetry/resources';
import {
  BatchSpanProcessor,
  type ReadableSpan,
  type SpanExporter,
  type SpanProcessor,
  type TimedEvent,
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

/**
 * hrtime (ns) → the wall-clock time the SDK takes, from one reading of both clocks: spans keep the monotonic
 * clock's durations. Times are taken relative to that reading, as exact integers in a double (for 104 days).
 */
const BASE_HR = process.hrtime.bigint();
const BASE_WALL_NS = BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));
const BASE_SEC = Number(BASE_WALL_NS / 1_000_000_000n);
const BASE_NSEC = Number(BASE_WALL_NS % 1_000_000_000n);

function wallTime(ns: bigint): HrTime {
  const r = Number(ns - BASE_HR);
  const s = Math.floor(r / 1e9);
  let sec = BASE_SEC + s;
  let nsec = BASE_NSEC + (r - s * 1e9);
  if (nsec >= 1e9) {
    sec += 1;
    nsec -= 1e9;
  }
  return [sec, nsec];
}

/** Random ids from a pool refilled 4 KiB at a time (the SDK's generator draws Math.random per id). */
const idPool = Buffer.allocUnsafe(4096);
let idAt = idPool.length;
function randomHex(bytes: number): string {
  if (idAt + bytes > idPool.length) {
    randomFillSync(idPool);
    idAt = 0;
  }
  idAt += bytes;
  return idPool.toString('hex', idAt - bytes, idAt);
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

/** The root span of a group: its ids, the caller's context, when it began. */
interface RootSpan {
  traceId: string | undefined;
  spanId: string | undefined;
  readonly remote: RemoteContext | undefined;
  readonly start: bigint;
}

/**
 * The spans of one trace while it runs: which are open (by ordinal, innermost last), each span's parent
 * (ordinal in this trace; ROOT; or PARENT_SPAN - k for span k of the parent trace), and ids handed out.
 */
interface TraceSpans {
  readonly open: number[];
  readonly parents: number[];
  ids: string[] | undefined;
}

const ROOT = -1;
const PARENT_SPAN = -2;
const SAMPLED = 1;
const NO_LINKS: ReturnType<() => ReadableSpan['links']> = [];
const STATUS_UNSET = { code: 0 };

/** A finished span as the batch processor and the OTLP exporter read it, built once the request ended. */
class FinishedSpan implements ReadableSpan {
  readonly kind = SpanKind.SERVER;
  readonly status = STATUS_UNSET;
  readonly links = NO_LINKS;
  readonly ended = true;
  readonly droppedAttributesCount = 0;
  readonly droppedEventsCount = 0;
  readonly droppedLinksCount = 0;
  readonly events: TimedEvent[] = [];
  endTime: HrTime = [0, 0];
  private readonly context: SpanContext;

  constructor(
    readonly name: string,
    traceId: string,
    spanId: string,
    traceState: TraceState | undefined,
    readonly parentSpanContext: SpanContext | undefined,
    readonly startTime: HrTime,
    readonly attributes: Attributes,
    readonly resource: Resource,
    readonly instrumentationScope: InstrumentationScope,
  ) {
    this.context = { traceId, spanId, traceFlags: SAMPLED, traceState };
  }

  spanContext(): SpanContext {
    return this.context;
  }

  get duration(): HrTime {
    let s = this.endTime[0] - this.startTime[0];
    let n = this.endTime[1] - this.startTime[1];
    if (n < 0) {
      s -= 1;
      n += 1e9;
    }
    return [s, n];
  }
}

const NO_ATTRIBUTES: Attributes = {};

function isFrontendStamp(name: TraceStampName): boolean {
  return name.startsWith('HTTP_') || name.startsWith('GRPC_');
}

/**
 * Spans are not made while a request runs: the traces record their timestamps (and which span is open, for
 * the W3C context a callee asks for), and the spans are built from them when the request ended, in one go,
 * then handed to the SDK's batch span processor and OTLP exporter.
 */
export class OtelExporter implements TraceRecorder, TraceGroupSink {
  private readonly processor: SpanProcessor;
  private readonly resource: Resource;
  private readonly scope: InstrumentationScope = { name: 'triton-server' };
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
    this.processor = new CountingProcessor(
      batch,
      exporter,
      options.bspMaxQueueSize,
      (n) => (this.dropped.queueFull += n),
    );
    this.resource = resourceFromAttributes({ ...options.resource });
  }

  /** Starts the group's `InferRequest` span, joined to the caller's trace when the request carried one. */
  startRoot(group: TraceGroup, remote: RemoteContext | undefined): void {
    group.root = {
      traceId: remote?.traceId,
      spanId: undefined,
      remote,
      start: process.hrtime.bigint(),
    } satisfies RootSpan;
  }

  /** Keeps track of the open spans; the stamp itself is in the trace. */
  stamped(trace: Trace, name: TraceStampName): void {
    if (isFrontendStamp(name)) return;
    let spans = trace.spans as TraceSpans | undefined;
    if (spans === undefined) trace.spans = spans = { open: [], parents: [], ids: undefined };
    const open = spans.open;
    if (name === 'REQUEST_START') {
      // A spawned trace's span nests in its parent's innermost open span (the ensemble's or the caller's model span).
      const parentOpen = (trace.parent?.spans as TraceSpans | undefined)?.open;
      const top = parentOpen === undefined || parentOpen.length === 0 ? undefined : parentOpen[parentOpen.length - 1]!;
      open.push(spans.parents.length);
      spans.parents.push(top === undefined ? ROOT : PARENT_SPAN - top);
    } else if (name === 'COMPUTE_START') {
      const top = open.length === 0 ? ROOT : open[open.length - 1]!;
      open.push(spans.parents.length);
      spans.parents.push(top);
    } else if (name === 'REQUEST_END' || name === 'COMPUTE_END') {
      open.pop();
    }
  }

  context(trace: Trace): string | undefined {
    const root = trace.group.root as RootSpan | undefined;
    if (root === undefined) return undefined;
    const spans = trace.spans as TraceSpans | undefined;
    const open = spans?.open;
    const spanId =
      open === undefined || open.length === 0 ? this.rootSpanId(root) : this.spanId(spans!, open[open.length - 1]!);
    return contextJson(this.traceId(root), spanId, SAMPLED, root.remote?.traceState);
  }

  private traceId(root: RootSpan): string {
    return (root.traceId ??= randomHex(16));
  }

  private rootSpanId(root: RootSpan): string {
    return (root.spanId ??= randomHex(8));
  }

  private spanId(spans: TraceSpans, ordinal: number): string {
    const ids = (spans.ids ??= []);
    return (ids[ordinal] ??= randomHex(8));
  }

  /** The W3C trace id of the group's spans. */
  traceIdOf(group: TraceGroup): string | undefined {
    const root = group.root as RootSpan | undefined;
    return root === undefined ? undefined : this.traceId(root);
  }

  ended(): void {}

  /** The request ended: its spans, built from the recorded timestamps, go to the batch span processor. */
  finished(group: TraceGroup): void {
    const root = group.root as RootSpan | undefined;
    if (root === undefined) return;
    const end = wallTime(process.hrtime.bigint());
    const traceId = this.traceId(root);
    const remote = root.remote;
    const traceState = remote?.traceState === undefined ? undefined : new TraceState(remote.traceState);
    const rootParent: SpanContext | undefined =
      remote === undefined
        ? undefined
        : { traceId, spanId: remote.spanId, traceFlags: remote.flags, isRemote: true, traceState };
    const rootSpan = new FinishedSpan(
      'InferRequest',
      traceId,
      this.rootSpanId(root),
      traceState,
      rootParent,
      wallTime(root.start),
      NO_ATTRIBUTES,
      this.resource,
      this.scope,
    );
    rootSpan.endTime = end;
    const out: FinishedSpan[] = [];
    // Each trace's spans by ordinal, for the traces spawned from it.
    const built = new Map<Trace, FinishedSpan[]>();
    for (const trace of group.traces) {
      const spans = trace.spans as TraceSpans | undefined;
      const mine: FinishedSpan[] = [];
      built.set(trace, mine);
      const open: FinishedSpan[] = [];
      const names = trace.stampNames;
      const times = trace.stampTimes;
      for (let i = 0; i < names.length; i++) {
        const name = names[i]!;
        const time = wallTime(times[i]!);
        if (isFrontendStamp(name)) {
          rootSpan.events.push({ name, time });
          continue;
        }
        if (name === 'REQUEST_START' || name === 'COMPUTE_START') {
          const ordinal = mine.length;
          const parentRef = spans!.parents[ordinal]!;
          let parent: FinishedSpan;
          if (parentRef === ROOT) parent = rootSpan;
          else if (parentRef >= 0) parent = mine[parentRef]!;
          else parent = built.get(trace.parent!)?.[PARENT_SPAN - parentRef] ?? rootSpan;
          const span = new FinishedSpan(
            name === 'REQUEST_START' ? trace.modelName : 'compute',
            traceId,
            spans!.ids?.[ordinal] ?? randomHex(8),
            traceState,
            parent.spanContext(),
            time,
            name === 'REQUEST_START' ? modelAttributes(trace) : NO_ATTRIBUTES,
            this.resource,
            this.scope,
          );
          mine.push(span);
          open.push(span);
        }
        const top = open[open.length - 1];
        if (top === undefined) continue;
        top.events.push({ name, time });
        if (name === 'REQUEST_END' || name === 'COMPUTE_END') {
          top.endTime = time;
          open.pop();
        }
      }
      for (const span of open) span.endTime = end;
      // Spans go out in the order they ended, as the SDK hands them on.
      for (let i = mine.length - 1; i >= 0; i--) out.push(mine[i]!);
    }
    for (const span of out) this.processor.onEnd(span);
    this.processor.onEnd(rootSpan);
  }

  /** Exports what is queued, waiting at most `timeoutMs` (a collector that is down must not hold the shutdown). */
  async close(timeoutMs = 5000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.processor.shutdown().catch(() => undefined),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
        timer.unref();
      }),
    ]);
    clearTimeout(timer);
  }
}

function modelAttributes(trace: Trace): Attributes {
  const a: Attributes = {
    'triton.model_name': trace.modelName,
    'triton.model_version': Number(trace.modelVersion),
    'triton.trace_id': trace.id,
    'triton.trace_parent_id': trace.parentId,
  };
  if (trace.requestId !== '') a['triton.request_id'] = trace.requestId;
  return a;
}
