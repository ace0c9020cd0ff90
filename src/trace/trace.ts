/**
 * One traced request and the traces it spawns (ensemble steps, BLS calls):
 * Triton's TRITONSERVER_InferenceTrace and its children. Timestamps are
 * recorded where the work happens; the group is handed to its sink once
 * every trace of it has ended.
 */
import type { RequestTrace, TraceStampName, TraceTensorActivity } from '../types/api.js';
import type { Tensor } from '../tensor/tensor.js';
import { tensorEntryJson } from './triton-format.js';
import type { ActiveSetting } from './settings.js';
import type { RequestLogEntry } from './request-log.js';

import { LEVEL_TENSORS, LEVEL_TIMESTAMPS } from './settings.js';
import { absNs, nowNs, relNs } from './clock.js';

/** Hooks a sink may take while traces run (OpenTelemetry: the W3C context of the open span, from the stamps so far). */
export interface TraceRecorder {
  /** The W3C context of the trace's innermost open span, as `{"traceparent": ...}` JSON. */
  context(trace: Trace): string | undefined;
  /** Every trace of the group ended. */
  ended(group: TraceGroup): void;
}

/** Where a finished group goes. */
export interface TraceGroupSink {
  finished(group: TraceGroup): void;
}

let nextTraceId = 1;

/** An empty array whose elements are doubles from the start (no change of its kind at the first push). */
function doubles(): number[] {
  const a = [0.5];
  a.pop();
  return a;
}

/** The traces of one client request: the frontend's root and those spawned from it. */
export class TraceGroup {
  readonly traces: Trace[] = [];
  /** Slot for the recorder (the OpenTelemetry root span's context and start). */
  root: unknown = undefined;
  /** Set when the request log takes this request: the frontend fills it in. */
  log: RequestLogEntry | undefined = undefined;
  private open = 0;

  constructor(
    readonly level: number,
    readonly sink: TraceGroupSink,
    readonly recorder: TraceRecorder | undefined,
    /** The setting that sampled the group (its counters and file buffer). */
    readonly setting: ActiveSetting | undefined,
  ) {}

  /** @internal */
  add(trace: Trace): void {
    this.traces.push(trace);
    this.open += 1;
  }

  /** @internal */
  retain(): void {
    this.open += 1;
  }

  /** Every trace ended and nothing holds the group: it was handed to its sink. */
  done = false;

  /** @internal */
  release(): void {
    if (--this.open !== 0) return;
    this.done = true;
    this.recorder?.ended(this);
    this.sink.finished(this);
  }
}

export class Trace implements RequestTrace {
  readonly id: number;
  readonly tensors: boolean;
  modelName = '';
  modelVersion = '';
  requestId = '';
  /**
   * The timestamps in the order recorded: names and times side by side (no object per stamp), a time as ns since
   * BASE_HR (clock.ts); NaN for one that is not an exact double there, kept in `bigTimes`.
   */
  readonly stampNames: TraceStampName[] = [];
  readonly stampTimes: number[] = doubles();
  bigTimes: Map<number, bigint> | undefined = undefined;
  /** TENSORS level: each tensor's entry text, and how many stamps came before it. */
  tensorEntries: string[] | undefined = undefined;
  tensorAfter: number[] | undefined = undefined;
  /** Slots for the recorder (OpenTelemetry: span ids handed out, where its spans begin in the group). */
  spans: unknown = undefined;
  recorderIndex = 0;
  /**
   * How many stamps the parent trace had at this one's REQUEST_START (-1: not yet), from which the recorder knows
   * which of the parent's spans was open then.
   */
  parentStamps = -1;
  private ended = false;

  constructor(
    readonly group: TraceGroup,
    /** The trace that made this one's request (0: none). */
    readonly parent: Trace | undefined,
  ) {
    this.id = nextTraceId++;
    this.tensors = (group.level & LEVEL_TENSORS) !== 0;
    group.add(this);
  }

  get parentId(): number {
    return this.parent?.id ?? 0;
  }

  setModel(model: string, version: string, requestId: string): void {
    this.modelName = model;
    this.modelVersion = version;
    this.requestId = requestId;
  }

  stamp(name: TraceStampName, ns?: bigint): void {
    if (this.group.done || (this.group.level & LEVEL_TIMESTAMPS) === 0) return;
    let rel: number;
    if (ns === undefined) rel = nowNs();
    else if ((rel = relNs(ns)) !== rel) (this.bigTimes ??= new Map()).set(this.stampTimes.length, ns); // NaN
    this.stampNames.push(name);
    this.stampTimes.push(rel);
    if (this.parentStamps < 0 && this.parent !== undefined && name === 'REQUEST_START') {
      this.parentStamps = this.parent.stampNames.length;
    }
  }

  /**
   * A timestamp taken elsewhere, as ns since this thread's BASE_HR (a frontend thread's, sent with its request or
   * after its reply: docs/tracing.md, "Frontend threads"). NaN is not recorded.
   */
  stampAt(name: TraceStampName, rel: number): void {
    if (this.group.done || (this.group.level & LEVEL_TIMESTAMPS) === 0 || rel !== rel) return;
    this.stampNames.push(name);
    this.stampTimes.push(rel);
  }

  /** The i-th timestamp as hrtime ns. */
  stampNs(i: number): bigint {
    return this.bigTimes?.get(i) ?? absNs(this.stampTimes[i]!);
  }

  /** The first time `name` was stamped (ns since BASE_HR), or undefined. */
  stampOf(name: TraceStampName): number | undefined {
    const i = this.stampNames.indexOf(name);
    return i < 0 ? undefined : this.stampTimes[i];
  }

  tensor(activity: TraceTensorActivity, tensor: Tensor): void {
    if (this.group.done || !this.tensors) return;
    (this.tensorEntries ??= []).push(tensorEntryJson(this.id, activity, tensor));
    (this.tensorAfter ??= []).push(this.stampNames.length);
  }

  spawn(): Trace {
    return new Trace(this.group, this);
  }

  context(): string | undefined {
    return this.group.recorder?.context(this);
  }

  hold(): () => void {
    this.group.retain();
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      this.group.release();
    };
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    this.group.release();
  }
}
