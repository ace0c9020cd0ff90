/** The protocol data types, their sizes and their config-enum twins. */

export type Datatype =
  | 'BOOL'
  | 'UINT8'
  | 'UINT16'
  | 'UINT32'
  | 'UINT64'
  | 'INT8'
  | 'INT16'
  | 'INT32'
  | 'INT64'
  | 'FP16'
  | 'FP32'
  | 'FP64'
  | 'BYTES'
  | 'BF16';

export type TypedArray =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | BigUint64Array
  | BigInt64Array
  | Float32Array
  | Float64Array;

type TypedArrayCtor = {
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): TypedArray;
  new (length: number): TypedArray;
  readonly BYTES_PER_ELEMENT: number;
};

export interface DatatypeInfo {
  readonly name: Datatype;
  /** Bytes per element; 0 for BYTES (variable). */
  readonly byteSize: number;
  /** Value of the inference.DataType enum (TYPE_*). */
  readonly configEnum: number;
  /** The enum's name in config.pbtxt. */
  readonly configName: string;
  /** The typed array that views this type's raw bytes (FP16/BF16 as raw 16-bit words). */
  readonly arrayType: TypedArrayCtor | undefined;
}

const table: DatatypeInfo[] = [
  { name: 'BOOL', byteSize: 1, configEnum: 1, configName: 'TYPE_BOOL', arrayType: Uint8Array },
  { name: 'UINT8', byteSize: 1, configEnum: 2, configName: 'TYPE_UINT8', arrayType: Uint8Array },
  { name: 'UINT16', byteSize: 2, configEnum: 3, configName: 'TYPE_UINT16', arrayType: Uint16Array },
  { name: 'UINT32', byteSize: 4, configEnum: 4, configName: 'TYPE_UINT32', arrayType: Uint32Array },
  { name: 'UINT64', byteSize: 8, configEnum: 5, configName: 'TYPE_UINT64', arrayType: BigUint64Array },
  { name: 'INT8', byteSize: 1, configEnum: 6, configName: 'TYPE_INT8', arrayType: Int8Array },
  { name: 'INT16', byteSize: 2, configEnum: 7, configName: 'TYPE_INT16', arrayType: Int16Array },
  { name: 'INT32', byteSize: 4, configEnum: 8, configName: 'TYPE_INT32', arrayType: Int32Array },
  { name: 'INT64', byteSize: 8, configEnum: 9, configName: 'TYPE_INT64', arrayType: BigInt64Array },
  { name: 'FP16', byteSize: 2, configEnum: 10, configName: 'TYPE_FP16', arrayType: Uint16Array },
  { name: 'FP32', byteSize: 4, configEnum: 11, configName: 'TYPE_FP32', arrayType: Float32Array },
  { name: 'FP64', byteSize: 8, configEnum: 12, configName: 'TYPE_FP64', arrayType: Float64Array },
  { name: 'BYTES', byteSize: 0, configEnum: 13, configName: 'TYPE_STRING', arrayType: undefined },
  { name: 'BF16', byteSize: 2, configEnum: 14, configName: 'TYPE_BF16', arrayType: Uint16Array },
];

const byName = new Map<string, DatatypeInfo>(table.map((t) => [t.name, t]));
const byEnum = new Map<number, DatatypeInfo>(table.map((t) => [t.configEnum, t]));

export const DATATYPES: readonly DatatypeInfo[] = table;

export function isDatatype(s: string): s is Datatype {
  return byName.has(s);
}

export function datatypeInfo(dt: Datatype): DatatypeInfo {
  return byName.get(dt)!;
}

/** Protocol name for a config enum value (TYPE_STRING -> BYTES); undefined for TYPE_INVALID or unknown. */
export function datatypeFromConfigEnum(value: number): Datatype | undefined {
  return byEnum.get(value)?.name;
}

export function configEnumOf(dt: Datatype): number {
  return byName.get(dt)!.configEnum;
}

/** Config enum name (e.g. TYPE_FP32) for a config enum value. */
export function configNameOfEnum(value: number): string {
  return byEnum.get(value)?.configName ?? 'TYPE_INVALID';
}

/** Product of the dims (1 for a scalar shape []). */
export function elementCount(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/** Shape as Triton prints it in messages: [1,16]. */
export function shapeToString(shape: readonly (number | bigint)[]): string {
  return `[${shape.join(',')}]`;
}
