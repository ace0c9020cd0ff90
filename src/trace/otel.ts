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
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import type { TraceStampName } from '../types/api.js';
import type { RemoteContext } from './traceparent.js';
import { contextJson } from './traceparent.js';
import { randomHex } from './random-id.js';
import { BASE_HR, BASE_WALL_NS, nowNs } from './clock.js';
import type { Trace, TraceGroup, TraceGroupSink, TraceRecorder } from './trace.js';
import {
  type DropCounts,
  type ExportInit,
  type FromExportThread,
  NONE,
  OP_END,
  OP_EVENT,
  SPAN_COMPUTE,
  SPAN_MODEL,
  SPAN_ROOT,
  type ToExportThread,
} from './otel-record.js';
import { STAMP_CODES } from './stamp-codes.js';
import { DEFAULT_EXPORT_THREAD_NICE, traceThreadNice } from './thread-priority.js';

export interface OtelOptions {
  url: string;
  /** Resource attributes (service.name and the rest). */
  resource: Readonly<Record<string, string>>;
  bspMaxQueueSize: number;
  bspScheduleDelayMs: number;
  bspMaxExportBatchSize: number;
}

/** A time past a double's integers since BASE_HR (a process up for 104 days): near enough for a span. */
function relTime(trace: Trace, i: number): number {
  const rel = trace.stampTimes[i]!;
  return rel === rel ? rel : Number(trace.stampNs(i) - BASE_HR);
}


/** The root span of a group: its ids, the caller's context, when it began. */
interface RootSpan {
  traceId: string | undefined;
  spanId: string | undefined;
  readonly remote: RemoteContext | undefined;
  /** ns since BASE_HR. */
  readonly start: number;
}

const SAMPLED = 1;
const CODE_REQUEST_START = STAMP_CODES.get('REQUEST_START')!;
const CODE_COMPUTE_START = STAMP_CODES.get('COMPUTE_START')!;
const CODE_REQUEST_END = STAMP_CODES.get('REQUEST_END')!;
const CODE_COMPUTE_END = STAMP_CODES.get('COMPUTE_END')!;
const WORKER_URL = new URL('./otel-worker.js', import.meta.url);
/** A batch goes to the export thread after this long, or once it holds this many requests. */
const FLUSH_MS = 20;
const FLUSH_GROUPS = 512;
/** Batch buffers kept for reuse (more come back only while the export thread catches up). */
const MAX_SPARE = 4;

/** HTTP_* and GRPC_*: the frontend's stamps, events of the root span. */
function isFrontendStamp(name: TraceStampName): boolean {
  const c = name.charCodeAt(0);
  return c === 0x48 || c === 0x47; // H, G
}

/**
 * Spans are not made while a request runs: the traces record their timestamps (and which span is open, for
 * the W3C context a callee asks for). When the request has ended its spans are written as numbers into a
 * batch that goes, once per turn of the event loop, to the export thread (otel-worker.ts), where the SDK's
 * batch span processor and OTLP exporter take them.
 */
export class OtelExporter implements TraceRecorder, TraceGroupSink {
  private readonly worker: Worker;
  /** Spans dropped: queue full, or the collector did not take them (nereid_trace_spans_dropped_total). */
  dropped: DropCounts = { queueFull: 0, exportFailed: 0 };
  /** Spans dropped here because the export thread has not taken what it was sent. */
  private droppedHere = 0;
  private failing = false;
  /** The batch being written (see SpanBatch), its first `at` numbers used. */
  private nums = new Float64Array(16 * 1024);
  /** Buffers of batches the export thread has taken, given back to be written again. */
  private readonly spare: Float64Array<ArrayBuffer>[] = [];
  private at = 0;
  private strings: string[] = [];
  private newNames: string[] = [];
  private groups = 0;
  private spans = 0;
  private flushing = false;
  /** Spans sent to the export thread and not yet taken by it. */
  private unacked = 0;
  /** Spans on their way to the export thread at most: a few times its queue (it takes them as they come). */
  private readonly maxInFlight: number;
  private readonly modelNames = new Map<string, number>();
  private readonly syncs = new Map<number, (counts: DropCounts) => void>();
  private nextSync = 1;
  private closed: Promise<void> | undefined;
  private onClosed: (() => void) | undefined;
  private exited = false;

