/**
 * Finished spans from the compact records of finished requests (otel-record.ts), as the export thread hands them
 * to the SDK's batch span processor: same names, attributes, events, ids and parents as spans the SDK makes.
 */
import { randomFillSync } from 'node:crypto';
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

const SAMPLED = 1;
const NO_LINKS: ReturnType<() => ReadableSpan['links']> = [];
const STATUS_UNSET = { code: 0 };
const NO_ATTRIBUTES: Attributes = {};

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
}

/** Span ids and the trace ids that the export thread makes for a batch: random bytes, 8 or 16 at a time. */
class IdBytes {
  private at = 0;
  constructor(readonly bytes: Buffer) {}

  /** The offset of `count` new random bytes. */
  take(count: number): number {
    const at = this.at;
    this.at = at + count;
    return at;
  }
}

/**
 * What a traced request's spans share: their trace id (hex the event loop gave, or 16 of the batch's random bytes),
 * the caller's trace state and context, and its spans' events in the order recorded: triples of the span's index
 * in the group, the stamp's code and its time (one array per request, none per span).
 */
export class SpanGroup {
  constructor(
    readonly traceHex: string | undefined,
    readonly ids: Buffer,
    readonly traceAt: number,
    readonly traceState: TraceState | undefined,
    /** traceState serialized as the SDK writes it (once per group). */
    readonly traceStateText: string | undefined,
    readonly remote: SpanContext | undefined,
    readonly events: number[],
  ) {}

  get traceId(): string {
    return this.traceHex ?? this.ids.toString('hex', this.traceAt, this.traceAt + 16);
  }
}

/**
 * A finished span as the batch processor and the OTLP exporter read it, built once the request ended, and its own
 * SpanContext. It keeps what the records gave (numbers: times, Triton's attributes; its events in its group's)
 * and its id as 8 random bytes unless the event loop gave one: the OTLP serializer (otlp-protobuf.ts) writes them
 * from there, and the ReadableSpan and SpanContext fields made of objects or hex (startTime, endTime, events,
 * attributes, traceId, spanId) are made only when read. What every span shares lives on the prototype and the
 * rest is assigned once in the constructor (`declare`: no class field definitions), so a span is one object of
 * one shape.
 */
export class FinishedSpan implements ReadableSpan, SpanContext {
  declare readonly kind: SpanKind;
  declare readonly status: ReadableSpan['status'];
  declare readonly links: ReadableSpan['links'];
  declare readonly ended: boolean;
  declare readonly droppedAttributesCount: number;
  declare readonly droppedEventsCount: number;
  declare readonly droppedLinksCount: number;
  declare readonly traceFlags: number;
  /** A span of this process: never remote (undefined, as the SDK's own spans' contexts). */
  declare readonly isRemote: boolean | undefined;
  declare readonly name: string;
  /** The parent span of the same request, or the caller's context, or none. */
  declare readonly parentSpanContext: FinishedSpan | SpanContext | undefined;
  declare readonly resource: Resource;
  declare readonly instrumentationScope: InstrumentationScope;
  declare readonly group: SpanGroup;
  /** The span's index in its group (its events' records name it). */
  declare readonly index: number;
  /** The span id as hex (given by the event loop), else undefined and its bytes at `idAt` in the group's ids. */
  declare readonly idHex: string | undefined;
  declare readonly idAt: number;
  /** Times in ns since the clock's base. */
  declare readonly clock: WallClock;
  declare readonly start: number;
  declare readonly end: number;
  /** A model span's Triton attributes (a span of another kind has none): version, trace id, parent trace id. */
  declare readonly model: boolean;
  declare readonly modelVersion: number;
  declare readonly tritonTraceId: number;
  declare readonly tritonParentId: number;
  declare readonly requestId: string | undefined;

  constructor(
    name: string,
    group: SpanGroup,
    index: number,
    idHex: string | undefined,
    idAt: number,
    parentSpanContext: FinishedSpan | SpanContext | undefined,
    clock: WallClock,
    start: number,
    end: number,
    resource: Resource,
    scope: InstrumentationScope,
  ) {
    this.name = name;
    this.group = group;
    this.index = index;
    this.idHex = idHex;
    this.idAt = idAt;
    this.parentSpanContext = parentSpanContext;
    this.clock = clock;
    this.start = start;
    this.end = end;
    this.resource = resource;
    this.instrumentationScope = scope;
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
    return this;
  }

  get traceId(): string {
    return this.group.traceId;
  }

  get spanId(): string {
    return this.idHex ?? this.group.ids.toString('hex', this.idAt, this.idAt + 8);
  }

  get traceState(): TraceState | undefined {
    return this.group.traceState;
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
    const stamps = this.group.events;
    for (let i = 0; i < stamps.length; i += 3) {
      if (stamps[i] !== this.index) continue;
      events.push({ name: STAMP_NAMES[stamps[i + 1]!]!, time: this.clock.hrTime(stamps[i + 2]!) });
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
  traceFlags: SAMPLED,
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

  /**
   * The batch's spans, parents before children (the batch's numbers are read here only: their buffer goes back to
   * the event loop). Their random ids are cut from one buffer filled for the batch.
   */
  spans(batch: SpanBatch): FinishedSpan[] {
    const modelNames = this.modelNames;
    for (const name of batch.names) modelNames.push(name);
    const { nums, strings, length } = batch;
    const ids = new IdBytes(randomFillSync(Buffer.allocUnsafe(batch.groups * 16 + batch.spans * 8)));
    const spans: FinishedSpan[] = [];
    let at = 0;
    for (let g = 0; g < batch.groups && at < length; g++) {
      at += 1; // the span count
      const traceIdAt = nums[at++]!;
      const traceStateAt = nums[at++]!;
      const remoteSpanAt = nums[at++]!;
      const remoteFlags = nums[at++]!;
      const traceHex = traceIdAt === NONE ? undefined : strings[traceIdAt]!;
      const traceState = traceStateAt === NONE ? undefined : new TraceState(strings[traceStateAt]);
      const remote: SpanContext | undefined =
        remoteSpanAt === NONE
          ? undefined
          : {
              traceId: traceHex ?? '',
              spanId: strings[remoteSpanAt]!,
              traceFlags: remoteFlags,
              isRemote: true,
              traceState,
            };
      const group = new SpanGroup(
        traceHex,
        ids.bytes,
        traceHex === undefined ? ids.take(16) : 0,
        traceState,
        traceState?.serialize(),
        remote,
        [],
      );
      const events = group.events;
      const first = spans.length;
      for (let op = nums[at]!; op !== OP_END; op = nums[at]!) {
        if (op === OP_EVENT) {
          events.push(nums[at + 1]!, nums[at + 2]!, nums[at + 3]!);
          at += 4;
          continue;
        }
        at += 1;
        let name = op === SPAN_ROOT ? 'InferRequest' : 'compute';
        if (op === SPAN_MODEL) name = modelNames[nums[at++]!]!;
        else if (op !== SPAN_COMPUTE && op !== SPAN_ROOT) throw new Error(`op ${op} in a span record`);
        const spanIdAt = nums[at++]!;
        const parent = nums[at++]!;
        const start = nums[at++]!;
        const end = nums[at++]!;
        const idHex = spanIdAt === NONE ? undefined : strings[spanIdAt]!;
        const span = new FinishedSpan(
          name,
          group,
          spans.length - first,
          idHex,
          idHex === undefined ? ids.take(8) : 0,
          parent === NONE ? remote : spans[first + parent]!,
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
      at += 1; // OP_END
    }
    return spans;
  }
}
