/**
 * Finished spans from the compact records of finished requests (otel-record.ts), as the export thread hands them
 * to the SDK's batch span processor: same names, attributes, events, ids and parents as spans the SDK makes.
 */
import { type Attributes, type HrTime, type SpanContext, SpanKind } from '@opentelemetry/api';
import { TraceState, type InstrumentationScope } from '@opentelemetry/core';
import type { Resource } from '@opentelemetry/resources';
import type { ReadableSpan, TimedEvent } from '@opentelemetry/sdk-trace-base';
import {
  NONE,
  OP_END,
  OP_EVENT,
  SPAN_COMPUTE,
  SPAN_MODEL,
  SPAN_ROOT,
  STAMP_NAMES,
  type SpanBatch,
} from './otel-record.js';
import { randomHex } from './random-id.js';

const SAMPLED = 1;
const NO_LINKS: ReturnType<() => ReadableSpan['links']> = [];
const STATUS_UNSET = { code: 0 };
const NO_ATTRIBUTES: Attributes = {};

/**
 * A finished span as the batch processor and the OTLP exporter read it, built once the request ended. What every
 * span shares lives on the prototype and the rest is assigned once in the constructor (`declare`: no class field
 * definitions), so a span is one small object of one shape.
 */
export class FinishedSpan implements ReadableSpan {
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
    resource: Resource,
    scope: InstrumentationScope,
  ) {
    this.name = name;
    this.context = context;
    this.parentSpanContext = parentSpanContext;
    this.startTime = startTime;
    this.endTime = endTime;
    this.attributes = attributes;
    this.resource = resource;
    this.instrumentationScope = scope;
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
Object.assign(FinishedSpan.prototype, {
  kind: SpanKind.SERVER,
  status: STATUS_UNSET,
  links: NO_LINKS,
  ended: true,
  droppedAttributesCount: 0,
  droppedEventsCount: 0,
  droppedLinksCount: 0,
});

/** Turns the batches of one event loop into spans; model names arrive once and are kept in order. */
export class SpanBuilder {
  private readonly modelNames: string[] = [];

  /** `baseSec`, `baseNsec`: the wall-clock time of the records' time 0. */
  constructor(
    private readonly resource: Resource,
    private readonly scope: InstrumentationScope,
    private readonly baseSec: number,
    private readonly baseNsec: number,
  ) {}

  private wallTime(rel: number): HrTime {
    const s = Math.floor(rel / 1e9);
    let sec = this.baseSec + s;
    let nsec = this.baseNsec + (rel - s * 1e9);
    if (nsec >= 1e9) {
      sec += 1;
      nsec -= 1e9;
    }
    return [sec, nsec];
  }

  /** The batch's spans, parents before children. */
  spans(batch: SpanBatch): FinishedSpan[] {
    const modelNames = this.modelNames;
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
          span.events.push({ name: STAMP_NAMES[nums[at + 1]!]!, time: this.wallTime(nums[at + 2]!) });
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
        spans.push(
          new FinishedSpan(
            name,
            { traceId, spanId, traceFlags: SAMPLED, traceState },
            parent === NONE ? remote : spans[first + parent]!.spanContext(),
            this.wallTime(start),
            this.wallTime(end),
            attributes,
            this.resource,
            this.scope,
          ),
        );
      }
    }
    return spans;
  }
}
