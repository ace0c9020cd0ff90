/**
 * The main-thread side of one onnxruntime session (one instance): sends
 * batches to the session thread that holds it (see session-thread.ts) and
 * matches results to the runs waiting for them.
 *
 * Numeric runs use arenas (see worker-protocol.ts), one per run in flight
 * (an instance takes a few at once); a run that finds every arena busy gets
 * a new one. An arena grows (is replaced by a bigger one) when a run needs
 * more room than it has. Every run is an entry in the control ring, started
 * by the worker in the order appended.
 */
import { readSync } from 'node:fs';
import type { InferenceSession } from 'onnxruntime-node';
import type { FileWindow } from '../../../tensor/tensor.js';
import { SessionThread, SessionWorkerError } from './session-thread.js';
import {
  ARENA_ARRAYS,
  ARENA_TYPES,
  FILE_PART_WORDS,
  HEADER_BYTES,
  HEADER_WORDS,
  MAX_ARENAS,
  MERGE_ROWS_WORD,
  MERGED_NOT,
  TIMES_BYTE_OFFSET,
  TIMES_COUNT,
  TIME_APPENDED,
  TIME_DONE,
  TIME_MERGED,
  USABLE_HEADER_WORDS,
  alignUp,
  arenaTypeCode,
  nowNs,
  positionWords,
  ringEntry,
  type FromWorker,
  type RunFeed,
  type TextPlan,
  type ToWorker,
  type WireTensor,
} from './worker-protocol.js';

export { SessionWorkerError } from './session-thread.js';

/** Smallest data area of an arena. */
const MIN_ARENA_DATA = 64 * 1024;

type Resolve = (outputs: readonly WireTensor[]) => void;
type Reject = (err: Error) => void;

/**
 * When a run passed its stages, hrtime ns. The worker's clock is the same
 * monotonic clock. Filled in as the run goes; 0 where unknown.
 */
export class RunTimes {
  /** The main thread had handed the run over. */
  postedNs = 0;
  /** The worker took it up. */
  pickedNs = 0;
  /** The worker had its inputs ready and started the session. */
  startNs = 0;
  /** The session returned. */
  endNs = 0;
  /** The worker had written the results (and formatted the texts asked for). */
  doneNs = 0;
  /**
   * MERGED_NOT, or how the worker merged the run with others queued behind
   * it into one session run (see worker-protocol.ts): the times are then the
   * merged run's.
   */
  merged = MERGED_NOT;

  setWorkerTimes(t: ArrayLike<number>): void {
    this.pickedNs = t[0]!;
    this.startNs = t[1]!;
    this.endNs = t[2]!;
    this.doneNs = t[TIME_DONE]!;
    this.merged = t[TIME_MERGED] ?? MERGED_NOT;
  }
}

class PendingRun {
  constructor(
    readonly resolve: Resolve,
    readonly reject: Reject,
    readonly times: RunTimes | undefined,
  ) {}
}

/** An arena and the run using it (at most one). */
class Arena {
  header: Int32Array;
  bytes: Uint8Array;
  /** The same memory, for reading texts. */
  text: Buffer;
  workerTimes: Float64Array;
  /** Fetch names of the run in flight, in order. */
  fetches: readonly string[] = [];
  times: RunTimes | undefined;
  resolve: Resolve | undefined;
  reject: Reject | undefined;
  /** Data bytes the last run's outputs needed, so the next run leaves room for them. */
  outputBytes = 0;
  /** Files the worker reads for the run in flight, kept open until it ends. */
  readonly holds: Array<() => void> = [];
  /** Made once: takes the promise's callbacks without a closure per run. */
  readonly executor = (resolve: Resolve, reject: Reject): void => {
    this.resolve = resolve;
    this.reject = reject;
  };

  constructor(
    readonly index: number,
    buffer: SharedArrayBuffer,
  ) {
    this.header = new Int32Array(buffer, 0, HEADER_WORDS);
    this.bytes = new Uint8Array(buffer);
    this.text = Buffer.from(buffer);
    this.workerTimes = new Float64Array(buffer, TIMES_BYTE_OFFSET, TIMES_COUNT);
  }

