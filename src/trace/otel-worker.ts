/**
 * The OpenTelemetry export thread: turns the compact records of finished
 * requests (otel-record.ts) into finished spans (otel-spans.ts) and hands them
 * to the SDK's batch span processor and OTLP/HTTP exporter (with our protobuf
 * serializer, otlp-protobuf.ts), so that span objects, protobuf encoding and
 * the HTTP exchange stay off the server's event loop.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { ExportResultCode, type ExportResult, type InstrumentationScope } from '@opentelemetry/core';
import { OTLPExporterBase } from '@opentelemetry/otlp-exporter-base';
import { convertLegacyHttpOptions, createOtlpHttpExportDelegate } from '@opentelemetry/otlp-exporter-base/node-http';
import { type Resource, resourceFromAttributes } from '@opentelemetry/resources';
import {
  BatchSpanProcessor,
  type ReadableSpan,
  type SpanExporter,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import type { ExportInit, FromExportThread, SpanBatch, ToExportThread } from './otel-record.js';
import { SpanBuilder } from './otel-spans.js';
import { traceSerializer } from './otlp-protobuf.js';
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

const init = workerData as ExportInit;
const port = parentPort!;
// Export yields the CPU to serving (docs/tracing.md); a system that refuses is told once, at debug.
const refused = lowerThisThread(init.nice);
if (refused !== undefined) port.postMessage({ t: 'nice', message: refused } satisfies FromExportThread);
const dropped = { queueFull: 0, exportFailed: 0 };
// The SDK's OTLP/HTTP protobuf exporter (its retries, timeout, concurrency limit and results), with our serializer
// in place of its own: the SDK's costs several times more per span (docs/tracing.md, "The OTLP serializer").
const otlp = new OTLPExporterBase<ReadableSpan[]>(
  createOtlpHttpExportDelegate(
    convertLegacyHttpOptions({ url: init.url }, 'TRACES', 'v1/traces', { 'Content-Type': 'application/x-protobuf' }),
    traceSerializer((answer) => {
      // Spans the collector took and then refused are lost as surely as a failed export's: counted the same way.
      const rejected = answer.partialSuccess?.rejectedSpans ?? 0;
      const why = answer.partialSuccess?.errorMessage ?? '';
      if (rejected > 0) lost(rejected, new Error(`the collector rejected ${rejected} spans${why ? `: ${why}` : ''}`));
    }),
    'otlp_http_span_exporter',
    { name: 'span', countItems: (spans: ReadableSpan[]) => spans.length },
    undefined, // no meter provider: the SDK's self-observability metrics stay off, as the exporter's defaults
  ),
);
function lost(count: number, error: Error | undefined): void {
  dropped.exportFailed += count;
  const message = error?.message ?? 'the collector did not take the spans';
  post({ t: 'failed', count, message, dropped: { ...dropped } });
}
const exporter = new CountingExporter(otlp, lost);
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
const builder = new SpanBuilder(resource, scope, init.baseSec, init.baseNsec);

function post(msg: FromExportThread): void {
  port.postMessage(msg);
}

function exportBatch(batch: SpanBatch): void {
  for (const span of builder.spans(batch)) processor.onEnd(span);
  // The spans hold copies: the numbers' buffer goes back to be written again (no fresh buffer per batch).
  const buffer = batch.nums.buffer as ArrayBuffer;
  port.postMessage({ t: 'ack', spans: batch.spans, buffer } satisfies FromExportThread, [buffer]);
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
