/**
 * Between the caller's arrays and the wire's bytes: inputs are checked
 * (datatype, shape against the data's length) and laid out as the binary
 * tensor extension does (little-endian, BYTES elements length-prefixed);
 * output bytes become the typed array of their datatype, a view where the
 * bytes are aligned.
 */
import { type Datatype, datatypeInfo, elementCount, isDatatype, shapeToString } from '../tensor/datatype.js';
import { bytesOf, decodeBytesElements, encodeBytesElements } from '../tensor/tensor.js';
import { InvalidInputError, ProtocolError } from './errors.js';
import { toBFloat16, toFloat16 } from './half.js';
import type { InferInput, InputData, Parameters, RequestedOutput, SharedMemoryRef, TensorData } from './types.js';

/** One input as it goes on the wire: bytes in the binary layout, or a shared-memory window. */
export interface WireInput {
  readonly name: string;
  readonly datatype: Datatype;
  readonly shape: readonly number[];
  readonly bytes: Uint8Array | undefined;
  readonly sharedMemory: SharedMemoryRef | undefined;
  readonly parameters: Parameters | undefined;
}

const DATATYPE_LIST = 'BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BF16, BYTES';

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object') return (v as object).constructor?.name ?? 'an object';
  return typeof v;
}

function checkShape(where: string, shape: unknown): readonly number[] {
  if (!Array.isArray(shape))
    throw new InvalidInputError(`${where}: shape must be an array of dims, not ${describe(shape)}`);
  for (const d of shape) {
    if (typeof d !== 'number' || !Number.isSafeInteger(d) || d < 0) {
      throw new InvalidInputError(`${where}: shape ${JSON.stringify(shape)} has ${String(d)}; dims are integers >= 0`);
    }
  }
  return shape as number[];
}

export function checkSharedMemory(where: string, ref: SharedMemoryRef): SharedMemoryRef {
  if (typeof ref !== 'object' || ref === null)
    throw new InvalidInputError(`${where}: sharedMemory must be { region, byteSize, offset? }`);
  if (typeof ref.region !== 'string' || ref.region === '')
    throw new InvalidInputError(`${where}: sharedMemory.region must name a registered region`);
  for (const k of ['byteSize', 'offset'] as const) {
    const v = ref[k];
    if (k === 'offset' && v === undefined) continue;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
      throw new InvalidInputError(`${where}: sharedMemory.${k} must be an integer >= 0, not ${String(v)}`);
    }
  }
  return ref;
}

/**
 * The raw bytes of `data` for `datatype`. A typed array of the datatype's own
 * type is used as it is (no copy); plain arrays are converted.
 */
export function tensorBytes(where: string, datatype: Datatype, data: InputData): { bytes: Uint8Array; count: number } {
  if (datatype === 'BYTES') {
    if (!Array.isArray(data))
      throw new InvalidInputError(
        `${where} is BYTES: data must be an array of strings or Uint8Arrays, not ${describe(data)}`,
      );
    for (let i = 0; i < data.length; i++) {
      const e: unknown = data[i];
      if (typeof e !== 'string' && !(e instanceof Uint8Array)) {
        throw new InvalidInputError(`${where} is BYTES: element ${i} is ${describe(e)}, not a string or Uint8Array`);
      }
    }
    return { bytes: encodeBytesElements(data as (string | Uint8Array)[]), count: data.length };
  }
  const info = datatypeInfo(datatype);
  const Ctor = info.arrayType!;
  if (ArrayBuffer.isView(data)) {
    if (!(data instanceof Ctor)) {
      const want = datatype === 'FP16' || datatype === 'BF16' ? 'a Uint16Array of raw 16-bit words' : `a ${Ctor.name}`;
      throw new InvalidInputError(
        `${where} is ${datatype}: data must be ${want} or a plain array, not ${describe(data)}`,
      );
    }
    const a = data as unknown as ArrayLike<unknown> & ArrayBufferView;
    return { bytes: bytesOf(a), count: a.length };
  }
  if (!Array.isArray(data))
    throw new InvalidInputError(`${where}: data must be an array or a typed array, not ${describe(data)}`);
  return { bytes: fromPlainArray(where, datatype, data as readonly unknown[]), count: data.length };
}

