/**
 * Encodes a KServe v2 HTTP infer request once, so the load loop only sends
 * prepared bytes. Binary tensor format: JSON header + raw tensor bytes with
 * Inference-Header-Content-Length; JSON format: `data` arrays.
 */
import { type Datatype } from '../../tensor/datatype.js';
import { decodeBytesElements } from '../../tensor/tensor.js';
import type { TensorFormat } from './options.js';
import type { RequestTensor } from './input-data.js';
import { PerfError } from './errors.js';

export interface EncodedHttpBody {
  readonly body: Buffer;
  /** Set for binary input: the JSON header's byte length. */
  readonly headerLength: number | undefined;
}

function jsonValues(t: RequestTensor): unknown[] {
  const d = t.data;
  const view = new DataView(d.buffer, d.byteOffset, d.byteLength);
  const out: unknown[] = [];
  const dt: Datatype = t.datatype;
  switch (dt) {
    case 'BYTES':
      for (const e of decodeBytesElements(d, t.name))
        out.push(Buffer.from(e.buffer, e.byteOffset, e.byteLength).toString('utf8'));
      return out;
    case 'BOOL':
      for (let i = 0; i < d.byteLength; i++) out.push(d[i] !== 0);
      return out;
    case 'FP16':
    case 'BF16':
      throw new PerfError(
        'failed to prepare requests',
        `input '${t.name}' is ${dt}, which cannot be sent as JSON; use --input-tensor-format binary`,
      );
    default:
      break;
  }
  const read: Record<string, [number, (off: number) => number | bigint]> = {
    UINT8: [1, (o) => view.getUint8(o)],
    INT8: [1, (o) => view.getInt8(o)],
    UINT16: [2, (o) => view.getUint16(o, true)],
    INT16: [2, (o) => view.getInt16(o, true)],
    UINT32: [4, (o) => view.getUint32(o, true)],
    INT32: [4, (o) => view.getInt32(o, true)],
    UINT64: [8, (o) => view.getBigUint64(o, true)],
    INT64: [8, (o) => view.getBigInt64(o, true)],
    FP32: [4, (o) => view.getFloat32(o, true)],
    FP64: [8, (o) => view.getFloat64(o, true)],
  };
  const [size, get] = read[dt]!;
  for (let off = 0; off < d.byteLength; off += size) out.push(get(off));
  return out;
}

/** JSON.stringify that writes bigint values as plain JSON numbers. */
function stringify(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? `__BIGINT__${v.toString()}__` : v)).replace(
    /"__BIGINT__(-?\d+)__"/g,
    '$1',
  );
}

export function encodeHttpInferBody(
  inputs: readonly RequestTensor[],
  outputNames: readonly string[],
  inputFormat: TensorFormat,
  outputFormat: TensorFormat,
): EncodedHttpBody {
  const binaryOut = outputFormat === 'binary';
  const header = {
    inputs: inputs.map((t) =>
      inputFormat === 'binary'
        ? { name: t.name, shape: t.shape, datatype: t.datatype, parameters: { binary_data_size: t.data.byteLength } }
        : { name: t.name, shape: t.shape, datatype: t.datatype, data: jsonValues(t) },
    ),
    outputs: outputNames.map((name) => ({ name, parameters: { binary_data: binaryOut } })),
  };
  const json = Buffer.from(stringify(header), 'utf8');
  if (inputFormat === 'json') return { body: json, headerLength: undefined };
  return { body: Buffer.concat([json, ...inputs.map((t) => t.data)]), headerLength: json.byteLength };
}
