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
const TWO_32 = 0x1_0000_0000;

/** The wall-clock time of the records' time 0, as an HrTime and as uint64 nanoseconds in two 32-bit halves. */
export class WallClock {
  /** The low and high 32 bits of the base in ns since the epoch. */
  readonly low: number;
  readonly high: number;

  constructor(
    readonly sec: number,
    readonly nsec: number,
  ) {
    const total = BigInt.asUintN(64, BigInt(sec) * 1_000_000_000n + BigInt(nsec));
    this.low = Number(total & 0xffff_ffffn);
    this.high = Number(total >> 32n);
  }

  /** A record's time (ns since the base, an exact integer) as an HrTime. */
  hrTime(rel: number): HrTime {
    const s = Math.floor(rel / 1e9);
    let sec = this.sec + s;
    let nsec = this.nsec + (rel - s * 1e9);
    if (nsec >= 1e9) {
      sec += 1;
      nsec -= 1e9;
    }
    return [sec, nsec];
  }

  /** The low 32 bits of a record's time in ns since the epoch; high() the rest (uint64 wraps as the SDK's). */
  lowOf(rel: number): number {
    return (this.low + (rel % TWO_32)) >>> 0;
  }

  highOf(rel: number): number {
    const lowSum = this.low + (rel % TWO_32);
    return (this.high + Math.floor(rel / TWO_32) + (lowSum >= TWO_32 ? 1 : 0)) >>> 0;
  }
}

/**
 * A finished span as the batch processor and the OTLP exporter read it, built once the request ended. It keeps its
 * times, events and Triton attributes as the records gave them (numbers): the OTLP serializer (otlp-protobuf.ts)
 * writes them from there, and the ReadableSpan fields made of objects (startTime, endTime, events, attributes) are
 * made only when read. What every span shares lives on the prototype and the rest is assigned once in the
 * constructor (`declare`: no class field definitions), so a span is one small object of one shape.
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
  declare readonly resource: Resource;
  declare readonly instrumentationScope: InstrumentationScope;
  declare private readonly context: SpanContext;
  /** Times in ns since the clock's base. */
  declare readonly clock: WallClock;
  declare readonly start: number;
  declare readonly end: number;
  /** Events as pairs: the stamp's code (STAMP_NAMES), its time. */
  declare readonly stamps: number[];
  /** A model span's Triton attributes (a span of another kind has none): version, trace id, parent trace id. */
  declare readonly model: boolean;
  declare readonly modelVersion: number;
  declare readonly tritonTraceId: number;
  declare readonly tritonParentId: number;
  declare readonly requestId: string | undefined;

  constructor(
    name: string,
    context: SpanContext,
    parentSpanContext: SpanContext | undefined,
    clock: WallClock,
    start: number,
    end: number,
    resource: Resource,
    scope: InstrumentationScope,
  ) {
    this.name = name;
    this.context = context;
    this.parentSpanContext = parentSpanContext;
    this.clock = clock;
    this.start = start;
    this.end = end;
    this.resource = resource;
    this.instrumentationScope = scope;
    this.stamps = [];
    this.model = false;
    this.modelVersion = 0;
    this.tritonTraceId = 0;
    this.tritonParentId = 0;
    this.requestId = undefined;
  }

  /** Makes this span a model's, with Triton's attributes. */
  setModel(version: number, traceId: number, parentId: number, requestId: string | undefined): void {
    const self = this as { -readonly [K in keyof FinishedSpan]: FinishedSpan[K] };
    self.model = true;
    self.modelVersion = version;
    self.tritonTraceId = traceId;
    self.tritonParentId = parentId;
    self.requestId = requestId;
  }

  spanContext(): SpanContext {
    return this.context;
  }

  get startTime(): HrTime {
    return this.clock.hrTime(this.start);
  }

  get endTime(): HrTime {
    return this.clock.hrTime(this.end);
  }

  get duration(): HrTime {
    const ns = this.end - this.start;
    const s = Math.floor(ns / 1e9);
    return [s, ns - s * 1e9];
  }

  get events(): TimedEvent[] {
    const events: TimedEvent[] = [];
    const stamps = this.stamps;
    for (let i = 0; i < stamps.length; i += 2) {
      events.push({ name: STAMP_NAMES[stamps[i]!]!, time: this.clock.hrTime(stamps[i + 1]!) });
    }
    return events;
  }

  get attributes(): Attributes {
    if (!this.model) return NO_ATTRIBUTES;
    const attributes: Attributes = {
      'triton.model_name': this.name,
      'triton.model_version': this.modelVersion,
      'triton.trace_id': this.tritonTraceId,
      'triton.trace_parent_id': this.tritonParentId,
    };
    if (this.requestId !== undefined) attributes['triton.request_id'] = this.requestId;
    return attributes;
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
  private readonly clock: WallClock;

  /** `baseSec`, `baseNsec`: the wall-clock time of the records' time 0. */
  constructor(
    private readonly resource: Resource,
    private readonly scope: InstrumentationScope,
    baseSec: number,
    baseNsec: number,
  ) {
    this.clock = new WallClock(baseSec, baseNsec);
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
          spans[first + nums[at]!]!.stamps.push(nums[at + 1]!, nums[at + 2]!);
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
        const spanId = spanIdAt === NONE ? randomHex(8) : strings[spanIdAt]!;
        const span = new FinishedSpan(
          name,
          { traceId, spanId, traceFlags: SAMPLED, traceState },
          parent === NONE ? remote : spans[first + parent]!.spanContext(),
          this.clock,
          start,
          end,
          this.resource,
          this.scope,
        );
        if (op === SPAN_MODEL) {
          const requestAt = nums[at + 3]!;
          span.setModel(nums[at]!, nums[at + 1]!, nums[at + 2]!, requestAt === NONE ? undefined : strings[requestAt]!);
          at += 4;
        }
        spans.push(span);
      }
    }
    return spans;
  }
}
