/** ONNX tensor element types and their protocol (Triton) twins. */
import type { Datatype } from '../tensor/datatype.js';

/** TensorProto.DataType values (onnx.proto). */
export const OnnxElemType = {
  UNDEFINED: 0,
  FLOAT: 1,
  UINT8: 2,
  INT8: 3,
  UINT16: 4,
  INT16: 5,
  INT32: 6,
  INT64: 7,
  STRING: 8,
  BOOL: 9,
  FLOAT16: 10,
  DOUBLE: 11,
  UINT32: 12,
  UINT64: 13,
  COMPLEX64: 14,
  COMPLEX128: 15,
  BFLOAT16: 16,
} as const;

const toDatatype = new Map<number, Datatype>([
  [OnnxElemType.FLOAT, 'FP32'],
  [OnnxElemType.UINT8, 'UINT8'],
  [OnnxElemType.INT8, 'INT8'],
  [OnnxElemType.UINT16, 'UINT16'],
  [OnnxElemType.INT16, 'INT16'],
  [OnnxElemType.INT32, 'INT32'],
  [OnnxElemType.INT64, 'INT64'],
  [OnnxElemType.STRING, 'BYTES'],
  [OnnxElemType.BOOL, 'BOOL'],
  [OnnxElemType.FLOAT16, 'FP16'],
  [OnnxElemType.DOUBLE, 'FP64'],
  [OnnxElemType.UINT32, 'UINT32'],
  [OnnxElemType.UINT64, 'UINT64'],
  [OnnxElemType.BFLOAT16, 'BF16'],
]);

const fromDatatype = new Map<Datatype, number>([...toDatatype].map(([k, v]) => [v, k]));

const onnxNames = new Map<number, string>(Object.entries(OnnxElemType).map(([k, v]) => [v, k]));

/** Protocol datatype of an ONNX element type; undefined for types Triton has no twin for (complex, float8...). */
export function datatypeFromOnnx(elemType: number): Datatype | undefined {
  return toDatatype.get(elemType);
}

/** ONNX element type of a protocol datatype. */
export function onnxElemTypeOf(dt: Datatype): number {
  return fromDatatype.get(dt)!;
}

/** ONNX's name for an element type (e.g. FLOAT), for messages. */
export function onnxElemTypeName(elemType: number): string {
  return onnxNames.get(elemType) ?? `ONNX element type ${elemType}`;
}
