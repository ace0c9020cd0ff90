/**
 * The compact form in which finished requests' spans travel from the event
 * loop to the export thread (see docs/tracing.md, "Cost"): numbers in one
 * array, strings (ids given out early, request ids) in another, model names
 * sent once. Times are ns since BASE_HR, exact integers in a double.
 */

export { STAMP_NAMES } from './stamp-codes.js';

/** Span kinds in a record (each also the code of the op that opens such a span). */
export const SPAN_ROOT = 0;
export const SPAN_MODEL = 1;
export const SPAN_COMPUTE = 2;
/** Ops besides a span's: an event of a span, the end of a group. */
export const OP_EVENT = 3;
export const OP_END = 4;

/** No string: the export thread makes the id. */
export const NONE = -1;

/**
 * A batch of finished groups, written in one pass over each trace's timestamps. Per group: span count, trace id,
 * tracestate and remote parent span id (string indexes or NONE), remote flags; then ops until OP_END:
 * - a span (op = its kind; parents before children): model name index (model spans), span id (string index or
 *   NONE), parent (span index in the group; NONE: the remote parent or none), start, end, and for model spans
 *   version, trace id, parent trace id and request id (string index or NONE);
 * - OP_EVENT: span index in the group, stamp code, time (events of a span in the order recorded).
 */
export interface SpanBatch {
  readonly t: 'spans';
  readonly groups: number;
  readonly spans: number;
  /** The records, in the first `length` numbers. */
  readonly nums: Float64Array;
  readonly length: number;
  readonly strings: string[];
  /** Model names first seen in this batch, appended to the thread's table in order. */
  readonly names: string[];
}

export interface ExportInit {
  readonly url: string;
  readonly resource: Readonly<Record<string, string>>;
  readonly bspMaxQueueSize: number;
  readonly bspScheduleDelayMs: number;
  readonly bspMaxExportBatchSize: number;
  /** The wall-clock time of BASE_HR: seconds and nanoseconds. */
  readonly baseSec: number;
  readonly baseNsec: number;
  /** The export thread's nice value (thread-priority.ts). */
  readonly nice: number;
}

export type ToExportThread =
  | SpanBatch
  | { readonly t: 'sync'; readonly id: number }
  | { readonly t: 'close'; readonly timeoutMs: number };

export interface DropCounts {
  readonly queueFull: number;
  readonly exportFailed: number;
}

export type FromExportThread =
  /** A batch taken: its numbers' buffer comes back (transferred) for a later batch. */
  | { readonly t: 'ack'; readonly spans: number; readonly buffer: ArrayBuffer }
  | { readonly t: 'counts'; readonly id: number; readonly dropped: DropCounts }
  | { readonly t: 'failed'; readonly count: number; readonly message: string; readonly dropped: DropCounts }
  | { readonly t: 'closed'; readonly dropped: DropCounts }
  | { readonly t: 'nice'; readonly message: string };