  constructor(
    private readonly options: OtelOptions,
    private readonly logger: Logger | undefined,
  ) {
    this.maxInFlight = 4 * options.bspMaxQueueSize + 1024;
    const init: ExportInit = {
      ...options,
      resource: { ...options.resource },
      baseSec: Number(BASE_WALL_NS / 1_000_000_000n),
      baseNsec: Number(BASE_WALL_NS % 1_000_000_000n),
      nice: traceThreadNice(DEFAULT_EXPORT_THREAD_NICE),
    };
    this.worker = new Worker(WORKER_URL, { workerData: init });
    this.worker.unref();
    this.worker.on('message', (msg: FromExportThread) => this.onMessage(msg));
    this.worker.on('error', (err: unknown) => this.logger?.error({ err }, 'the trace export thread failed'));
    this.worker.on('exit', () => {
      this.exited = true;
      for (const resolve of this.syncs.values()) resolve(this.counts());
      this.syncs.clear();
      this.onClosed?.();
    });
  }

  private counts(): DropCounts {
    return { queueFull: this.dropped.queueFull + this.droppedHere, exportFailed: this.dropped.exportFailed };
  }

  private onMessage(msg: FromExportThread): void {
    switch (msg.t) {
      case 'ack':
        this.unacked -= msg.spans;
        if (this.spare.length < MAX_SPARE) this.spare.push(new Float64Array(msg.buffer));
        return;
      case 'counts':
        this.dropped = msg.dropped;
        this.syncs.get(msg.id)?.(this.counts());
        this.syncs.delete(msg.id);
        return;
      case 'failed':
        this.dropped = msg.dropped;
        if (!this.failing) {
          this.failing = true;
          this.logger?.warn(
            { url: this.options.url, err: { message: msg.message } },
            `trace export failed; ${msg.count} spans dropped (counted in nereid_trace_spans_dropped_total)`,
          );
        }
        return;
      case 'closed':
        this.dropped = msg.dropped;
        this.onClosed?.();
        return;
      case 'nice':
        this.logger?.debug({ err: { message: msg.message } }, 'the trace export thread keeps its priority');
        return;
    }
  }

  /** The drop counts once the export thread has taken every span finished so far. */
  droppedNow(): Promise<DropCounts> {
    this.flush();
    // A thread gone (closed, or failed) answers nothing: what is known.
    if (this.closed !== undefined || this.exited) return Promise.resolve(this.counts());
    const id = this.nextSync++;
    return new Promise((resolve) => {
      this.syncs.set(id, resolve);
      this.worker.postMessage({ t: 'sync', id } satisfies ToExportThread);
    });
  }
  /**
   * Starts the group's `InferRequest` span, joined to the caller's trace when the request carried one; `start`: when
   * a frontend thread began reading the request (ns since BASE_HR), else now.
   */
  startRoot(group: TraceGroup, remote: RemoteContext | undefined, start = nowNs()): void {
    group.root = {
      traceId: remote?.traceId,
      spanId: undefined,
      remote,
      start,
    } satisfies RootSpan;
  }

  /**
   * Which of the trace's spans was innermost open after its first `upTo` stamps: its ordinal (spans counted in the
   * order their REQUEST_START or COMPUTE_START came), or -1 for none. Read from the stamps rather than kept as they
   * come, so that a stamp costs the recorder nothing (a context is asked for by ensembles and BLS calls only).
   */
  private openSpan(trace: Trace, upTo: number): number {
    const names = trace.stampNames;
    const stack = this.openStack;
    let depth = 0;
    let ordinal = 0;
    for (let i = 0; i < upTo; i++) {
      const name = names[i]!;
      if (name === 'REQUEST_START' || name === 'COMPUTE_START') stack[depth++] = ordinal++;
      else if ((name === 'REQUEST_END' || name === 'COMPUTE_END') && depth > 0) depth -= 1;
    }
    return depth === 0 ? -1 : stack[depth - 1]!;
  }

