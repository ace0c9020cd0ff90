/**
 * Triton's trace file format: a JSON array of entries, per trace one entry
 * naming the model, one per timestamp and one per recorded tensor, with
 * tensor data in the text form Triton writes (C++ stream formatting).
 */
import type { Tensor } from '../tensor/tensor.js';
import type { Trace } from './trace.js';
import { BASE_HR, NONE, RecordWriter, STAMP_NAMES } from './file-record.js';

/** A number as a C++ ostream prints it by default (%g with 6 significant digits). */
export function formatG(x: number): string {
  if (Number.isNaN(x)) return 'nan';
  if (!Number.isFinite(x)) return x > 0 ? 'inf' : '-inf';
  if (x === 0) return Object.is(x, -0) ? '-0' : '0';
  const exp = x.toExponential(5); // rounds to 6 significant digits first
  const e = Number(exp.slice(exp.indexOf('e') + 1));
  if (e < -4 || e >= 6) {
    let mantissa = exp.slice(0, exp.indexOf('e'));
    if (mantissa.includes('.')) mantissa = mantissa.replace(/\.?0+$/, '');
    const sign = e < 0 ? '-' : '+';
    const digits = String(Math.abs(e)).padStart(2, '0');
    return `${mantissa}e${sign}${digits}`;
  }
  let fixed = x.toFixed(Math.max(0, 5 - e));
  if (fixed.includes('.')) fixed = fixed.replace(/\.?0+$/, '');
  return fixed;
}

function numbers(
  t: Tensor,
  read: (view: DataView, offset: number) => number | bigint,
  size: number,
  float: boolean,
): string {
  const d = t.data;
  const view = new DataView(d.buffer, d.byteOffset, d.byteLength);
  const n = Math.floor(d.byteLength / size);
  const out: string[] = new Array(n);
  for (let i = 0; i < n; i++) {
    const v = read(view, i * size);
    out[i] = float ? formatG(v as number) : String(v);
  }
  return out.join(',');
}

/** The `data` text of a tensor entry; FP16/BF16 are left empty, as Triton leaves them. */
export function tensorDataText(t: Tensor): string {
  switch (t.datatype) {
    case 'BOOL':
      return numbers(t, (v, o) => (v.getUint8(o) === 0 ? 0 : 1), 1, false);
    case 'UINT8':
      return numbers(t, (v, o) => v.getUint8(o), 1, false);
    case 'INT8':
      return numbers(t, (v, o) => v.getInt8(o), 1, false);
    case 'UINT16':
      return numbers(t, (v, o) => v.getUint16(o, true), 2, false);
    case 'INT16':
      return numbers(t, (v, o) => v.getInt16(o, true), 2, false);
    case 'UINT32':
      return numbers(t, (v, o) => v.getUint32(o, true), 4, false);
    case 'INT32':
      return numbers(t, (v, o) => v.getInt32(o, true), 4, false);
    case 'UINT64':
      return numbers(t, (v, o) => v.getBigUint64(o, true), 8, false);
    case 'INT64':
      return numbers(t, (v, o) => v.getBigInt64(o, true), 8, false);
    case 'FP32':
      return numbers(t, (v, o) => v.getFloat32(o, true), 4, true);
    case 'FP64':
      return numbers(t, (v, o) => v.getFloat64(o, true), 8, true);
    case 'BYTES': {
      const d = t.data;
      const view = new DataView(d.buffer, d.byteOffset, d.byteLength);
      const parts: string[] = [];
      let offset = 0;
      while (offset + 4 <= d.byteLength) {
        const len = view.getUint32(offset, true);
        offset += 4;
        if (offset + len > d.byteLength) break;
        parts.push(`"${Buffer.from(d.buffer, d.byteOffset + offset, len).toString('utf8')}"`);
        offset += len;
      }
      return parts.join(',');
    }
    default:
      return '';
  }
}

/** One tensor entry, formatted when recorded so the trace holds text, not the request's buffers. */
export function tensorEntryJson(id: number, activity: string, t: Tensor): string {
  const tensor = { name: t.name, data: tensorDataText(t), shape: t.shape.join(','), dtype: t.datatype };
  return `{"id":${id},"activity":"${activity}","tensor":${JSON.stringify(tensor)}}`;
}

