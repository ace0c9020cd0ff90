/**
 * Triton's trace file format: a JSON array of entries, per trace one entry
 * naming the model, one per timestamp and one per recorded tensor, with
 * tensor data in the text form Triton writes (C++ stream formatting).
 */
import type { Tensor } from '../tensor/tensor.js';
import type { Trace } from './trace.js';

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

/**
 * Trace file entries as bytes, appended trace by trace into one growing
 * buffer that a single file write takes whole: no string per entry kept
 * alive, no join of thousands of strings.
 */
export class EntryBuffer {
  private buf: Buffer;
  /** Bytes used; byte 0 is the array's '['. */
  private len = 1;

  constructor(private readonly initialSize = 64 * 1024) {
    this.buf = Buffer.allocUnsafeSlow(initialSize);
    this.buf[0] = 0x5b; // [
  }

  get empty(): boolean {
    return this.len === 1;
  }

  /** Appends the entries of one trace, in the order Triton writes them. */
  append(trace: Trace): void {
    const text = traceEntriesJson(trace);
    if (text === '') return;
    // One UTF-8 character per UTF-16 unit takes at most 3 bytes.
    this.reserve(1 + text.length * 3 + 1);
    if (this.len > 1) this.buf[this.len++] = 0x2c; // ,
    this.len += this.buf.write(text, this.len, "utf8");
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
    this.buf[this.len++] = 0x5d; // ]
    const out = this.buf.subarray(0, this.len);
    this.buf = Buffer.allocUnsafeSlow(Math.max(this.initialSize, this.len));
    this.buf[0] = 0x5b;
    this.len = 1;
    return out;
  }
}

/** The entries of one trace, comma-separated (no brackets), in the order Triton writes them. */
export function traceEntriesJson(trace: Trace): string {
  const id = trace.id;
  let out = '';
  if (trace.modelName !== '') {
    out = `{"id":${id},"model_name":${quoted(trace.modelName)},"model_version":${versionNumber(trace.modelVersion)}`;
    if (trace.requestId !== '') out += `,"request_id":${JSON.stringify(trace.requestId)}`;
    if (trace.parent !== undefined) out += `,"parent_id":${trace.parent.id}`;
    out += '}';
  }
  const names = trace.stampNames;
  const times = trace.stampTimes;
  const tensors = trace.tensorEntries;
  const after = trace.tensorAfter;
  let t = 0;
  const head = `{"id":${id},"timestamps":[{"name":"`;
  for (let i = 0; i < names.length; i++) {
    if (tensors !== undefined) {
      for (; t < tensors.length && after![t] === i; t++) out += (out === '' ? '' : ',') + tensors[t];
    }
    out += `${out === '' ? '' : ','}${head}${names[i]}","ns":${times[i]}}]}`;
  }
  if (tensors !== undefined) for (; t < tensors.length; t++) out += (out === '' ? '' : ',') + tensors[t];
  return out;
}

/** Model names come back request after request: their JSON text is kept. */
const quotedNames = new Map<string, string>();
function quoted(name: string): string {
  let q = quotedNames.get(name);
  if (q === undefined) {
    q = JSON.stringify(name);
    if (quotedNames.size < 4096) quotedNames.set(name, q);
  }
  return q;
}

function versionNumber(version: string): string {
  return /^-?\d+$/.test(version) ? version : '-1';
}
