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
  /**
   * Set when the bytes still lie in a file (a client's shared-memory object)
   * and `data` reads them only when first used: a reader on another thread
   * may read the file itself instead, and nothing is copied on this one.
   */
  readonly file?: FileWindow | undefined;
  /**
   * The JSON text of `data` exactly as encodeJsonTensorData writes it, when
   * a backend formatted it already (off the event loop, because the caller
   * asked for the output as JSON). Frontends that write JSON may use it
   * instead of formatting the bytes again; everything else reads `data`.
   */
  readonly jsonData?: string | undefined;
  /**
   * The output as the items of an OpenAI embeddings answer, when a backend made them already (the request's
   * EmbeddingTextHint, see embedding-text.ts); everything else reads `data`.
   */
  readonly embeddingText?: string | undefined;
}

/**
 * Where a tensor's bytes lie in an open file. The descriptor stays valid
 * while the request that carries the tensor is under way; a reader that
 * outlives that (another thread, say) holds it open with hold().
 */
export interface FileWindow {
  readonly fd: number;
  /** Byte position of the tensor in the file. */
  readonly position: number;
  readonly byteLength: number;
  /** Keeps the descriptor open until the returned function is called; throws once the window is no longer valid. */
  hold(): () => void;
}

/** The tensor's size in bytes, without reading bytes that still lie in a file. */
export function tensorByteLength(t: Tensor): number {
  return t.file !== undefined ? t.file.byteLength : t.data.byteLength;
}

/** The same bytes under another name or shape (bytes in a file stay there until read). */
export function retagTensor(t: Tensor, name: string, shape: readonly number[]): Tensor {
  if (t.file === undefined) return { name, datatype: t.datatype, shape, data: t.data };
  return {
    name,
    datatype: t.datatype,
    shape,
    file: t.file,
    get data(): Uint8Array {
      return t.data;
    },
  };
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
        `BYTES tensor '${tensorName}': element ${out.length} has a truncated length ` +
        `prefix at byte ${off} (need 4 bytes, ${data.byteLength - off} left)`,
      );
    }
    const len = view.getUint32(off, true);
    off += 4;
    if (off + len > data.byteLength) {
      throw new Error(
        `BYTES tensor '${tensorName}': element ${out.length} declares ${len} ` +
        `bytes at byte ${off - 4} but only ${data.byteLength - off} remain`,
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