const ascii = (text: string): Uint8Array => Buffer.from(text, 'latin1');
const PARENT = ascii(',"parent_id":');
const REQUEST_ID = ascii(',"request_id":');
/** `,"timestamps":[{"name":"NAME","ns":` per timestamp code. */
const STAMP_HEADS: readonly Uint8Array[] = STAMP_NAMES.map((name) => ascii(`,"timestamps":[{"name":"${name}","ns":`));
/** `,"model_name":NAME,"model_version":` per model name (kept for 4096 names). */
const modelHeads = new Map<string, Uint8Array>();

function modelHead(name: string): Uint8Array {
  let head = modelHeads.get(name);
  if (head === undefined) {
    head = Buffer.from(`,"model_name":${JSON.stringify(name)},"model_version":`, 'utf8');
    if (modelHeads.size < 4096) modelHeads.set(name, head);
  }
  return head;
}

/**
 * Trace file entries as bytes, appended trace by trace (from the records of
 * file-record.ts) into one growing buffer that a single file write takes
 * whole: numbers are written as digits and names as bytes prepared once,
 * with no string per entry.
 */
export class EntryBuffer {
  private buf: Buffer;
  /** Bytes used; byte 0 is the array's '['. */
  private len = 1;
  private readonly baseNumber: number;

  constructor(
    private readonly initialSize = 64 * 1024,
    /** BASE_HR of the thread that wrote the records. */
    private readonly base: bigint = BASE_HR,
  ) {
    this.buf = Buffer.allocUnsafeSlow(initialSize);
    this.buf[0] = 0x5b; // [
    this.baseNumber = Number(base);
  }

  get empty(): boolean {
    return this.len === 1;
  }

  /** Appends the entries of one trace (as RecordWriter writes it), in the order Triton writes them. */
  append(trace: Trace): void {
    const records = new RecordWriter();
    if (!records.trace(0, trace)) return;
    const batch = records.take();
    this.appendRecord(batch.nums, 2, batch.strings);
  }

  /**
   * Appends the trace whose OP_TRACE record's fields start at `nums[at]` (after the op and the setting key); returns
   * where the next op starts.
   */
  appendRecord(nums: Float64Array, at: number, strings: readonly string[]): number {
    const id = nums[at++]!;
    const parent = nums[at++]!;
    const nameAt = nums[at++]!;
    const named = nameAt !== NONE;
    let version = 0;
    let versionText: string | undefined;
    let requestIdAt = NONE;
    if (named) {
      version = nums[at++]!;
      if (Number.isNaN(version)) versionText = strings[nums[at++]!]!;
      requestIdAt = nums[at++]!;
    }
    const stamps = nums[at++]!;
    const tensors = nums[at++]!;
    const stampsAt = at;
    // Room at most needed: 128 bytes per timestamp entry (20 digits for ns, 16 for the id), 6 per character of
    // the names' JSON text (an escaped control character), 3 per character of the tensors' UTF-8.
    let room = 256 + stamps * 128;
    if (named) {
      room += strings[nameAt]!.length * 6 + (versionText?.length ?? 0);
      if (requestIdAt !== NONE) room += strings[requestIdAt]!.length * 6;
    }
    let tensorsAt = stampsAt;
    for (let i = 0; i < stamps; i++) tensorsAt += Number.isNaN(nums[tensorsAt + 1]!) ? 3 : 2;
    for (let i = 0; i < tensors; i++) room += strings[nums[tensorsAt + 2 * i + 1]!]!.length * 3 + 1;
    this.reserve(room);
    if (named) {
      this.entryStart(id);
      this.bytes(modelHead(strings[nameAt]!));
      if (versionText !== undefined) this.len += this.buf.write(versionText, this.len, 'latin1');
      else if (version < 0) {
        this.buf[this.len++] = 0x2d; // -
        this.uint(-version);
      } else this.uint(version);
      if (requestIdAt !== NONE) {
        this.bytes(REQUEST_ID);
        this.len += this.buf.write(JSON.stringify(strings[requestIdAt]!), this.len, 'utf8');
      }
      if (parent !== NONE) {
        this.bytes(PARENT);
        this.uint(parent);
      }
      this.buf[this.len++] = 0x7d; // }
    }
    let t = 0;
    at = stampsAt;
    for (let i = 0; i < stamps; i++) {
      for (; t < tensors && nums[tensorsAt + 2 * t]! === i; t++) this.text(strings[nums[tensorsAt + 2 * t + 1]!]!);
      this.entryStart(id);
      this.bytes(STAMP_HEADS[nums[at++]!]!);
      const rel = nums[at++]!;
      if (Number.isNaN(rel)) this.len += this.buf.write(strings[nums[at++]!]!, this.len, 'latin1');
      else {
        const ns = this.baseNumber + rel;
        if (ns <= Number.MAX_SAFE_INTEGER && ns >= 0 && this.baseNumber <= Number.MAX_SAFE_INTEGER) this.uint(ns);
        else this.len += this.buf.write(String(this.base + BigInt(rel)), this.len, 'latin1');
      }
      this.stampEnd();
    }
    for (; t < tensors; t++) this.text(strings[nums[tensorsAt + 2 * t + 1]!]!);
    return tensorsAt + 2 * tensors;
  }