  setBuffer(buffer: SharedArrayBuffer): void {
    this.header = new Int32Array(buffer, 0, HEADER_WORDS);
    this.bytes = new Uint8Array(buffer);
    this.text = Buffer.from(buffer);
    this.workerTimes = new Float64Array(buffer, TIMES_BYTE_OFFSET, TIMES_COUNT);
  }

  letGoOfFiles(): void {
    const holds = this.holds;
    for (let i = 0; i < holds.length; i++) holds[i]!();
    holds.length = 0;
  }

  settle(outputs: readonly WireTensor[] | undefined, err: Error | undefined): void {
    if (this.holds.length > 0) this.letGoOfFiles();
    const resolve = this.resolve;
    const reject = this.reject;
    this.resolve = undefined;
    this.reject = undefined;
    this.fetches = [];
    this.times = undefined;
    if (err) reject?.(err);
    else resolve?.(outputs!);
  }
}

export class SessionClient {
  private thread: SessionThread | undefined;
  /** This session's slot on its thread. */
  private slot = -1;
  private readonly pending = new Map<number, PendingRun>();
  private arenas: Arena[] = [];
  private freeArenas: Arena[] = [];
  private nameIds = new Map<string, number>();
  private inFlight = 0;
  private nextId = 1;
  private dead: Error | undefined = new SessionWorkerError('onnxruntime session is not open yet');
  private closed = false;
  private onDrained: (() => void) | undefined;
  /** Sessions with the same key (the instances of one model version) are kept on different threads. */
  affinityKey = '';

  /** `label` names the session in log records and errors ("model 'm' instance 'm_0'"). */
  constructor(
    readonly modelPath: string,
    readonly options: InferenceSession.SessionOptions,
    readonly label: string,
  ) {}

  /**
   * Starts a thread of its own and creates the session on it. Rejects with onnxruntime's message when the session
   * cannot be created.
   */
  static async start(
    modelPath: string,
    options: InferenceSession.SessionOptions,
    spinMicros: number,
    label = modelPath,
  ): Promise<SessionClient> {
    const client = new SessionClient(modelPath, options, label);
    await client.openOnOwn(new SessionThread(spinMicros));
    return client;
  }

  /**
   * Creates the session on a thread started for it alone, which ends with it (and at once if the session cannot be
   * created).
   */
  async openOnOwn(thread: SessionThread): Promise<void> {
    try {
      await this.openOn(thread);
    } catch (err) {
      void thread.exit();
      throw err;
    }
    this.ownsThread = true;
  }

  /** The thread ends when this session is closed (a thread started for it alone). */
  ownsThread = false;

  /** Creates the session on `thread` and binds this client to it (also after its previous thread died). */
  async openOn(thread: SessionThread): Promise<void> {
    if (this.closed) throw new SessionWorkerError('onnxruntime session is closed');
    const slot = await thread.open(this, this.modelPath, this.options);
    if (this.closed) {
      // Closed while the session was being created (a restart after its thread died).
      await thread.release(slot);
      throw new SessionWorkerError('onnxruntime session is closed');
    }
    this.thread = thread;
    this.slot = slot;
    // A new thread knows none of the names and arenas of an earlier one.
    this.arenas = [];
    this.freeArenas = [];
    this.nameIds = new Map();
    this.dead = undefined;
  }

  get alive(): boolean {
    return this.dead === undefined;
  }

  /** Nothing this session handed to its thread is unfinished. */
  get idle(): boolean {
    return this.inFlight === 0;
  }

  /** The thread holding the session (undefined before it is open). */
  get currentThread(): SessionThread | undefined {
    return this.thread;
  }

