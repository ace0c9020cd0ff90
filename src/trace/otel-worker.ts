/**
 * The OpenTelemetry export thread: turns the compact records of finished
 * requests (otel-record.ts) into finished spans and hands them to the SDK's
 * batch span processor and OTLP/HTTP exporter, so that span objects,
 * protobuf encoding and the HTTP exchange stay off the server's event loop.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { type Attributes, type HrTime, type SpanContext, SpanKind } from '@opentelemetry/api';
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
import {
  type ExportInit,
  type FromExportThread,
  NONE,
  OP_END,
  OP_EVENT,
  SPAN_COMPUTE,
  SPAN_MODEL,
  SPAN_ROOT,
  STAMP_NAMES,
  type SpanBatch,
  type ToExportThread,
} from './otel-record.js';
import { randomHex } from './random-id.js';
import { lowerThisThread } from './thread-priority.js';

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

const SAMPLED = 1;
const NO_LINKS: ReturnType<() => ReadableSpan['links']> = [];
const STATUS_UNSET = { code: 0 };
const NO_ATTRIBUTES: Attributes = {};

/**
 * A finished span as the batch processor and the OTLP exporter read it, built once the request ended. What every
 * span shares lives on the prototype and the rest is assigned once in the constructor (`declare`: no class field
 * definitions), so a span is one small object of one shape.
 */
class FinishedSpan implements ReadableSpan {
  declare readonly kind: SpanKind;
  declare readonly status: ReadableSpan['status'];
  declare readonly links: ReadableSpan['links'];
  declare readonly ended: boolean;
  declare readonly droppedAttributesCount: number;
  declare readonly droppedEventsCount: number;
  declare readonly droppedLinksCount: number;
  declare readonly name: string;
  declare readonly parentSpanContext: SpanContext | undefined;
  declare readonly startTime: HrTime;
  declare readonly endTime: HrTime;
  declare readonly attributes: Attributes;
  declare readonly resource: Resource;
  declare readonly instrumentationScope: InstrumentationScope;
  declare readonly events: TimedEvent[];
  declare private readonly context: SpanContext;

  constructor(
    name: string,
    context: SpanContext,
    parentSpanContext: SpanContext | undefined,
    startTime: HrTime,
    endTime: HrTime,
    attributes: Attributes,
  ) {
    this.name = name;
    this.context = context;
    this.parentSpanContext = parentSpanContext;
    this.startTime = startTime;
    this.endTime = endTime;
    this.attributes = attributes;
    this.events = [];
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

const init = workerData as ExportInit;
const port = parentPort!;
// Export yields the CPU to serving (docs/tracing.md); a system that refuses is told once, at debug.
const refused = lowerThisThread(init.nice);
if (refused !== undefined) port.postMessage({ t: 'nice', message: refused } satisfies FromExportThread);
const dropped = { queueFull: 0, exportFailed: 0 };
const exporter = new CountingExporter(new OTLPTraceExporter({ url: init.url }), (count, error) => {
  dropped.exportFailed += count;
  const message = error?.message ?? 'the collector did not take the spans';
  post({ t: 'failed', count, message, dropped: { ...dropped } });
});
const processor = new CountingProcessor(
  new BatchSpanProcessor(exporter, {
    maxQueueSize: init.bspMaxQueueSize,
    scheduledDelayMillis: init.bspScheduleDelayMs,
    maxExportBatchSize: Math.min(init.bspMaxExportBatchSize, init.bspMaxQueueSize),
  }),
  exporter,
  init.bspMaxQueueSize,
  (n) => (dropped.queueFull += n),
);
const resource: Resource = resourceFromAttributes({ ...init.resource });
const scope: InstrumentationScope = { name: 'triton-server' };
Object.assign(FinishedSpan.prototype, {
  kind: SpanKind.SERVER,
  status: STATUS_UNSET,
  links: NO_LINKS,
  ended: true,
  droppedAttributesCount: 0,
  droppedEventsCount: 0,
  droppedLinksCount: 0,
  resource,
  instrumentationScope: scope,
});
const modelNames: string[] = [];

function post(msg: FromExportThread): void {
  port.postMessage(msg);
}

function wallTime(rel: number): HrTime {
  const s = Math.floor(rel / 1e9);
  let sec = init.baseSec + s;
  let nsec = init.baseNsec + (rel - s * 1e9);
  if (nsec >= 1e9) {
    sec += 1;
    nsec -= 1e9;
  }
  return [sec, nsec];
}

function exportBatch(batch: SpanBatch): void {
  for (const name of batch.names) modelNames.push(name);
  const { nums, strings, length } = batch;
  const spans: FinishedSpan[] = [];
  let at = 0;
  for (let g = 0; g < batch.groups && at < length; g++) {
    at += 1; // the span count
    const traceIdAt = nums[at++]!;
    const traceStateAt = nums[at++]!;
    const remoteSpanAt = nums[at++]!;
    const remoteFlags = nums[at++]!;
    const traceId = traceIdAt === NONE ? randomHex(16) : strings[traceIdAt]!;
    const traceState = traceStateAt === NONE ? undefined : new TraceState(strings[traceStateAt]);
    const remote: SpanContext | undefined =
      remoteSpanAt === NONE
        ? undefined
        : { traceId, spanId: strings[remoteSpanAt]!, traceFlags: remoteFlags, isRemote: true, traceState };
    const first = spans.length;
    for (let op = nums[at++]!; op !== OP_END; op = nums[at++]!) {
      if (op === OP_EVENT) {
        const span = spans[first + nums[at]!]!;
        (span.events as TimedEvent[]).push({ name: STAMP_NAMES[nums[at + 1]!]!, time: wallTime(nums[at + 2]!) });
        at += 3;
        continue;
      }
      let name = op === SPAN_ROOT ? 'InferRequest' : 'compute';
      if (op === SPAN_MODEL) name = modelNames[nums[at++]!]!;
      else if (op !== SPAN_COMPUTE && op !== SPAN_ROOT) throw new Error(`op ${op} in a span record`);
      const spanIdAt = nums[at++]!;
      const parent = nums[at++]!;
      const start = nums[at++]!;
      const end = nums[at++]!;
      let attributes = NO_ATTRIBUTES;
      if (op === SPAN_MODEL) {
        attributes = {
          'triton.model_name': name,
          'triton.model_version': nums[at]!,
          'triton.trace_id': nums[at + 1]!,
          'triton.trace_parent_id': nums[at + 2]!,
        };
        if (nums[at + 3]! !== NONE) attributes['triton.request_id'] = strings[nums[at + 3]!]!;
        at += 4;
      }
      const spanId = spanIdAt === NONE ? randomHex(8) : strings[spanIdAt]!;
      const span = new FinishedSpan(
        name,
        { traceId, spanId, traceFlags: SAMPLED, traceState },
        parent === NONE ? remote : spans[first + parent]!.spanContext(),
        wallTime(start),
        wallTime(end),
        attributes,
      );
      spans.push(span);
    }
  }
  for (const span of spans) processor.onEnd(span);
  post({ t: 'ack', spans: batch.spans });
}

async function close(timeoutMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    processor.shutdown().catch(() => undefined),
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    }),
  ]);
  clearTimeout(timer);
  post({ t: 'closed', dropped: { ...dropped } });
}

port.on('message', (msg: ToExportThread) => {
  switch (msg.t) {
    case 'spans':
      exportBatch(msg);
      return;
    case 'sync':
      post({ t: 'counts', id: msg.id, dropped: { ...dropped } });
      return;
    case 'close':
      void close(msg.timeoutMs);
      return;
  }
});