  private readonly openStack: number[] = [];

  context(trace: Trace): string | undefined {
    const root = trace.group.root as RootSpan | undefined;
    if (root === undefined) return undefined;
    const open = this.openSpan(trace, trace.stampNames.length);
    const spanId = open < 0 ? this.rootSpanId(root) : this.spanId(trace, open);
    return contextJson(this.traceId(root), spanId, SAMPLED, root.remote?.traceState);
  }

  private traceId(root: RootSpan): string {
    return (root.traceId ??= randomHex(16));
  }

  private rootSpanId(root: RootSpan): string {
    return (root.spanId ??= randomHex(8));
  }

  private spanId(trace: Trace, ordinal: number): string {
    const ids = (trace.spans ??= []) as (string | undefined)[];
    return (ids[ordinal] ??= randomHex(8));
  }

  /** The W3C trace id of the group's spans. */
  traceIdOf(group: TraceGroup): string | undefined {
    const root = group.root as RootSpan | undefined;
    return root === undefined ? undefined : this.traceId(root);
  }

  ended(): void {}

  /** The request ended: its spans go into the batch for the export thread, in one pass over its timestamps. */
  finished(group: TraceGroup): void {
    const root = group.root as RootSpan | undefined;
    if (root === undefined || this.closed !== undefined) return;
    let stamps = 0;
    for (const trace of group.traces) stamps += trace.stampNames.length;
    // At most: the group's head, the root span, per stamp an event (4) and a model span (11), the end.
    this.reserve(16 + stamps * 15);
    const nums = this.nums;
    const head = this.at;
    let at = head;
    const end = nowNs();
    const remote = root.remote;
    nums[at++] = 0; // the span count, once known
    nums[at++] = root.traceId === undefined ? NONE : this.string(root.traceId);
    nums[at++] = remote?.traceState === undefined ? NONE : this.string(remote.traceState);
    nums[at++] = remote === undefined ? NONE : this.string(remote.spanId);
    nums[at++] = remote === undefined ? 0 : remote.flags;
    // The root span (index 0): its events are the frontend's stamps, of every trace of the group.
    nums[at++] = SPAN_ROOT;
    nums[at++] = root.spanId === undefined ? NONE : this.string(root.spanId);
    nums[at++] = NONE;
    nums[at++] = root.start;
    nums[at++] = end;
    // Each trace's spans, replaying its stamps as they came: a span per REQUEST_START (the model's) and
    // COMPUTE_START, each stamp an event of the innermost open span; a span's end is filled in when it closes.
    // A model span nests in the span of the parent trace open at its REQUEST_START (the ensemble's or the caller's),
    // a compute span in its trace's open one; else in the root.
    let index = 1;
    const openIndex = this.openIndex;
    const openEnd = this.openEnd;
    for (const trace of group.traces) {
      const names = trace.stampNames;
      const ids = trace.spans as (string | undefined)[] | undefined;
      trace.recorderIndex = index;
      let ordinal = 0;
      let open = 0;
      for (let i = 0; i < names.length; i++) {
        const name = names[i]!;
        const code = STAMP_CODES.get(name)!;
        const time = relTime(trace, i);
        let span = 0; // the root's, for a frontend stamp
        if (!isFrontendStamp(name)) {
          if (code === CODE_REQUEST_START || code === CODE_COMPUTE_START) {
            const model = code === CODE_REQUEST_START;
            let parent = 0;
            if (!model) parent = open === 0 ? 0 : openIndex[open - 1]!;
            else if (trace.parent !== undefined) {
              const p = trace.parent;
              const o = this.openSpan(p, trace.parentStamps < 0 ? p.stampNames.length : trace.parentStamps);
              if (o >= 0) parent = p.recorderIndex + o;
            }
            const id = ids?.[ordinal];
            nums[at++] = model ? SPAN_MODEL : SPAN_COMPUTE;
            if (model) nums[at++] = this.modelName(trace.modelName);
            nums[at++] = id === undefined ? NONE : this.string(id);
            nums[at++] = parent;
            nums[at++] = time;
            openIndex[open] = index;
            openEnd[open++] = at;
            nums[at++] = end;
            if (model) {
              nums[at++] = Number(trace.modelVersion);
              nums[at++] = trace.id;
              nums[at++] = trace.parentId;
              nums[at++] = trace.requestId === '' ? NONE : this.string(trace.requestId);
            }
            ordinal += 1;
            index += 1;
          }
          if (open === 0) continue;
          span = openIndex[open - 1]!;
          if (code === CODE_REQUEST_END || code === CODE_COMPUTE_END) nums[openEnd[--open]!] = time;
        }
        nums[at++] = OP_EVENT;
        nums[at++] = span;
        nums[at++] = code;
        nums[at++] = time;
      }
    }
    const count = index;
    if (this.unacked + this.spans + count > this.maxInFlight) {
      // The export thread is far behind (or stuck): memory stays bounded, the spans are dropped and counted (the
      // record just written is left unused; strings it added are harmless).
      this.droppedHere += count;
      return;
    }
    nums[head] = count;
    nums[at++] = OP_END;
    this.at = at;
    this.groups += 1;
    this.spans += count;
    if (this.groups >= FLUSH_GROUPS) this.flush();
    else if (!this.flushing) {
      // Batches of several turns of the event loop: each message wakes the export thread, which costs more.
      this.flushing = true;
      setTimeout(this.flushLater, FLUSH_MS).unref();
    }
  }

