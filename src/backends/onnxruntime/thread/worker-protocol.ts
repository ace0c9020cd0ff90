/**
 * Messages between instances (main thread) and a session thread.
 * onnxruntime-node runs a session synchronously on the calling thread, so
 * sessions live on worker threads. A thread may hold several sessions (the
 * small models of a repository share a few threads; see session-pool.ts):
 * every message and ring entry names the session it is for.
 *
 * Numeric runs go through a shared arena: the main thread writes the input
 * bytes and a small header (names, types, dims) into a SharedArrayBuffer and
 * appends the arena's number to the control ring; the worker runs the
 * session, writes the outputs back into the same arena and posts the number
 * back. A plain number is far cheaper to post than an object that has to be
 * cloned. Runs with strings, or whose header does not fit, take the
 * cloned-message path.
 *
 * Waking a sleeping thread costs tens of microseconds on a virtual machine,
 * more than a small model's run. So the main thread may append runs while
 * the worker is still busy with earlier ones, and a worker that finishes a
 * run waits for the next one busy-waiting or dozing before it sleeps (see
 * session-worker.ts); either way the next run usually starts without a
 * message.
 */
import type { MessagePort } from 'node:worker_threads';
import type { InferenceSession, Tensor as OrtTensor } from 'onnxruntime-node';
import type { TypedArray } from '../../../tensor/datatype.js';
import type { FileWindow } from '../../../tensor/tensor.js';

export type OrtTensorType = OrtTensor.Type;

/** workerData of a session thread. */
export interface SessionWorkerInit {
  /** The control block (see CONTROL_WORDS). */
  readonly control: SharedArrayBuffer;
  /** How long an idle worker busy-waits for the next run before it sleeps, µs (0: never). */
  readonly spinMicros: number;
  /**
   * Where the worker posts what it answers (FromWorker): a port of its own
   * rather than the worker's, so the main thread can also take the answers
   * in without waiting for its event loop to reach them (SessionThread.collectFinished).
   */
  readonly answers: MessagePort;
}

/**
 * The control block shared by an instance and its worker: a ring of run
 * entries the main thread appends to and the worker consumes in order, and
 * the worker's state. Every run goes through the ring, so a worker that is
 * busy or busy-waiting picks the next run up without being woken; only a
 * sleeping worker needs a message (WAKE).
 *
 * An entry >= 0 names a session and what to run for it (see ringEntry): an
 * arena holding a run, or the session's next 'run' message from the port.
 * RING_CONTROL means "the next control message (open, release, exit) from
 * the port", so that control work takes its turn between runs and reaches a
 * worker in any state the way runs do. Messages other than WAKE are counted in
 * C_SENT, and the worker receives every counted message before it starts an
 * entry, so names, arenas and cloned runs sent before an entry are known by
 * the time it runs.
 */
export const C_STATE = 0;
export const C_TAIL = 1;
export const C_SENT = 2;
/** 1 when the last entry found the instance with nothing in flight (light load: the worker may busy-wait). */
export const C_LIGHT = 3;
/** Entries the worker has finished, counting up (a watchdog reads it to tell a stalled thread). */
export const C_DONE = 4;
/** 1 + the session slot whose entry the worker is running; 0 between entries. */
export const C_RUNNING = 5;
/**
 * Set to 1 when the main thread gives the thread up (its sessions have moved
 * elsewhere): the worker ends after the entry it is running. Stopping a
 * thread from outside while onnxruntime runs in it would abort the process.
 */
export const C_ABANDONED = 6;
export const RING_BASE = 8;
export const RING_SIZE = 1024;
export const RING_MASK = RING_SIZE - 1;
export const CONTROL_WORDS = RING_BASE + RING_SIZE;
export const STATE_AWAKE = 0;
export const STATE_SLEEPING = 1;
/** In short timed waits on C_TAIL: picks an entry up by itself within a step, or at once when notified. */
export const STATE_DOZING = 2;
export const RING_CONTROL = -1;
/** Sessions a thread may hold at once (slots 0 .. MAX_SESSIONS - 1). */
export const MAX_SESSIONS = 0x7fff;
/** Arenas a session may have (indexes 0 .. MAX_ARENAS - 1). */
export const MAX_ARENAS = 0xfffe;

/** A ring entry: `session`'s arena `arena`, or its next cloned run when `arena` is -1. */
export function ringEntry(session: number, arena: number): number {
  return (session << 16) | (arena + 1);
}

export function entrySession(entry: number): number {
  return entry >>> 16;
}

/** The arena of an entry, or -1 for a cloned run. */
export function entryArena(entry: number): number {
  return (entry & 0xffff) - 1;
}
/** The message that wakes a sleeping worker. */
export const WAKE = -1;