  /**
   * Runs the session. Numeric feeds are copied into an arena (the parts are
   * not kept); outputs come back as typed arrays over buffers of their own.
   * Runs are started in the order they are given. `times`, when given, is
   * filled in with the run's timestamps. `texts`: outputs whose JSON text
   * the thread formats too (WireTensor.texts; a text that does not fit
   * comes back missing, and the caller formats it). `mergeRows` > 0: every
   * input and output is batched along dim 0, and the thread may merge the
   * run with runs queued behind it into one session run of at most that many
   * rows (each still gets its own rows of the outputs).
   */
  run(
    feeds: readonly RunFeed[],
    fetches: readonly string[],
    times?: RunTimes,
    texts?: TextPlan,
    mergeRows = 0,
  ): Promise<readonly WireTensor[]> {
    if (this.dead) return Promise.reject(this.dead);
    const thread = this.thread!;
    const words = this.headerWords(feeds, fetches);
    if (words < 0 || (this.freeArenas.length === 0 && this.arenas.length >= MAX_ARENAS))
      return this.runCloned(thread, feeds, fetches, times, texts);
    if (texts !== undefined && words + texts.words > USABLE_HEADER_WORDS) texts = undefined;
    const arena = this.takeArena(thread, feeds);
    try {
      this.writeRun(thread, arena, feeds, fetches, texts);
      arena.header[MERGE_ROWS_WORD] = mergeRows;
    } catch (err) {
      arena.letGoOfFiles();
      this.freeArenas.push(arena);
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    arena.times = times;
    const promise = new Promise<readonly WireTensor[]>(arena.executor);
    this.inFlight++;
    thread.beginWork();
    const at = nowNs();
    arena.workerTimes[TIME_APPENDED] = at;
    if (times) times.postedNs = at;
    thread.append(ringEntry(this.slot, arena.index));
    return promise;
  }

  /** Waits for the runs handed over, then releases the session (and ends its thread when it has one of its own). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const wasOpen = this.dead === undefined;
    this.dead = new SessionWorkerError('onnxruntime session is closed');
    // Let runs already handed to the thread finish before the session goes.
    if (this.inFlight > 0) await new Promise<void>((resolve) => (this.onDrained = resolve));
    const thread = this.thread;
    if (thread === undefined) return;
    if (wasOpen && thread.alive) await thread.release(this.slot);
    if (this.ownsThread) await thread.exit();
  }

  /** Called by the thread: it died; runs in flight fail with `err`. */
  threadDied(thread: SessionThread, err: Error): void {
    if (thread !== this.thread) return;
    if (!this.dead) this.dead = err;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    for (const a of this.arenas) if (a.resolve) a.settle(undefined, err);
    this.inFlight = 0;
    this.onDrained?.();
  }

  /** Header words an arena run needs; -1 when the run must be cloned (strings, or too big a header). */
  private headerWords(feeds: readonly RunFeed[], fetches: readonly string[]): number {
    let words = 3 + fetches.length;
    for (const f of feeds) {
      if (f.strings !== undefined || arenaTypeCode(f.type) < 0) return -1;
      words += 6 + f.dims.length + FILE_PART_WORDS * f.fileParts;
    }
    return words > USABLE_HEADER_WORDS ? -1 : words;
  }

  private takeArena(thread: SessionThread, feeds: readonly RunFeed[]): Arena {
    let data = 0;
    for (const f of feeds) data += alignUp(f.memoryBytes);
    let arena = this.freeArenas.pop();
    if (arena === undefined) {
      arena = new Arena(this.arenas.length, this.newBuffer(data, 0));
      this.arenas.push(arena);
      thread.postCounted({
        kind: 'arena',
        session: this.slot,
        arena: arena.index,
        buffer: arena.bytes.buffer as SharedArrayBuffer,
      });
    }
    const need = HEADER_BYTES + Math.max(data, arena.outputBytes);
    if (arena.bytes.byteLength < need) {
      arena.setBuffer(this.newBuffer(Math.max(data, arena.outputBytes), arena.bytes.byteLength));
      thread.postCounted({
        kind: 'arena',
        session: this.slot,
        arena: arena.index,
        buffer: arena.bytes.buffer as SharedArrayBuffer,
      });
    }
    return arena;
  }

  private newBuffer(data: number, oldBytes: number): SharedArrayBuffer {
    let size = HEADER_BYTES + MIN_ARENA_DATA;
    while (size < HEADER_BYTES + data || size <= oldBytes) size *= 2;
    return new SharedArrayBuffer(size);
  }

  private nameId(thread: SessionThread, name: string): number {
    let id = this.nameIds.get(name);
    if (id === undefined) {
      id = this.nameIds.size;
      this.nameIds.set(name, id);
      thread.postCounted({ kind: 'name', session: this.slot, name });
    }
    return id;
  }

  private writeRun(
    thread: SessionThread,
    arena: Arena,
    feeds: readonly RunFeed[],
    fetches: readonly string[],
    texts: TextPlan | undefined,
  ): void {
    const h = arena.header;
    const bytes = arena.bytes;
    h[0] = feeds.length;
    let p = 1;
    let off = HEADER_BYTES;
    for (const f of feeds) {
      h[p] = this.nameId(thread, f.name);
      h[p + 1] = arenaTypeCode(f.type);
      h[p + 2] = off;
      h[p + 3] = f.byteLength;
      const dims = f.dims;
      h[p + 4] = dims.length;
      p += 5;
      for (let d = 0; d < dims.length; d++) h[p + d] = dims[d]!;
      p += dims.length;
      h[p++] = f.fileParts;
      let at = off;
      let inFeed = 0;
      for (const part of f.parts) {
        if (part instanceof Uint8Array) {
          bytes.set(part, at);
          at += part.byteLength;
          inFeed += part.byteLength;
          continue;
        }
        // The worker reads it; the file stays open until the run ends.
        arena.holds.push(part.hold());
        const [low, high] = positionWords(part.position);
        h[p] = inFeed;
        h[p + 1] = part.byteLength;
        h[p + 2] = part.fd;
        h[p + 3] = low;
        h[p + 4] = high;
        p += FILE_PART_WORDS;
        inFeed += part.byteLength;
      }
      off += alignUp(f.memoryBytes);
    }
    h[p++] = fetches.length;
    for (let i = 0; i < fetches.length; i++) h[p + i] = this.nameId(thread, fetches[i]!);
    p += fetches.length;
    if (texts === undefined) {
      h[p] = 0;
    } else {
      h[p++] = texts.requests.length;
      h[p++] = texts.largeElements;
      for (const t of texts.requests) {
        h[p] = t.fetch;
        h[p + 1] = t.datatype;
        h[p + 2] = t.typeCode;
        h[p + 3] = (t.byRows ? 1 : 0) | (t.embed === undefined ? 0 : 2);
        const slices = t.slices;
        h[p + 4] = slices.length;
        p += 5;
        for (let i = 0; i < slices.length; i++) h[p + i] = slices[i]!;
        p += slices.length;
        if (t.embed !== undefined) {
          for (let i = 0; i < t.embed.length; i++) h[p + i] = t.embed[i]!;
          p += t.embed.length;
          const lengths = t.lengths ?? [];
          h[p++] = lengths.length;
          for (let i = 0; i < lengths.length; i++) h[p + i] = lengths[i]!;
          p += lengths.length;
        }
      }
    }
    arena.fetches = fetches;
  }

  /** The outputs of a finished arena run, each copied into a buffer of its own. */
  private readOutputs(arena: Arena): WireTensor[] {
    const h = arena.header;
    const bytes = arena.bytes;
    const n = h[0]!;
    const outputs = new Array<WireTensor>(n);
    let p = 1;
    let data = 0;
    for (let i = 0; i < n; i++) {
      const code = h[p]!;
      const off = h[p + 1]!;
      const len = h[p + 2]!;
      const nd = h[p + 3]!;
      p += 4;
      const dims = new Array<number>(nd);
      for (let d = 0; d < nd; d++) dims[d] = h[p + d]!;
      p += nd;
      // A buffer of its own (not a slice of Node's shared pool), as a moved output had.
      const copy = Buffer.allocUnsafeSlow(len);
      copy.set(bytes.subarray(off, off + len));
      const Ctor = ARENA_ARRAYS[code]!;
      outputs[i] = {
        name: arena.fetches[i]!,
        type: ARENA_TYPES[code]!,
        dims,
        data: new Ctor(copy.buffer, copy.byteOffset, len / Ctor.BYTES_PER_ELEMENT),
      };
      data += alignUp(len);
    }
    const nTexts = h[p]!;
    // Room for all the texts asked for next time, also those that did not fit this time.
    arena.outputBytes = data + alignUp(h[p + 1]!);
    if (nTexts > 0) readTexts(arena, outputs, p + 2, nTexts);
    return outputs;
  }

  private runCloned(
    thread: SessionThread,
    feeds: readonly RunFeed[],
    fetches: readonly string[],
    times: RunTimes | undefined,
    texts: TextPlan | undefined,
  ): Promise<readonly WireTensor[]> {
    const id = this.nextId++;
    const wire = new Array<WireTensor>(feeds.length);
    const transfer: ArrayBuffer[] = [];
    for (let i = 0; i < feeds.length; i++) {
      const f = feeds[i]!;
      if (f.strings !== undefined) {
        wire[i] = { name: f.name, type: f.type, dims: f.dims, data: f.strings };
        continue;
      }
      const buffer = new ArrayBuffer(f.byteLength);
      const target = new Uint8Array(buffer);
      let at = 0;
      for (const part of f.parts) {
        if (part instanceof Uint8Array) target.set(part, at);
        else readWindow(part, target, at, f.name);
        at += part.byteLength;
      }
      const Ctor = ARENA_ARRAYS[arenaTypeCode(f.type)]!;
      wire[i] = {
        name: f.name,
        type: f.type,
        dims: f.dims,
        data: new Ctor(buffer, 0, f.byteLength / Ctor.BYTES_PER_ELEMENT),
      };
      transfer.push(buffer);
    }
    const msg: ToWorker = { kind: 'run', session: this.slot, id, feeds: wire, fetches, texts };
    return new Promise((resolve, reject) => {
      this.pending.set(id, new PendingRun(resolve, reject, times));
      this.inFlight++;
      thread.beginWork();
      thread.postCounted(msg, transfer);
      if (times) times.postedNs = nowNs();
      thread.append(ringEntry(this.slot, -1));
    });
  }

  /** Called by the thread: the arena run in `index` is done, its outputs in the arena. */
  arenaDone(index: number): void {
    const arena = this.arenas[index];
    if (!arena || !arena.resolve) return;
    arena.times?.setWorkerTimes(arena.workerTimes);
    const outputs = this.readOutputs(arena);
    this.finish();
    this.freeArenas.push(arena);
    arena.settle(outputs, undefined);
  }

  /** Called by the thread: the answer to a cloned run, or to an arena run that could not use its arena. */
  resultArrived(msg: Extract<FromWorker, { kind: 'result' | 'run-error' }>): void {
    if (msg.id < 0) {
      const arena = this.arenas[-1 - msg.id];
      if (!arena || !arena.resolve) return;
      if (msg.kind === 'result') {
        arena.outputBytes = clonedBytes(msg.outputs);
        arena.times?.setWorkerTimes(msg.times);
      }
      this.finish();
      this.freeArenas.push(arena);
      if (msg.kind === 'result') arena.settle(msg.outputs, undefined);
      else arena.settle(undefined, new SessionWorkerError(msg.message));
      return;
    }
    const p = this.pending.get(msg.id);
    if (!p) return;
    this.pending.delete(msg.id);
    this.finish();
    if (msg.kind === 'result') {
      p.times?.setWorkerTimes(msg.times);
      p.resolve(msg.outputs);
    } else p.reject(new SessionWorkerError(msg.message));
  }

  private finish(): void {
    this.thread!.finish();
    if (--this.inFlight === 0) this.onDrained?.();
  }
}

/** Attaches the texts the worker formatted (see the result header) to their outputs. */
function readTexts(arena: Arena, outputs: WireTensor[], at: number, n: number): void {
  const h = arena.header;
  const byFetch = new Map<number, (string | undefined)[]>();
  for (let i = 0, p = at; i < n; i++, p += 4) {
    const fetch = h[p]!;
    const off = h[p + 2]!;
    let texts = byFetch.get(fetch);
    if (texts === undefined) byFetch.set(fetch, (texts = []));
    texts[h[p + 1]!] = arena.text.toString('latin1', off, off + h[p + 3]!);
  }
  for (const [fetch, texts] of byFetch) outputs[fetch] = { ...outputs[fetch]!, texts };
}

/** Reads a file part into `target` at `at` (the cloned path reads on this thread). */
function readWindow(w: FileWindow, target: Uint8Array, at: number, input: string): void {
  let done = 0;
  while (done < w.byteLength) {
    const n = readSync(w.fd, target, at + done, w.byteLength - done, w.position + done);
    if (n === 0) break;
    done += n;
  }
  if (done !== w.byteLength)
    throw new SessionWorkerError(
      `input '${input}': the file holding it ended after ${done} of its ${w.byteLength} bytes`,
    );
}

/** Data bytes an arena needs to hold these outputs (strings count as none). */
function clonedBytes(outputs: readonly WireTensor[]): number {
  let n = 0;
  for (const o of outputs) if (!Array.isArray(o.data)) n += alignUp((o.data as ArrayBufferView).byteLength);
  return n;
}