function fromPlainArray(where: string, datatype: Datatype, values: readonly unknown[]): Uint8Array {
  const bad = (i: number, want: string) =>
    new InvalidInputError(
      `${where} is ${datatype}: element ${i} is ` +
      `${JSON.stringify(String(values[i]))} (${describe(values[i])}), not ${want}`,
    );
  switch (datatype) {
    case 'BOOL': {
      const out = new Uint8Array(values.length);
      for (let i = 0; i < values.length; i++) {
        const v = values[i];
        if (typeof v === 'boolean') out[i] = v ? 1 : 0;
        else if (v === 0 || v === 1) out[i] = v;
        else throw bad(i, 'a boolean');
      }
      return out;
    }
    case 'FP16':
    case 'BF16': {
      for (let i = 0; i < values.length; i++) if (typeof values[i] !== 'number') throw bad(i, 'a number');
      return bytesOf(datatype === 'FP16' ? toFloat16(values as number[]) : toBFloat16(values as number[]));
    }
    case 'FP32':
    case 'FP64': {
      const out = datatype === 'FP32' ? new Float32Array(values.length) : new Float64Array(values.length);
      for (let i = 0; i < values.length; i++) {
        const v = values[i];
        if (typeof v !== 'number') throw bad(i, 'a number');
        out[i] = v;
      }
      return bytesOf(out);
    }
    case 'INT64':
    case 'UINT64': {
      const signed = datatype === 'INT64';
      const out = signed ? new BigInt64Array(values.length) : new BigUint64Array(values.length);
      for (let i = 0; i < values.length; i++) {
        const v = values[i];
        const n = typeof v === 'bigint' ? v : typeof v === 'number' && Number.isSafeInteger(v) ? BigInt(v) : undefined;
        if (n === undefined || (signed ? n !== BigInt.asIntN(64, n) : n !== BigInt.asUintN(64, n))) {
          throw bad(i, `an integer in ${datatype}'s range`);
        }
        out[i] = n;
      }
      return bytesOf(out);
    }
    default: {
      const Ctor = datatypeInfo(datatype).arrayType!;
      const out = new Ctor(values.length) as Int32Array;
      const bits = datatypeInfo(datatype).byteSize * 8;
      const signed = datatype.startsWith('INT');
      const min = signed ? -(2 ** (bits - 1)) : 0;
      const max = signed ? 2 ** (bits - 1) - 1 : 2 ** bits - 1;
      for (let i = 0; i < values.length; i++) {
        const v = values[i];
        const n = typeof v === 'bigint' ? Number(v) : v;
        if (typeof n !== 'number' || !Number.isInteger(n) || n < min || n > max)
          throw bad(i, `an integer in ${datatype}'s range`);
        out[i] = n;
      }
      return bytesOf(out);
    }
  }
}

/** Checks every input and lays out its bytes; the error names the input at fault. */
export function wireInputs(model: string, inputs: readonly InferInput[]): WireInput[] {
  if (!Array.isArray(inputs)) throw new InvalidInputError(`request for model '${model}': inputs must be an array`);
  const out: WireInput[] = new Array(inputs.length);
  for (let i = 0; i < inputs.length; i++) {
    const input = inputs[i]!;
    if (typeof input !== 'object' || input === null || typeof input.name !== 'string' || input.name === '') {
      throw new InvalidInputError(`request for model '${model}': input ${i} has no name`);
    }
    const where = `input '${input.name}'`;
    // A scan rather than a Set: requests have few inputs, and this runs on every call.
    for (let j = 0; j < i; j++) {
      if (inputs[j]!.name === input.name) throw new InvalidInputError(`${where} is given twice`);
    }
    if (typeof input.datatype !== 'string' || !isDatatype(input.datatype)) {
      throw new InvalidInputError(
        `${where}: unknown datatype ${JSON.stringify(input.datatype)} (one of ${DATATYPE_LIST})`,
      );
    }
    const shape = checkShape(where, input.shape);
    if (input.sharedMemory !== undefined) {
      if (input.data !== undefined) throw new InvalidInputError(`${where}: give either data or sharedMemory, not both`);
      out[i] = {
        name: input.name,
        datatype: input.datatype,
        shape,
        bytes: undefined,
        sharedMemory: checkSharedMemory(where, input.sharedMemory),
        parameters: input.parameters,
      };
      continue;
    }
    if (input.data === undefined || input.data === null)
      throw new InvalidInputError(`${where} has no data (give data or sharedMemory)`);
    const { bytes, count } = tensorBytes(where, input.datatype, input.data);
    const expected = elementCount(shape);
    if (count !== expected) {
      throw new InvalidInputError(
        `${where}: shape ${shapeToString(shape)} holds ${expected} elements but data has ${count}`,
      );
    }
    out[i] = {
      name: input.name,
      datatype: input.datatype,
      shape,
      bytes,
      sharedMemory: undefined,
      parameters: input.parameters,
    };
  }
  return out;
}