/** A tensor crossing the thread boundary: numbers as a typed array, strings as string[]. */
export interface WireTensor {
  readonly name: string;
  readonly type: OrtTensorType;
  readonly dims: readonly number[];
  readonly data: TypedArray | readonly string[];
  /**
   * The JSON `data` text of each slice the run asked for (see TextRequest), by slice; undefined where not formatted.
   */
  readonly texts?: readonly (string | undefined)[] | undefined;
}

/** A slice of a TextRequest: no text. */
export const SLICE_SKIP = 0;
/** A slice of a TextRequest: its text. */
export const SLICE_FORMAT = 1;
/** A slice of a TextRequest: its text if it holds the plan's largeElements values or more. */
export const SLICE_IF_LARGE = 2;

/** A slice word: its rows and what to do with it. */
export function sliceWord(rows: number, mode: number): number {
  return rows * 4 + mode;
}

/** Embeddings text flags of a slice (see TextRequest.embed): base64 rather than floats. */
export const EMBED_BASE64 = 1;
/** Embeddings text flags: L2-normalised. */
export const EMBED_NORMALIZE = 2;
/** Embeddings text flags: the rows are mean-pooled over their first `lengths` tokens. */
export const EMBED_POOL = 4;

/**
 * An output whose JSON `data` text the session thread formats after the
 * run (encodeJsonTensorData, the function the HTTP frontend would call),
 * so that the event loop only copies the text. `slices` are the output's
 * requests (sliceWord): with `byRows`, each takes the next rows of dim 0;
 * without, the one slice is the whole tensor (its rows are 0).
 * With `embed`, the text is instead the slice's embeddings items
 * (hintedItems of tensor/embedding-text.ts): `embed` holds per slice its
 * EMBED_* flags and the answer index of its first row, `lengths` per row of
 * the output (slices in order) the tokens its mean is taken over.
 */
export class TextRequest {
  constructor(
    /** Position of the output in the run's fetches. */
    readonly fetch: number,
    /** The output's datatype, as its index in DATATYPES. */
    readonly datatype: number,
    /** The arena type code the output must come back with (else no text). */
    readonly typeCode: number,
    readonly byRows: boolean,
    readonly slices: readonly number[],
    readonly embed?: readonly number[],
    readonly lengths?: readonly number[],
  ) {}

  /** Header words of the request. */
  get words(): number {
    const embed = this.embed === undefined ? 0 : this.embed.length + 1 + (this.lengths?.length ?? 0);
    return 5 + this.slices.length + embed;
  }
}

/**
 * The outputs of a run whose JSON text the thread formats. Slices marked
 * SLICE_IF_LARGE are formatted when they hold `largeElements` values or
 * more: the thread knows the real sizes (variable dims leave the main
 * thread guessing).
 */
export class TextPlan {
  constructor(
    readonly requests: readonly TextRequest[],
    readonly largeElements: number,
  ) {}

  /** Header words of the plan. */
  get words(): number {
    let n = 2;
    for (const t of this.requests) n += t.words;
    return n;
  }
}

/** Texts a run formats are left to the event loop beyond this many bytes in all (arenas stay a sane size). */
export const MAX_TEXT_BYTES = 8 * 1024 * 1024;

/** One request's bytes of an input: in memory, or still in a file (read by the session thread). */
export type RunPart = Uint8Array | FileWindow;

/**
 * An input of a run as the instance hands it over: numeric data as the byte
 * parts to place back to back (one per request of the batch), strings as is.
 */
export class RunFeed {
  /** Bytes of the parts in memory (the rest lie in files). */
  readonly memoryBytes: number;
  /** How many parts lie in files. */
  readonly fileParts: number;

  constructor(
    readonly name: string,
    readonly type: OrtTensorType,
    readonly dims: readonly number[],
    /** Numeric inputs: the parts, back to back; empty for strings. */
    readonly parts: readonly RunPart[],
    /** Numeric inputs: total bytes of the parts. */
    readonly byteLength: number,
    /** String inputs: the elements; undefined for numeric inputs. */
    readonly strings: readonly string[] | undefined,
  ) {
    let memory = 0;
    let files = 0;
    for (const part of parts) {
      if (part instanceof Uint8Array) memory += part.byteLength;
      else files += 1;
    }
    this.memoryBytes = memory;
    this.fileParts = files;
  }
}

/** Header words of one file part (see the arena layout). */
export const FILE_PART_WORDS = 5;
const TWO_32 = 4294967296;

/** A file position as the two int32 words the header holds (low, high). */
export function positionWords(position: number): [number, number] {
  return [position % TWO_32 | 0, Math.floor(position / TWO_32)];
}

