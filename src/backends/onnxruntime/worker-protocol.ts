/**
 * Messages between an instance (main thread) and its session worker.
 * onnxruntime-node runs a session synchronously on the calling thread, so
 * each instance owns a worker thread that holds its InferenceSession.
 *
 * Numeric runs go through a shared arena: the main thread writes the input
 * bytes and a small header (names, types, dims) into a SharedArrayBuffer and
 * posts only the arena's number; the worker runs the session, writes the
 * outputs back into the same arena and posts the number back. A plain number
 * is far cheaper to post than an object that has to be cloned. Runs with
 * strings, or whose header does not fit, take the cloned-message path.
 */
import type { InferenceSession, Tensor as OrtTensor } from 'onnxruntime-node';
import type { TypedArray } from '../../tensor/datatype.js';

export type OrtTensorType = OrtTensor.Type;

/** workerData of a session worker. */
export interface SessionWorkerInit {
  readonly modelPath: string;
  readonly options: InferenceSession.SessionOptions;
}

/** A tensor crossing the thread boundary: numbers as a typed array, strings as string[]. */
export interface WireTensor {
  readonly name: string;
  readonly type: OrtTensorType;
  readonly dims: readonly number[];
  readonly data: TypedArray | readonly string[];
}

/**
 * An input of a run as the instance hands it over: numeric data as the byte
 * parts to place back to back (one per request of the batch), strings as is.
 */
export class RunFeed {
  constructor(
    readonly name: string,
    readonly type: OrtTensorType,
    readonly dims: readonly number[],
    /** Numeric inputs: the parts, back to back; empty for strings. */
    readonly parts: readonly Uint8Array[],
    /** Numeric inputs: total bytes of the parts. */
    readonly byteLength: number,
    /** String inputs: the elements; undefined for numeric inputs. */
    readonly strings: readonly string[] | undefined,
  ) {}
}

/** Numeric element types an arena can carry, by code (the index). */
export const ARENA_TYPES: readonly OrtTensorType[] = [
  'float32',
  'uint8',
  'int8',
  'uint16',
  'int16',
  'int32',
  'int64',
  'bool',
  'float16',
  'float64',
  'uint32',
  'uint64',
];

type TypedArrayCtor = new (buffer: ArrayBufferLike, byteOffset: number, length: number) => TypedArray;

/** The typed array that holds each arena type, by code. */
export const ARENA_ARRAYS: readonly (TypedArrayCtor & { readonly BYTES_PER_ELEMENT: number })[] = [
  Float32Array,
  Uint8Array,
  Int8Array,
  Uint16Array,
  Int16Array,
  Int32Array,
  BigInt64Array,
  Uint8Array,
  Uint16Array,
  Float64Array,
  Uint32Array,
  BigUint64Array,
];

const typeCodes = new Map<string, number>(ARENA_TYPES.map((t, i) => [t, i]));

/** The arena code of a type; -1 for types that take the cloned path (strings). */
export function arenaTypeCode(type: string): number {
  return typeCodes.get(type) ?? -1;
}

/**
 * Arena layout: a header of HEADER_WORDS int32s, then data from HEADER_BYTES.
 * Run header (main -> worker): nFeeds, then per feed nameId, typeCode,
 * byteOffset, byteLength, ndims, dims...; then nFetches, nameId per fetch.
 * Result header (worker -> main): nOutputs (in fetch order), then per output
 * typeCode, byteOffset, byteLength, ndims, dims... Outputs are written from
 * HEADER_BYTES on, over the inputs, which the run no longer needs.
 */
export const HEADER_WORDS = 1024;
export const HEADER_BYTES = HEADER_WORDS * 4;
/** Every tensor in the data area starts at a multiple of this. */
export const DATA_ALIGN = 16;

export function alignUp(n: number): number {
  return (n + DATA_ALIGN - 1) & ~(DATA_ALIGN - 1);
}

/**
 * Main -> worker. A plain number starts a run in that arena. 'name' gives the
 * next name id (ids count up from 0, in the order the names are sent);
 * 'arena' gives an arena (new, or grown in place of an older one).
 */
export type ToWorker =
  | number
  | { readonly kind: 'name'; readonly name: string }
  | { readonly kind: 'arena'; readonly arena: number; readonly buffer: SharedArrayBuffer }
  | { readonly kind: 'run'; readonly id: number; readonly feeds: readonly WireTensor[]; readonly fetches: readonly string[] }
  | { readonly kind: 'close' };

/**
 * Worker -> main. A plain number: the run in that arena is done and its
 * outputs are in the arena. 'result' / 'run-error' answer a cloned run by its
 * id (>= 1), or an arena run by -1 - arena (outputs that could not be put in
 * the arena come back cloned).
 */
export type FromWorker =
  | number
  | { readonly kind: 'ready' }
  | { readonly kind: 'init-error'; readonly message: string }
  | { readonly kind: 'result'; readonly id: number; readonly outputs: readonly WireTensor[] }
  | { readonly kind: 'run-error'; readonly id: number; readonly message: string };
