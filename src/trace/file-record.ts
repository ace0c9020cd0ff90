/**
 * The compact form in which finished traces travel from the event loop to
 * the trace file's writer thread (file-writer.ts; see docs/tracing.md,
 * "Cost"): numbers in one array, strings (model names once per batch,
 * request ids, tensor entries) in another. Times are ns since BASE_HR,
 * exact integers in a double; the writer adds BASE_HR back.
 */
import type { Trace } from './trace.js';
import { STAMP_CODES, STAMP_NAMES } from './stamp-codes.js';

export { BASE_HR } from './clock.js';

export { STAMP_CODES, STAMP_NAMES };

/**
 * Ops of a batch:
 * - OP_TRACE: setting key, id, parent id (NONE: none), model name (string index; NONE: no model entry), version
 *   (a number; NaN then a string index when not a plain integer), request id (string index or NONE), stamp count,
 *   tensor count; per stamp its code and time (NaN then a string index: an absolute ns past a double's integers);
 *   per tensor entry the stamps before it and its text (string index).
 * - OP_WRITE: setting key, file name (string index): the setting's entries so far go to that file.
 * - OP_WHOLE: setting key: the setting's entries so far join those of the plain file, written at close.
 */
export const OP_TRACE = 1;
export const OP_WRITE = 2;
export const OP_WHOLE = 3;
export const NONE = -1;

export interface FileBatch {
  readonly t: 'batch';
  readonly nums: Float64Array<ArrayBuffer>;
  readonly length: number;
  readonly strings: string[];
}

export interface FileWriterInit {
  /** BASE_HR of the thread that writes the records. */
  readonly base: bigint;
  /** The writer thread's nice value (thread-priority.ts). */
  readonly nice: number;
}

export type ToFileWriter = FileBatch | { readonly t: 'close'; readonly file: string };

export type FromFileWriter =
  | { readonly t: 'failed'; readonly file: string; readonly message: string }
  | { readonly t: 'closed' }
  | { readonly t: 'nice'; readonly message: string };

/** `version` as the trace file's number: a plain integer as given, anything else -1 (Triton's stoll fallback). */
const versions = new Map<string, number>();

/** Records being written into one batch (the event loop's side). */
export class RecordWriter {
  nums = new Float64Array(8 * 1024);
  at = 0;
  strings: string[] = [];
  private names = new Map<string, number>();

  /** Appends one trace; false (nothing written) when it has no entry in the file. */
  trace(key: number, trace: Trace): boolean {
    const names = trace.stampNames;
    const times = trace.stampTimes;
    const tensors = trace.tensorEntries;
    const named = trace.modelName !== '';
    const tensorCount = tensors === undefined ? 0 : tensors.length;
    if (!named && names.length === 0 && tensorCount === 0) return false;
    this.reserve(16 + names.length * 3 + tensorCount * 2);
    const nums = this.nums;
    let at = this.at;
    nums[at++] = OP_TRACE;
    nums[at++] = key;
    nums[at++] = trace.id;
    nums[at++] = trace.parent === undefined ? NONE : trace.parent.id;
    if (named) {
      nums[at++] = this.name(trace.modelName);
      const version = this.version(trace.modelVersion);
      nums[at++] = version;
      if (Number.isNaN(version)) nums[at++] = this.string(trace.modelVersion);
      nums[at++] = trace.requestId === '' ? NONE : this.string(trace.requestId);
    } else {
      nums[at++] = NONE;
    }
    nums[at++] = names.length;
    nums[at++] = tensorCount;
    for (let i = 0; i < names.length; i++) {
      nums[at++] = STAMP_CODES.get(names[i]!)!;
      const rel = times[i]!;
      nums[at++] = rel;
      if (rel !== rel) nums[at++] = this.string(String(trace.stampNs(i))); // NaN: as text
    }
    for (let i = 0; i < tensorCount; i++) {
      nums[at++] = trace.tensorAfter![i]!;
      nums[at++] = this.string(tensors![i]!);
    }
    this.at = at;
    return true;
  }

  /** OP_WRITE or OP_WHOLE. */
  op(op: number, key: number, file?: string): void {
    this.reserve(3);
    this.nums[this.at++] = op;
    this.nums[this.at++] = key;
    if (file !== undefined) this.nums[this.at++] = this.string(file);
  }

  get empty(): boolean {
    return this.at === 0;
  }

  /** The batch so far (its array handed over); the writer starts again empty. */
  take(): FileBatch {
    const batch: FileBatch = { t: 'batch', nums: this.nums, length: this.at, strings: this.strings };
    this.nums = new Float64Array(this.nums.length);
    this.at = 0;
    this.strings = [];
    this.names = new Map();
    return batch;
  }

  private reserve(more: number): void {
    // Each time past a double's integers adds one number.
    const need = this.at + more * 2;
    if (need <= this.nums.length) return;
    const grown = new Float64Array(Math.max(this.nums.length * 2, need));
    grown.set(this.nums.subarray(0, this.at));
    this.nums = grown;
  }

  private string(text: string): number {
    return this.strings.push(text) - 1;
  }

  private name(model: string): number {
    let i = this.names.get(model);
    if (i === undefined) this.names.set(model, (i = this.string(model)));
    return i;
  }

  private version(text: string): number {
    let v = versions.get(text);
    if (v === undefined) {
      const n = Number(text);
      v = /^-?\d+$/.test(text) ? (Number.isSafeInteger(n) && String(n) === text ? n : NaN) : -1;
      if (versions.size < 4096) versions.set(text, v);
    }
    return v;
  }
}