export function positionFromWords(low: number, high: number): number {
  return high * TWO_32 + (low >>> 0);
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
 * byteOffset, byteLength, ndims, dims..., nFileParts, and per file part
 * (FILE_PART_WORDS) its offset in the feed, its length, the descriptor and
 * the file position (low and high words); then nFetches, nameId per fetch;
 * then nTextRequests (0: none), largeElements, and per TextRequest its fetch,
 * datatype, typeCode, byRows (bit 0) and embed (bit 1), nSlices, slices...,
 * and with embed its flags and first index per slice, nLengths, lengths...
 * A feed's parts in memory lie back to back in the data area from
 * byteOffset; its file parts are not in the arena: the worker reads them
 * from their files straight into the buffer the session runs on.
 * Result header (worker -> main): nOutputs (in fetch order), then per output
 * typeCode, byteOffset, byteLength, ndims, dims...; then nTexts, the bytes
 * all the texts asked for needed (also those that did not fit, so the next
 * run's arena has room), and per text its fetch, slice, byteOffset and
 * byteLength (latin1: the JSON of numbers and booleans is ASCII). Outputs,
 * then texts, are written from HEADER_BYTES on, over the inputs, which the
 * run no longer needs.
 */
export const HEADER_WORDS = 1024;
export const HEADER_BYTES = HEADER_WORDS * 4;
/**
 * The last words of the header hold timestamps of the run (TIMES_COUNT
 * float64 hrtime ns): the worker's (taken from the ring, run started, run
 * ended, results written at TIME_DONE), then the main thread's (appended to
 * the ring, at TIME_APPENDED). Run and result headers use the words before
 * them. A cloned result carries the worker's four.
 */
export const TIMES_COUNT = 6;
export const TIME_DONE = 3;
export const TIME_APPENDED = 4;
/**
 * Not a time: how the worker ran the arena's run (MERGED_NOT, or one of
 * several runs it merged into one session run: MERGED_FIRST for the first,
 * whose timestamps stand for the session run, MERGED_LATER for the others).
 */
export const TIME_MERGED = 5;
export const MERGED_NOT = 0;
export const MERGED_FIRST = 1;
export const MERGED_LATER = 2;
export const TIMES_BYTE_OFFSET = HEADER_BYTES - 8 * TIMES_COUNT;
/**
 * The run header word before the timestamps (main -> worker): the most rows
 * (dim 0 summed over runs) the worker may run at once by merging this run
 * with the runs after it in the ring; 0: never merged. See session-worker.ts.
 */
export const MERGE_ROWS_WORD = TIMES_BYTE_OFFSET / 4 - 1;
export const USABLE_HEADER_WORDS = MERGE_ROWS_WORD;

export { nowNs } from '../../idle-wait.js';
/** Every tensor in the data area starts at a multiple of this. */
export const DATA_ALIGN = 16;

export function alignUp(n: number): number {
  return (n + DATA_ALIGN - 1) & ~(DATA_ALIGN - 1);
}

/**
 * Main -> worker. WAKE wakes a sleeping worker to read the ring. 'name' gives
 * a session's next name id (ids count up from 0 per session, in the order the
 * names are sent); 'arena' gives a session an arena (new, or grown in place
 * of an older one); 'run' is a run with strings, started by its session's
 * cloned-run entry. 'open' creates a session in a free slot, 'release'
 * releases one, 'exit' ends the thread; each is taken up by a RING_CONTROL
 * entry, in order.
 */
export type ToWorker =
  | typeof WAKE
  | { readonly kind: 'name'; readonly session: number; readonly name: string }
  | { readonly kind: 'arena'; readonly session: number; readonly arena: number; readonly buffer: SharedArrayBuffer }
  | {
      readonly kind: 'run';
      readonly session: number;
      readonly id: number;
      readonly feeds: readonly WireTensor[];
      readonly fetches: readonly string[];
      readonly texts: TextPlan | undefined;
    }
  | {
      readonly kind: 'open';
      readonly session: number;
      readonly modelPath: string;
      readonly options: InferenceSession.SessionOptions;
    }
  | { readonly kind: 'release'; readonly session: number }
  | { readonly kind: 'exit' };

/**
 * Worker -> main. A plain number: the ring entry of an arena run that is
 * done, its outputs in the arena. 'result' / 'run-error' answer a cloned run
 * by its id (>= 1), or an arena run by -1 - arena (outputs that could not be
 * put in the arena come back cloned). 'opened' / 'open-error' / 'released'
 * answer the control messages.
 */
export type FromWorker =
  | number
  | { readonly kind: 'opened'; readonly session: number }
  | { readonly kind: 'open-error'; readonly session: number; readonly message: string }
  | { readonly kind: 'released'; readonly session: number }
  | {
      readonly kind: 'result';
      readonly session: number;
      readonly id: number;
      readonly outputs: readonly WireTensor[];
      readonly times: readonly number[];
    }
  | { readonly kind: 'run-error'; readonly session: number; readonly id: number; readonly message: string };