/** A typed array over `bytes` (a view when aligned, else an aligned copy). */
function view(
  Ctor: NonNullable<ReturnType<typeof datatypeInfo>['arrayType']>,
  bytes: Uint8Array,
  size: number,
): TensorData {
  const n = bytes.byteLength / size;
  if (bytes.byteOffset % size === 0) return new Ctor(bytes.buffer, bytes.byteOffset, n) as TensorData;
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return new Ctor(copy.buffer, 0, n) as TensorData;
}

/** The data of one output from its bytes in the binary layout; a ProtocolError if they do not fit the shape. */
export function outputData(
  what: string,
  name: string,
  datatype: string,
  shape: readonly number[],
  bytes: Uint8Array,
  bytesAsStrings: boolean,
): TensorData {
  if (!isDatatype(datatype))
    throw new ProtocolError(
      `${what}: output '${name}' of the answer has an unknown datatype ${JSON.stringify(datatype)}`,
    );
  const count = elementCount(shape);
  if (datatype === 'BYTES') {
    let elements: Uint8Array[];
    try {
      elements = decodeBytesElements(bytes, name);
    } catch (err) {
      throw new ProtocolError(`${what}: output '${name}' of the answer: ${(err as Error).message}`);
    }
    if (elements.length !== count) {
      throw new ProtocolError(
        `${what}: output '${name}' of the answer has ${elements.length} ` +
        `BYTES elements but its shape ${shapeToString(shape)} holds ${count}`,
      );
    }
    if (bytesAsStrings) return elements.map((e) => Buffer.from(e.buffer, e.byteOffset, e.byteLength).toString('utf8'));
    return elements.map((e) => Buffer.from(e.buffer, e.byteOffset, e.byteLength));
  }
  const info = datatypeInfo(datatype);
  if (bytes.byteLength !== count * info.byteSize) {
    throw new ProtocolError(
      `${what}: output '${name}' of the answer has ${bytes.byteLength} bytes but ` +
      `${datatype} of shape ${shapeToString(shape)} needs ${count * info.byteSize}`,
    );
  }
  return view(info.arrayType!, bytes, info.byteSize);
}

/** An empty array of the datatype, for outputs written to shared memory. */
export function emptyData(datatype: Datatype): TensorData {
  if (datatype === 'BYTES') return [];
  const Ctor = datatypeInfo(datatype).arrayType!;
  return new Ctor(0) as TensorData;
}

/** A shape from the answer: dims must be integers >= 0 (64-bit dims arrive as bigint over gRPC). */
export function answerShape(what: string, name: string, dims: unknown): number[] {
  if (!Array.isArray(dims)) throw new ProtocolError(`${what}: output '${name}' of the answer has no shape`);
  const out = new Array<number>(dims.length);
  for (let i = 0; i < dims.length; i++) {
    const d = dims[i];
    const n = typeof d === 'bigint' ? Number(d) : d;
    if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) {
      throw new ProtocolError(
        `${what}: output '${name}' of the answer has a bad shape ` +
        `${JSON.stringify(dims, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))}`,
      );
    }
    out[i] = n;
  }
  return out;
}

/** The outputs a request asked the server to write into shared memory, by name (undefined when none). */
export function sharedMemoryOutputs(r: {
  readonly outputs: readonly RequestedOutput[] | undefined;
}): Map<string, SharedMemoryRef> | undefined {
  let out: Map<string, SharedMemoryRef> | undefined;
  if (r.outputs === undefined) return undefined;
  for (const o of r.outputs) {
    if (o.sharedMemory !== undefined)
      (out ??= new Map()).set(o.name, {
        region: o.sharedMemory.region,
        byteSize: o.sharedMemory.byteSize,
        offset: o.sharedMemory.offset ?? 0,
      });
  }
  return out;
}