  private readonly flushLater = (): void => {
    this.flushing = false;
    this.flush();
  };

  /** Open spans while a trace is written: their index in the group and where their end is. */
  private readonly openIndex: number[] = [];
  private readonly openEnd: number[] = [];

  /** Room for `more` numbers in the batch. */
  private reserve(more: number): void {
    if (this.at + more <= this.nums.length) return;
    const grown = new Float64Array(Math.max(this.nums.length * 2, this.at + more));
    grown.set(this.nums.subarray(0, this.at));
    this.nums = grown;
  }

  private string(text: string): number {
    return this.strings.push(text) - 1;
  }

  private modelName(name: string): number {
    let i = this.modelNames.get(name);
    if (i === undefined) {
      i = this.modelNames.size;
      this.modelNames.set(name, i);
      this.newNames.push(name);
    }
    return i;
  }

  /** Sends the batch to the export thread, its numbers as a transferred buffer. */
  private flush(): void {
    if (this.groups === 0) return;
    const nums = this.nums;
    const msg: ToExportThread = {
      t: 'spans',
      groups: this.groups,
      spans: this.spans,
      nums,
      length: this.at,
      strings: this.strings,
      names: this.newNames,
    };
    this.unacked += this.spans;
    this.nums = this.spare.pop() ?? new Float64Array(nums.length);
    this.at = 0;
    this.strings = [];
    this.newNames = [];
    this.groups = 0;
    this.spans = 0;
    this.worker.postMessage(msg, [nums.buffer]);
  }

  /** Exports what is queued, waiting at most `timeoutMs` (a collector that is down must not hold the shutdown). */
  close(timeoutMs = 5000): Promise<void> {
    if (this.closed !== undefined) return this.closed;
    this.flush();
    this.closed = new Promise<void>((resolve) => {
      const timer = setTimeout(() => resolve(), timeoutMs + 500);
      timer.unref();
      this.onClosed = () => {
        clearTimeout(timer);
        resolve();
      };
      this.worker.ref();
      this.worker.postMessage({ t: 'close', timeoutMs } satisfies ToExportThread);
    }).then(() => this.worker.terminate().then(() => undefined));
    return this.closed;
  }
}
