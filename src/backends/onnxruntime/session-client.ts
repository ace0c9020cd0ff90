/**
 * The main-thread side of a session worker: starts it, sends batches, and
 * matches results to the runs waiting for them.
 *
 * Numeric runs use arenas (see worker-protocol.ts). One instance usually has
 * one run in flight, so it usually has one arena; a run that finds every
 * arena busy gets a new one. An arena grows (is replaced by a bigger one)
 * when a run needs more room than it has.
 */
import { Worker } from 'node:worker_threads';
import {
  ARENA_ARRAYS,
  ARENA_TYPES,
  HEADER_BYTES,
  HEADER_WORDS,
  alignUp,
  arenaTypeCode,
  type FromWorker,
  type RunFeed,
  type SessionWorkerInit,
  type ToWorker,
  type WireTensor,
} from './worker-protocol.js';

const WORKER_URL = new URL('./session-worker.js', import.meta.url);

/** How long close() waits for the worker to release its session before terminating it. */
const CLOSE_GRACE_MS = 5000;

/** Smallest data area of an arena. */
const MIN_ARENA_DATA = 64 * 1024;

type Resolve = (outputs: readonly WireTensor[]) => void;
type Reject = (err: Error) => void;

class PendingRun {
  constructor(
    readonly resolve: Resolve,
    readonly reject: Reject,
  ) {}
}

export class SessionWorkerError extends Error {
  override readonly name = 'SessionWorkerError';
}

/** An arena and the run using it (at most one). */
class Arena {
  header: Int32Array;
  bytes: Uint8Array;
  /** Fetch names of the run in flight, in order. */
  fetches: readonly string[] = [];
  resolve: Resolve | undefined;
  reject: Reject | undefined;
  /** Data bytes the last run's outputs needed, so the next run leaves room for them. */
  outputBytes = 0;
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
  }

  setBuffer(buffer: SharedArrayBuffer): void {
    this.header = new Int32Array(buffer, 0, HEADER_WORDS);
    this.bytes = new Uint8Array(buffer);
  }

  settle(outputs: readonly WireTensor[] | undefined, err: Error | undefined): void {
    const resolve = this.resolve;
    const reject = this.reject;
    this.resolve = undefined;
    this.reject = undefined;
    this.fetches = [];
    if (err) reject?.(err);
    else resolve?.(outputs!);
  }
}

export class SessionClient {
  private readonly worker: Worker;
  private readonly pending = new Map<number, PendingRun>();
  private readonly arenas: Arena[] = [];
  private readonly freeArenas: Arena[] = [];
  private readonly nameIds = new Map<string, number>();
  private inFlight = 0;
  private nextId = 1;
  private dead: Error | undefined;
  private onDrained: (() => void) | undefined;
  private readonly exited: Promise<void>;

  private constructor(worker: Worker) {
    this.worker = worker;
    this.exited = new Promise((resolve) => worker.once('exit', () => resolve()));
    worker.on('message', (msg: FromWorker) => this.onMessage(msg));
    worker.on('error', (err) => this.fail(new SessionWorkerError(`onnxruntime session thread failed: ${err.message}`)));
    worker.on('exit', (code) => this.fail(new SessionWorkerError(`onnxruntime session thread exited (code ${code})`)));
    // Idle workers do not keep the process alive; a run in flight does.
    worker.unref();
  }

  /** Starts a worker and creates its session. Rejects with onnxruntime's message when the session cannot be created. */
  static start(init: SessionWorkerInit): Promise<SessionClient> {
    const worker = new Worker(WORKER_URL, { workerData: init });
    return new Promise((resolve, reject) => {
      const onMessage = (msg: FromWorker): void => {
        cleanup();
        if (typeof msg !== 'number' && msg.kind === 'ready') resolve(new SessionClient(worker));
        else {
          const text = typeof msg !== 'number' && msg.kind === 'init-error' ? msg.message : `unexpected message from session thread`;
          reject(new SessionWorkerError(text));
          void worker.terminate();
        }
      };
      const onError = (err: Error): void => {
        cleanup();
        reject(new SessionWorkerError(`onnxruntime session thread failed to start: ${err.message}`));
      };
      const onExit = (code: number): void => {
        cleanup();
        reject(new SessionWorkerError(`onnxruntime session thread exited during start (code ${code})`));
      };
      const cleanup = (): void => {
        worker.off('message', onMessage);
        worker.off('error', onError);
        worker.off('exit', onExit);
      };
      worker.on('message', onMessage);
      worker.on('error', onError);
      worker.on('exit', onExit);
    });
  }

  get alive(): boolean {
    return this.dead === undefined;
  }

  /**
   * Runs the session. Numeric feeds are copied into an arena (the parts are
   * not kept); outputs come back as typed arrays over buffers of their own.
   */
  run(feeds: readonly RunFeed[], fetches: readonly string[]): Promise<readonly WireTensor[]> {
    if (this.dead) return Promise.reject(this.dead);
    const words = this.headerWords(feeds, fetches);
    if (words < 0) return this.runCloned(feeds, fetches);
    const arena = this.takeArena(feeds);
    this.writeRun(arena, feeds, fetches);
    const promise = new Promise<readonly WireTensor[]>(arena.executor);
    if (this.inFlight++ === 0) this.worker.ref();
    this.worker.postMessage(arena.index);
    return promise;
  }

  async close(): Promise<void> {
    if (this.dead) return;
    this.dead = new SessionWorkerError('onnxruntime session is closed');
    // Let runs already handed to the worker finish before the session goes.
    if (this.inFlight > 0) await new Promise<void>((resolve) => (this.onDrained = resolve));
    this.worker.ref();
    this.worker.postMessage({ kind: 'close' } satisfies ToWorker);
    const timer = setTimeout(() => void this.worker.terminate(), CLOSE_GRACE_MS);
    await this.exited;
    clearTimeout(timer);
  }

