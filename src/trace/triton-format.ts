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

/** The entries of one trace, comma-separated (no brackets), in the order Triton writes them. */
export function traceEntriesJson(trace: Trace): string {
  const parts: string[] = [];
  const id = trace.id;
  if (trace.modelName !== '') {
    let head = `{"id":${id},"model_name":${JSON.stringify(trace.modelName)},"model_version":` +
      `${versionNumber(trace.modelVersion)}`;
    if (trace.requestId !== '') head += `,"request_id":${JSON.stringify(trace.requestId)}`;
    if (trace.parent !== undefined) head += `,"parent_id":${trace.parent.id}`;
    parts.push(head + '}');
  }
  for (const e of trace.entries) {
    if (e.kind === 'stamp') parts.push(`{"id":${id},"timestamps":[{"name":"${e.name}","ns":${e.ns}}]}`);
    else parts.push(e.json);
  }
  return parts.join(',');
}

function versionNumber(version: string): string {
  return /^-?\d+$/.test(version) ? version : '-1';
}
