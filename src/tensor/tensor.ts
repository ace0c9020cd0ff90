import { type Datatype, type TypedArray, datatypeInfo, elementCount } from './datatype.js';

/**
 * A tensor is a name, a datatype, a shape and its raw little-endian bytes.
 *
 * Every module passes tensors in this one form: bytes exactly as the binary
 * tensor extension lays them out (BYTES elements as 4-byte little-endian
 * length + bytes). Decoders make `data` a view into the received buffer, so
 * nothing is copied on the way in.
 */
export interface Tensor {
  readonly name: string;
  readonly datatype: Datatype;
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}

export function makeTensor(name: string, datatype: Datatype, shape: readonly number[], data: Uint8Array): Tensor {
  return { name, datatype, shape, data };
}

/** Expected byte size for fixed-size types; undefined for BYTES. */
export function expectedByteSize(datatype: Datatype, shape: readonly number[]): number | undefined {
  const size = datatypeInfo(datatype).byteSize;
  return size === 0 ? undefined : size * elementCount(shape);
}

/**
 * A typed-array view over the tensor bytes. It is a view (no copy) when the
 * bytes are aligned for the element type, otherwise an aligned copy.
 * FP16/BF16 come back as raw Uint16Array words.
 */
export function typedView(t: Tensor): TypedArray {
  const info = datatypeInfo(t.datatype);
  const Ctor = info.arrayType;
  if (!Ctor) throw new Error(`BYTES tensor '${t.name}' has no typed view`);
  const n = t.data.byteLength / info.byteSize;
  if (t.data.byteOffset % info.byteSize === 0) {
    return new Ctor(t.data.buffer, t.data.byteOffset, n);
  }
  const copy = new Uint8Array(t.data.byteLength);
  copy.set(t.data);
  return new Ctor(copy.buffer, 0, n);
}

/** Wraps a typed array's memory as tensor bytes (no copy). */
export function bytesOf(a: ArrayBufferView): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

/** Splits length-prefixed BYTES data into its elements (views, no copy). Throws on a bad prefix. */
export function decodeBytesElements(data: Uint8Array, tensorName = ''): Uint8Array[] {
  const out: Uint8Array[] = [];
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let off = 0;
  while (off < data.byteLength) {
    if (off + 4 > data.byteLength) {
      throw new Error(
        `BYTES tensor '${tensorName}': element ${out.length} has a truncated length prefix at byte ${off} (need 4 bytes, ${data.byteLength - off} left)`,
      );
    }
    const len = view.getUint32(off, true);
    off += 4;
    if (off + len > data.byteLength) {
      throw new Error(
        `BYTES tensor '${tensorName}': element ${out.length} declares ${len} bytes at byte ${off - 4} but only ${data.byteLength - off} remain`,
      );
    }
    out.push(data.subarray(off, off + len));
    off += len;
  }
  return out;
}

/** Encodes elements as length-prefixed BYTES data. */
export function encodeBytesElements(elements: readonly (Uint8Array | string)[]): Uint8Array {
  const bufs = elements.map((e) => (typeof e === 'string' ? Buffer.from(e, 'utf8') : e));
  let total = 0;
  for (const b of bufs) total += 4 + b.byteLength;
  const out = Buffer.allocUnsafe(total);
  let off = 0;
  for (const b of bufs) {
    out.writeUInt32LE(b.byteLength, off);
    off += 4;
    out.set(b, off);
    off += b.byteLength;
  }
  return out;
}