  /** Header words an arena run needs; -1 when the run must be cloned (strings, or too big a header). */
  private headerWords(feeds: readonly RunFeed[], fetches: readonly string[]): number {
    let words = 2 + fetches.length;
    for (const f of feeds) {
      if (f.strings !== undefined || arenaTypeCode(f.type) < 0) return -1;
      words += 5 + f.dims.length;
    }
    return words > HEADER_WORDS ? -1 : words;
  }

  private takeArena(feeds: readonly RunFeed[]): Arena {
    let data = 0;
    for (const f of feeds) data += alignUp(f.byteLength);
    let arena = this.freeArenas.pop();
    if (arena === undefined) {
      arena = new Arena(this.arenas.length, this.newBuffer(data, 0));
      this.arenas.push(arena);
      this.worker.postMessage({ kind: 'arena', arena: arena.index, buffer: arena.bytes.buffer as SharedArrayBuffer } satisfies ToWorker);
    }
    const need = HEADER_BYTES + Math.max(data, arena.outputBytes);
    if (arena.bytes.byteLength < need) {
      arena.setBuffer(this.newBuffer(Math.max(data, arena.outputBytes), arena.bytes.byteLength));
      this.worker.postMessage({ kind: 'arena', arena: arena.index, buffer: arena.bytes.buffer as SharedArrayBuffer } satisfies ToWorker);
    }
    return arena;
  }

  private newBuffer(data: number, oldBytes: number): SharedArrayBuffer {
    let size = HEADER_BYTES + MIN_ARENA_DATA;
    while (size < HEADER_BYTES + data || size <= oldBytes) size *= 2;
    return new SharedArrayBuffer(size);
  }

  private nameId(name: string): number {
    let id = this.nameIds.get(name);
    if (id === undefined) {
      id = this.nameIds.size;
      this.nameIds.set(name, id);
      this.worker.postMessage({ kind: 'name', name } satisfies ToWorker);
    }
    return id;
  }

  private writeRun(arena: Arena, feeds: readonly RunFeed[], fetches: readonly string[]): void {
    const h = arena.header;
    const bytes = arena.bytes;
    h[0] = feeds.length;
    let p = 1;
    let off = HEADER_BYTES;
    for (const f of feeds) {
      h[p] = this.nameId(f.name);
      h[p + 1] = arenaTypeCode(f.type);
      h[p + 2] = off;
      h[p + 3] = f.byteLength;
      const dims = f.dims;
      h[p + 4] = dims.length;
      p += 5;
      for (let d = 0; d < dims.length; d++) h[p + d] = dims[d]!;
      p += dims.length;
      let at = off;
      for (const part of f.parts) {
        bytes.set(part, at);
        at += part.byteLength;
      }
      off += alignUp(f.byteLength);
    }
    h[p++] = fetches.length;
    for (let i = 0; i < fetches.length; i++) h[p + i] = this.nameId(fetches[i]!);
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
      outputs[i] = { name: arena.fetches[i]!, type: ARENA_TYPES[code]!, dims, data: new Ctor(copy.buffer, copy.byteOffset, len / Ctor.BYTES_PER_ELEMENT) };
      data += alignUp(len);
    }
    arena.outputBytes = data;
    return outputs;
  }

  private runCloned(feeds: readonly RunFeed[], fetches: readonly string[]): Promise<readonly WireTensor[]> {
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
        target.set(part, at);
        at += part.byteLength;
      }
      const Ctor = ARENA_ARRAYS[arenaTypeCode(f.type)]!;
      wire[i] = { name: f.name, type: f.type, dims: f.dims, data: new Ctor(buffer, 0, f.byteLength / Ctor.BYTES_PER_ELEMENT) };
      transfer.push(buffer);
    }
    const msg: ToWorker = { kind: 'run', id, feeds: wire, fetches };
    return new Promise((resolve, reject) => {
      this.pending.set(id, new PendingRun(resolve, reject));
      if (this.inFlight++ === 0) this.worker.ref();
      this.worker.postMessage(msg, transfer);
    });
  }

  private onMessage(msg: FromWorker): void {
    if (typeof msg === 'number') {
      const arena = this.arenas[msg];
      if (!arena || !arena.resolve) return;
      const outputs = this.readOutputs(arena);
      this.finish();
      this.freeArenas.push(arena);
      arena.settle(outputs, undefined);
      return;
    }
    if (msg.kind !== 'result' && msg.kind !== 'run-error') return;
    if (msg.id < 0) {
      const arena = this.arenas[-1 - msg.id];
      if (!arena || !arena.resolve) return;
      if (msg.kind === 'result') arena.outputBytes = clonedBytes(msg.outputs);
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
    if (msg.kind === 'result') p.resolve(msg.outputs);
    else p.reject(new SessionWorkerError(msg.message));
  }

  private finish(): void {
    if (--this.inFlight === 0) {
      this.worker.unref();
      this.onDrained?.();
    }
  }

  private fail(err: Error): void {
    if (!this.dead) this.dead = err;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    for (const a of this.arenas) if (a.resolve) a.settle(undefined, err);
    this.inFlight = 0;
    this.onDrained?.();
  }
}

/** Data bytes an arena needs to hold these outputs (strings count as none). */
function clonedBytes(outputs: readonly WireTensor[]): number {
  let n = 0;
  for (const o of outputs) if (!Array.isArray(o.data)) n += alignUp((o.data as ArrayBufferView).byteLength);
  return n;
}