  /** `,{"id":N` (no comma before the array's first entry); bytes this short are stored, not copied. */
  private entryStart(id: number): void {
    const buf = this.buf;
    let at = this.len;
    if (at > 1) buf[at++] = 0x2c; // ,
    buf[at] = 0x7b; // {
    buf[at + 1] = 0x22; // "
    buf[at + 2] = 0x69; // i
    buf[at + 3] = 0x64; // d
    buf[at + 4] = 0x22; // "
    buf[at + 5] = 0x3a; // :
    this.len = at + 6;
    this.uint(id);
  }

  /** `}]}` */
  private stampEnd(): void {
    const buf = this.buf;
    const at = this.len;
    buf[at] = 0x7d;
    buf[at + 1] = 0x5d;
    buf[at + 2] = 0x7d;
    this.len = at + 3;
  }

  /** A prepared fragment. */
  private bytes(src: Uint8Array): void {
    this.buf.set(src, this.len);
    this.len += src.length;
  }

  /** A whole entry given as text. */
  private text(entry: string): void {
    if (this.len > 1) this.buf[this.len++] = 0x2c;
    this.len += this.buf.write(entry, this.len, 'utf8');
  }

  /** A non-negative integer up to 2^53 in decimal: two halves of at most 8 digits, each in 32-bit arithmetic. */
  private uint(n: number): void {
    const buf = this.buf;
    const high = Math.floor(n / 1e8);
    const low = n - high * 1e8;
    if (high === 0) {
      this.len = writeDigits(buf, this.len, low, digitCount(low));
      return;
    }
    const at = writeDigits(buf, this.len, high, digitCount(high));
    this.len = writeDigits(buf, at, low, 8);
  }

  /** Moves the entries of `other` here (`other` starts again empty). */
  appendEntries(other: EntryBuffer): void {
    if (other.empty) return;
    const body = other.take();
    this.reserve(body.length);
    if (this.len > 1) this.buf[this.len++] = 0x2c;
    this.len += body.copy(this.buf, this.len, 1, body.length - 1);
  }

  private reserve(bytes: number): void {
    const need = this.len + bytes;
    if (need <= this.buf.length) return;
    const grown = Buffer.allocUnsafeSlow(Math.max(need, this.buf.length * 2));
    this.buf.copy(grown, 0, 0, this.len);
    this.buf = grown;
  }

  /** The entries so far as a JSON array (the buffer is handed over); the buffer starts again empty. */
  take(): Buffer {
    this.reserve(1);
    this.buf[this.len++] = 0x5d; // ]
    const out = this.buf.subarray(0, this.len);
    // Room for a batch a little larger than this one, so that the next does not grow (a copy of it all) near its end.
    this.buf = Buffer.allocUnsafeSlow(Math.max(this.initialSize, this.len + (this.len >> 3)));
    this.buf[0] = 0x5b;
    this.len = 1;
    return out;
  }
}

function digitCount(n: number): number {
  let d = 1;
  for (let p = 10; p <= n && d < 8; p *= 10) d++;
  return d;
}

/** `n` (< 10^8) as exactly `count` digits (zero-padded) at `at`; returns the position after them. */
function writeDigits(buf: Buffer, at: number, n: number, count: number): number {
  let v = n | 0;
  const end = at + count;
  for (let i = end - 1; i >= at; i--) {
    const q = (v / 10) | 0;
    buf[i] = 48 + v - q * 10;
    v = q;
  }
  return end;
}

