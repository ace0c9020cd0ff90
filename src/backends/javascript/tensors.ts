/**
 * Tensors as a JavaScript model sees them, `{ name, datatype, shape, data }`
 * with `data` a typed array (BYTES: an array of Uint8Array), and their wire
 * form (protocol.ts). Runs on the worker thread.
 */
import { type Datatype, type TypedArray, datatypeInfo, isDatatype, shapeToString } from '../../tensor/datatype.js';
import { align8, type WireTensor } from './protocol.js';

export type TensorData = TypedArray | Uint8Array[];

export interface ModelTensor {
  name: string;
  datatype: Datatype;
  shape: number[];
  data: TensorData;
}

/** A problem with a tensor the model produced; the message names the tensor and what is wrong. */
export class TensorError extends Error {
  override readonly name = 'TensorError';
}

function elementsOf(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/** The wire form as the model sees it (views, no copies). */
export function toModelTensor(w: WireTensor): ModelTensor {
  const shape = w.s.slice();
  if (w.d === 'BYTES') return { name: w.n, datatype: w.d, shape, data: splitBytes(w) };
  const Ctor = datatypeInfo(w.d).arrayType!;
  return { name: w.n, datatype: w.d, shape, data: new Ctor(w.b, w.o, w.l / Ctor.BYTES_PER_ELEMENT) as TensorData };
}

function splitBytes(w: WireTensor): Uint8Array[] {
  const out: Uint8Array[] = [];
  const view = new DataView(w.b, w.o, w.l);
  let off = 0;
  while (off + 4 <= w.l) {
    const len = view.getUint32(off, true);
    off += 4;
    out.push(new Uint8Array(w.b, w.o + off, len));
    off += len;
  }
  return out;
}

/**
 * A tensor from the model, checked and reduced to bytes: `shared` bytes live
 * in a SharedArrayBuffer and pass by reference; `owned` bytes are a fresh
 * buffer of ours (an encoded BYTES tensor) that is transferred; any other
 * bytes belong to the model and are copied.
 */
export class StagedTensor {
  constructor(
    readonly name: string,
    readonly datatype: Datatype,
    readonly shape: readonly number[],
    readonly bytes: Uint8Array,
    readonly kind: 'shared' | 'owned' | 'copy',
  ) {}
}

const utf8 = new TextEncoder();

/** Typed arrays other than Uint8Array (raw bytes, always accepted) that hold each type. */
const ARRAY_NAMES: Record<Exclude<Datatype, 'BYTES'>, string> = {
  BOOL: 'Uint8Array',
  UINT8: 'Uint8Array',
  UINT16: 'Uint16Array',
  UINT32: 'Uint32Array',
  UINT64: 'BigUint64Array',
  INT8: 'Int8Array',
  INT16: 'Int16Array',
  INT32: 'Int32Array',
  INT64: 'BigInt64Array',
  FP16: 'Uint16Array',
  FP32: 'Float32Array',
  FP64: 'Float64Array',
  BF16: 'Uint16Array',
};

/** Float16Array where the runtime has one (FP16 data may come as one). */
const FLOAT16 = (globalThis as { Float16Array?: typeof Uint16Array }).Float16Array;

function typeName(v: unknown): string {
  if (v === null || v === undefined) return String(v);
  if (Array.isArray(v)) return 'an array';
  if (ArrayBuffer.isView(v)) return `a ${v.constructor.name}`;
  if (typeof v !== 'object') return `a ${typeof v}`;
  const ctor = (v as object).constructor?.name;
  return ctor && ctor !== 'Object' ? `a ${ctor}` : 'an object';
}

function bytesOfView(v: ArrayBufferView): Uint8Array {
  return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
}

function isShared(v: ArrayBufferView): boolean {
  return typeof SharedArrayBuffer !== 'undefined' && v.buffer instanceof SharedArrayBuffer;
}

/** Numbers (or bigints, booleans) in a plain array, as the datatype's bytes. */
function fromPlainArray(what: string, datatype: Exclude<Datatype, 'BYTES'>, values: readonly unknown[]): Uint8Array {
  if (datatype === 'FP16' || datatype === 'BF16') {
    throw new TensorError(
      `${what}: ${datatype} data must be a Uint16Array of raw 16-bit values, not an array of numbers`,
    );
  }
  const Ctor = datatypeInfo(datatype).arrayType!;
  const out = new Ctor(values.length);
  const big = datatype === 'INT64' || datatype === 'UINT64';
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (big) {
      if (typeof v === 'bigint') (out as BigInt64Array)[i] = v;
      else if (typeof v === 'number' && Number.isInteger(v)) (out as BigInt64Array)[i] = BigInt(v);
      else throw new TensorError(`${what}: element ${i} is ${typeName(v)}, not an integer`);
    } else if (typeof v === 'number') (out as Float64Array)[i] = v;
    else if (typeof v === 'boolean') (out as Uint8Array)[i] = v ? 1 : 0;
    else throw new TensorError(`${what}: element ${i} is ${typeName(v)}, not a number`);
  }
  return bytesOfView(out);
}

function encodeBytes(what: string, values: readonly unknown[]): Uint8Array {
  const parts = new Array<Uint8Array>(values.length);
  let total = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    let b: Uint8Array;
    if (typeof v === 'string') b = utf8.encode(v);
    else if (v instanceof Uint8Array) b = v;
    else throw new TensorError(`${what}: BYTES element ${i} is ${typeName(v)}; give a Uint8Array or a string`);
    parts[i] = b;
    total += 4 + b.byteLength;
  }
  const out = new Uint8Array(total);
  const view = new DataView(out.buffer);
  let off = 0;
  for (const b of parts) {
    view.setUint32(off, b.byteLength, true);
    out.set(b, off + 4);
    off += 4 + b.byteLength;
  }
  return out;
}

