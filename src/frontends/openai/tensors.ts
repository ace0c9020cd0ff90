/** Building the model's input tensors from request values, in the datatype and shape the model declares. */
import type { TensorMetadata } from '../../types/api.js';
import { encodeBytesElements, type Tensor } from '../../tensor/tensor.js';
import { invalidRequest } from './errors.js';

/** The shape `count` elements take in `dims`: the innermost -1 takes what the fixed dims leave, other -1 dims are 1. */
export function fillShape(meta: TensorMetadata, count: number, param: string): number[] {
  const shape = [...meta.shape];
  let fixed = 1;
  let last = -1;
  for (let i = 0; i < shape.length; i++) {
    if (shape[i] === -1) last = i;
    else fixed *= shape[i]!;
  }
  for (let i = 0; i < shape.length; i++) if (shape[i] === -1 && i !== last) shape[i] = 1;
  if (last >= 0) {
    if (count % fixed !== 0) throw shapeError(meta, count, param);
    shape[last] = count / fixed;
  } else if (fixed !== count) {
    throw shapeError(meta, count, param);
  }
  return shape;
}

function shapeError(meta: TensorMetadata, count: number, param: string) {
  return invalidRequest(
    `'${param}' gives ${count} value(s), which the model's input '` +
    `${meta.name}' of shape ${JSON.stringify(meta.shape)} cannot hold`,
    param,
  );
}

/** One request's input of `values` (numbers, or booleans for BOOL), in the model's datatype. */
export function numericTensor(meta: TensorMetadata, values: readonly (number | boolean)[], param: string): Tensor {
  const shape = fillShape(meta, values.length, param);
  const n = values.length;
  let data: Uint8Array;
  const num = (v: number | boolean) => (typeof v === 'boolean' ? (v ? 1 : 0) : v);
  switch (meta.datatype) {
    case 'BOOL':
    case 'UINT8':
      data = Uint8Array.from(values, num);
      break;
    case 'INT8':
      data = new Uint8Array(Int8Array.from(values, num).buffer);
      break;
    case 'INT16':
      data = new Uint8Array(Int16Array.from(values, num).buffer);
      break;
    case 'UINT16':
      data = new Uint8Array(Uint16Array.from(values, num).buffer);
      break;
    case 'INT32':
      data = new Uint8Array(Int32Array.from(values, num).buffer);
      break;
    case 'UINT32':
      data = new Uint8Array(Uint32Array.from(values, num).buffer);
      break;
    case 'INT64':
      data = new Uint8Array(BigInt64Array.from(values, (v) => BigInt(num(v))).buffer);
      break;
    case 'UINT64':
      data = new Uint8Array(BigUint64Array.from(values, (v) => BigInt(num(v))).buffer);
      break;
    case 'FP32':
      data = new Uint8Array(Float32Array.from(values, num).buffer);
      break;
    case 'FP64':
      data = new Uint8Array(Float64Array.from(values, num).buffer);
      break;
    default:
      throw invalidRequest(
        `'${param}' cannot be given to the model: its input '${meta.name}' is ${meta.datatype}`,
        param,
      );
  }
  if (n === 0) data = new Uint8Array(0);
  return { name: meta.name, datatype: meta.datatype, shape, data };
}

export function bytesTensor(meta: TensorMetadata, values: readonly string[], param: string): Tensor {
  if (meta.datatype !== 'BYTES') {
    throw invalidRequest(
      `'${param}' cannot be given to the model: its input '${meta.name}' is ${meta.datatype}, not BYTES`,
      param,
    );
  }
  return {
    name: meta.name,
    datatype: 'BYTES',
    shape: fillShape(meta, values.length, param),
    data: encodeBytesElements(values),
  };
}
