/**
 * The `data` items of an OpenAI embeddings answer made from a model's FP32
 * output: the rows mean-pooled over their tokens, L2-normalised when asked,
 * and written as JSON floats (float32-json.ts) or base64. One code for the
 * event loop and for the onnxruntime session thread, which makes them where
 * the model ran when asked (docs/openai.md, "Off the event loop"), so both
 * give the same text to the byte.
 */
import { JsonBytes } from './float32-json.js';

/**
 * Asks for an FP32 output as embeddings items (Tensor.embeddingText): a
 * backend that runs off the event loop may make them there. A hint: without
 * the text, the caller makes it from the output's bytes.
 */
export interface EmbeddingTextHint {
  readonly output: string;
  /**
   * Per row of the request, the tokens to mean-pool its output over (the attention mask is 1 exactly on
   * the first ones; the output is [rows, seq, dim]); undefined: the output is [rows, dim], one vector a row.
   */
  readonly lengths: readonly number[] | undefined;
  readonly normalize: boolean;
  readonly base64: boolean;
  /** The answer's index of the request's first row. */
  readonly firstIndex: number;
}

/**
 * The vectors of a batch's `rows` rows, one after the other in one array: each row's own (a pooled output), or
 * the mean of its first `lengths[first + row]` token vectors (the attention mask is 1 exactly there);
 * L2-normalised when asked. Each mean is summed in local variables, four dimensions at a time, token by token
 * in order: the same sums as one dimension at a time, at a fraction of the cost of keeping them in an array.
 */
export function poolRows(
  out: Float32Array,
  rows: number,
  seq: number,
  dim: number,
  lengths: ArrayLike<number> | undefined,
  first: number,
  normalize: boolean,
  into?: Float32Array,
): Float32Array {
  const v = into === undefined ? new Float32Array(rows * dim) : into.subarray(0, rows * dim);
  for (let row = 0; row < rows; row++) {
    const o = row * dim;
    if (lengths === undefined) {
      for (let d = 0; d < dim; d++) v[o + d] = out[o + d]!;
    } else if (lengths[first + row]! === 0) {
      for (let d = 0; d < dim; d++) v[o + d] = 0;
    } else {
      const tokens = lengths[first + row]!;
      const start = row * seq * dim;
      const stop = start + tokens * dim;
      let d = 0;
      for (; d + 4 <= dim; d += 4) {
        let a0 = 0;
        let a1 = 0;
        let a2 = 0;
        let a3 = 0;
        for (let i = start + d; i < stop; i += dim) {
          a0 += out[i]!;
          a1 += out[i + 1]!;
          a2 += out[i + 2]!;
          a3 += out[i + 3]!;
        }
        v[o + d] = a0 / tokens;
        v[o + d + 1] = a1 / tokens;
        v[o + d + 2] = a2 / tokens;
        v[o + d + 3] = a3 / tokens;
      }
      for (; d < dim; d++) {
        let a = 0;
        for (let i = start + d; i < stop; i += dim) a += out[i]!;
        v[o + d] = a / tokens;
      }
    }
    if (normalize) {
      let squares = 0;
      for (let d = 0; d < dim; d++) squares += v[o + d]! * v[o + d]!;
      const norm = Math.sqrt(squares);
      if (norm > 0) for (let d = 0; d < dim; d++) v[o + d]! /= norm;
    }
  }
  return v;
}

const ascii = (s: string) => Uint8Array.from(s, (c) => c.charCodeAt(0));
/** `{"object":"embedding","index":i,"embedding":` (with its leading comma past the first), by index. */
const itemHeads: Uint8Array[] = [];
const itemHead = (i: number): Uint8Array =>
  (itemHeads[i] ??= ascii(`${i === 0 ? '' : ','}{"object":"embedding","index":${i},"embedding":`));
/** Reused by every text of this thread: each leaves it as a string. */
const bytes = new JsonBytes();

/**
 * The items of `vectors` (rows of `dim` values, the first at answer index `firstIndex`), comma-separated and
 * with a leading comma past index 0; ASCII. A number instead when a value is not finite (JSON holds none):
 * the index in `vectors` of the first such value.
 */
export function embeddingItems(
  vectors: Float32Array,
  dim: number,
  firstIndex: number,
  base64: boolean,
): string | number {
  const rows = dim === 0 ? 0 : vectors.length / dim;
  if (base64) {
    const b = Buffer.from(vectors.buffer, vectors.byteOffset, vectors.byteLength);
    let s = '';
    for (let r = 0; r < rows; r++) {
      const i = firstIndex + r;
      const embedding = b.toString('base64', r * dim * 4, (r + 1) * dim * 4);
      s += `${i === 0 ? '' : ','}{"object":"embedding","index":${i},"embedding":"${embedding}"}`;
    }
    return s;
  }
  const out = bytes;
  const words = new Int32Array(vectors.buffer, vectors.byteOffset, vectors.length);
  for (let r = 0; r < rows; r++) {
    const head = itemHead(firstIndex + r);
    out.reserve(head.length + 3, dim);
    out.put(head);
    out.byte(0x5b);
    const bad = out.floats(vectors, words, r * dim, (r + 1) * dim);
    if (bad >= 0) {
      out.clear();
      return bad;
    }
    out.byte(0x5d);
    out.byte(0x7d);
  }
  return out.take();
}

/**
 * The items of a request's rows of an FP32 output as `hint` asks: `out` holds them from its start, `rows` of
 * `rowElements` values, the last dimension `lastDim` (a token's vector when mean-pooled). A number instead
 * as embeddingItems gives one.
 */
export function hintedItems(
  hint: EmbeddingTextHint,
  out: Float32Array,
  rows: number,
  rowElements: number,
  lastDim: number,
): string | number {
  const lengths = hint.lengths;
  const dim = lengths === undefined ? rowElements : lastDim;
  if (scratch.length < rows * dim) scratch = new Float32Array(Math.max(rows * dim, 2 * scratch.length));
  const vectors = poolRows(out, rows, rowElements / dim, dim, lengths, 0, hint.normalize, scratch);
  return embeddingItems(vectors, dim, hint.firstIndex, hint.base64);
}

/** The vectors of hintedItems, reused by every call of this thread (each is written out before it returns). */
let scratch = new Float32Array(4096);
