/**
 * The classification extension: an output becomes its top-K entries as
 * BYTES strings "value:index[:label]", highest value first.
 */
import { Errors } from '../errors.js';
import { elementCount } from '../tensor/datatype.js';
import { type Tensor, encodeBytesElements, typedView } from '../tensor/tensor.js';

/** C++ std::to_string formatting, which is what clients see from Triton. */
function formatValue(v: number | bigint, isFloat: boolean): string {
  if (typeof v === 'bigint') return v.toString();
  return isFloat ? v.toFixed(6) : String(v);
}

function fp16ToNumber(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * 2 ** -14 * (f / 1024);
  if (e === 31) return f ? NaN : s * Infinity;
  return s * 2 ** (e - 15) * (1 + f / 1024);
}

export function classify(
  output: Tensor,
  k: number,
  batching: boolean,
  labels: readonly string[] | undefined,
  modelName: string,
): Tensor {
  if (output.datatype === 'BYTES') {
    throw Errors.invalidRequest(
      `class result not available for output '${output.name}' due to unsupported type 'BYTES' for model '${modelName}'`,
    );
  }
  const raw = typedView(output);
  const isFloat = output.datatype.startsWith('FP') || output.datatype === 'BF16';
  const values: (number | bigint)[] = new Array(raw.length);
  for (let i = 0; i < raw.length; i++) {
    const x = raw[i]!;
    if (output.datatype === 'FP16') values[i] = fp16ToNumber(x as number);
    else if (output.datatype === 'BF16')
      values[i] = new Float32Array(new Uint32Array([(x as number) << 16]).buffer)[0]!;
    else values[i] = x;
  }
  const batch = batching && output.shape.length > 0 ? output.shape[0]! : 1;
  const perItem = batch === 0 ? 0 : elementCount(output.shape) / batch;
  const topK = Math.min(k, perItem);
  const strings: string[] = [];
  for (let b = 0; b < batch; b++) {
    const base = b * perItem;
    const idx = Array.from({ length: perItem }, (_, i) => i);
    idx.sort((a, c) => {
      const va = values[base + a]!;
      const vc = values[base + c]!;
      return va > vc ? -1 : va < vc ? 1 : a - c;
    });
    for (let j = 0; j < topK; j++) {
      const i = idx[j]!;
      const label = labels && i < labels.length ? `:${labels[i]}` : '';
      strings.push(`${formatValue(values[base + i]!, isFloat)}:${i}${label}`);
    }
  }
  const shape = batching ? [batch, topK] : [topK];
  return { name: output.name, datatype: 'BYTES', shape, data: encodeBytesElements(strings) };
}