/**
 * BYTES elements that are still the consecutive, length-prefixed views of
 * one shared buffer (a BYTES input passed on as it came): the region they
 * span, which needs no encoding and no copy. Undefined otherwise.
 */
function sharedBytesRegion(elements: readonly unknown[]): Uint8Array | undefined {
  const first = elements[0];
  if (!(first instanceof Uint8Array) || !(first.buffer instanceof SharedArrayBuffer) || first.byteOffset < 4)
    return undefined;
  const buffer = first.buffer;
  const view = new DataView(buffer);
  const start = first.byteOffset - 4;
  let at = start;
  for (const e of elements) {
    if (
      !(e instanceof Uint8Array) ||
      e.buffer !== buffer ||
      e.byteOffset !== at + 4 ||
      view.getUint32(at, true) !== e.byteLength
    )
      return undefined;
    at += 4 + e.byteLength;
  }
  return new Uint8Array(buffer, start, at - start);
}

/**
 * Checks a tensor the model gave (an output or an infer() input) for
 * internal consistency: a known datatype, a shape of whole numbers, and data
 * of a fitting kind and size. `datatype` is the one expected when the tensor
 * names none. `kind` and `index` name it in messages until its name is
 * known ("output 1"). Throws TensorError.
 */
export function stageTensor(kind: string, index: number, value: unknown, expectedDatatype?: Datatype): StagedTensor {
  if (value === null || typeof value !== 'object')
    throw new TensorError(`${kind} ${index} is ${typeName(value)}, not a { name, datatype, shape, data } object`);
  const t = value as { name?: unknown; datatype?: unknown; shape?: unknown; data?: unknown };
  const name = t.name;
  if (typeof name !== 'string' || name === '') throw new TensorError(`${kind} ${index} has no name`);
  const label = `${kind} '${name}'`;
  const datatype = t.datatype === undefined ? expectedDatatype : t.datatype;
  if (typeof datatype !== 'string' || !isDatatype(datatype)) {
    throw new TensorError(`${label} has datatype ${JSON.stringify(datatype)}, which is not a Triton datatype`);
  }
  const shape = t.shape;
  if (!Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && d >= 0)) {
    throw new TensorError(`${label} has shape ${JSON.stringify(shape)}; a shape is an array of whole numbers`);
  }
  const count = elementsOf(shape);
  const data = t.data;
  if (datatype === 'BYTES') {
    if (!Array.isArray(data))
      throw new TensorError(
        `${label} is BYTES, so its data must be an array of Uint8Array or strings, not ${typeName(data)}`,
      );
    if (data.length !== count) {
      throw new TensorError(
        `${label} has ${data.length} elements, but its shape ${shapeToString(shape)} holds ${count}`,
      );
    }
    const region = sharedBytesRegion(data);
    if (region) return new StagedTensor(name, datatype, shape, region, 'shared');
    return new StagedTensor(name, datatype, shape, encodeBytes(label, data), 'owned');
  }
  let bytes: Uint8Array;
  let where: 'shared' | 'copy' = 'copy';
  if (ArrayBuffer.isView(data)) {
    const expected = ARRAY_NAMES[datatype];
    const fits =
      data instanceof Uint8Array ||
      data instanceof (datatypeInfo(datatype).arrayType as unknown as typeof Uint8Array) ||
      (datatype === 'FP16' && FLOAT16 !== undefined && data instanceof FLOAT16);
    if (!fits) {
      throw new TensorError(
        `${label} is ${datatype}, so its data must be a ${expected} ` +
        `(or raw bytes in a Uint8Array), not ${typeName(data)}`,
      );
    }
    bytes = bytesOfView(data);
    if (isShared(data)) where = 'shared';
  } else if (Array.isArray(data)) {
    bytes = fromPlainArray(label, datatype, data);
  } else {
    throw new TensorError(`${label} has data ${typeName(data)}; give a typed array`);
  }
  const size = datatypeInfo(datatype).byteSize;
  if (bytes.byteLength !== count * size) {
    throw new TensorError(
      `${label} has ${bytes.byteLength} bytes of data, but shape ` +
      `${shapeToString(shape)} of ${datatype} needs ${count * size}`,
    );
  }
  return new StagedTensor(name, datatype, shape, bytes, where);
}

/**
 * Wire tensors for staged ones, and the buffers to transfer: shared bytes by
 * reference, owned buffers as they are, the rest copied into one buffer.
 */
export function packStaged(groups: readonly (readonly StagedTensor[])[]): {
  wire: WireTensor[][];
  transfer: ArrayBuffer[];
} {
  let copyBytes = 0;
  for (const g of groups) for (const t of g) if (t.kind === 'copy') copyBytes += align8(t.bytes.byteLength);
  const pack = copyBytes > 0 ? new ArrayBuffer(copyBytes) : undefined;
  const packBytes = pack ? new Uint8Array(pack) : undefined;
  const transfer: ArrayBuffer[] = pack ? [pack] : [];
  let at = 0;
  const wire = groups.map((g) =>
    g.map((t): WireTensor => {
      if (t.kind === 'copy') {
        packBytes!.set(t.bytes, at);
        const w = { n: t.name, d: t.datatype, s: t.shape, b: pack!, o: at, l: t.bytes.byteLength };
        at += align8(t.bytes.byteLength);
        return w;
      }
      if (t.kind === 'owned') transfer.push(t.bytes.buffer as ArrayBuffer);
      return { n: t.name, d: t.datatype, s: t.shape, b: t.bytes.buffer, o: t.bytes.byteOffset, l: t.bytes.byteLength };
    }),
  );
  return { wire, transfer };
}
