/**
 * The main-thread side of a session worker: starts it, sends batches, and
 * matches results to the runs waiting for them.
 *
 * Numeric runs use arenas (see worker-protocol.ts), one per run in flight
 * (an instance takes a few at once); a run that finds every arena busy gets
 * a new one. An arena grows (is replaced by a bigger one) when a run needs
 * more room than it has. Every run is an entry in the control ring, started
 * by the worker in the order appended.
 */
import { readSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import type { FileWindow } from '../../tensor/tensor.js';
import {
  ARENA_ARRAYS,
  ARENA_TYPES,
  CONTROL_WORDS,
  C_SENT,
  C_STATE,
  C_TAIL,
  HEADER_BYTES,
  HEADER_WORDS,
  RING_BASE,
  RING_MASK,
  RING_PORT_RUN,
  RING_SIZE,
  C_LIGHT,
  FILE_PART_WORDS,
  STATE_AWAKE,
  STATE_DOZING,
  STATE_SLEEPING,
  TIMES_BYTE_OFFSET,
  TIMES_COUNT,
  TIME_APPENDED,
  USABLE_HEADER_WORDS,
  WAKE,
  alignUp,
  arenaTypeCode,
  nowNs,
  positionWords,
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

  setWorkerTimes(t: ArrayLike<number>): void {
    this.pickedNs = t[0]!;
    this.startNs = t[1]!;
    this.endNs = t[2]!;
  }
}

class PendingRun {
  constructor(
    readonly resolve: Resolve,
    readonly reject: Reject,
    readonly times: RunTimes | undefined,
  ) {}
}

export class SessionWorkerError extends Error {
  override readonly name = 'SessionWorkerError';
}

/** An arena and the run using it (at most one). */
class Arena {
  header: Int32Array;
  bytes: Uint8Array;
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
    this.workerTimes = new Float64Array(buffer, TIMES_BYTE_OFFSET, TIMES_COUNT);
  }

  setBuffer(buffer: SharedArrayBuffer): void {
    this.header = new Int32Array(buffer, 0, HEADER_WORDS);
    this.bytes = new Uint8Array(buffer);
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
  private readonly worker: Worker;
  private readonly control: Int32Array;
  /** Ring entries appended so far. */
  private tail = 0;
  /** Counted messages sent so far (see C_SENT). */
  private sent = 0;
  private notifyQueued = false;
  /** Ring entries whose runs have not finished (at most RING_SIZE). */
  private ringed = 0;
  /** Entries waiting for a free ring slot, in order. */
  private readonly backlog: number[] = [];
  private readonly pending = new Map<number, PendingRun>();
  private readonly arenas: Arena[] = [];
  private readonly freeArenas: Arena[] = [];
  private readonly nameIds = new Map<string, number>();
  private inFlight = 0;
  private nextId = 1;
  private dead: Error | undefined;
  private onDrained: (() => void) | undefined;
  private readonly exited: Promise<void>;

  private constructor(worker: Worker, control: SharedArrayBuffer) {
    this.worker = worker;
    this.control = new Int32Array(control);
    this.exited = new Promise((resolve) => worker.once('exit', () => resolve()));
    worker.on('message', (msg: FromWorker) => this.onMessage(msg));
    worker.on('error', (err) => this.fail(new SessionWorkerError(`onnxruntime session thread failed: ${err.message}`)));
    worker.on('exit', (code) => this.fail(new SessionWorkerError(`onnxruntime session thread exited (code ${code})`)));
    // Idle workers do not keep the process alive; a run in flight does.
    worker.unref();
  }

  /** Starts a worker and creates its session. Rejects with onnxruntime's message when the session cannot be created. */
  static start(modelPath: string, options: SessionWorkerInit['options'], spinMicros: number): Promise<SessionClient> {
    const control = new SharedArrayBuffer(CONTROL_WORDS * 4);
    const init: SessionWorkerInit = { modelPath, options, control, spinMicros };
    const worker = new Worker(WORKER_URL, { workerData: init });
    return new Promise((resolve, reject) => {
      const onMessage = (msg: FromWorker): void => {
        cleanup();
        if (typeof msg !== 'number' && msg.kind === 'ready') resolve(new SessionClient(worker, control));
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
   * Runs are started in the order they are given. `times`, when given, is
   * filled in with the run's timestamps.
   */
  run(feeds: readonly RunFeed[], fetches: readonly string[], times?: RunTimes): Promise<readonly WireTensor[]> {
    if (this.dead) return Promise.reject(this.dead);
    const words = this.headerWords(feeds, fetches);
    if (words < 0) return this.runCloned(feeds, fetches, times);
    const arena = this.takeArena(feeds);
    try {
      this.writeRun(arena, feeds, fetches);
    } catch (err) {
      arena.letGoOfFiles();
      this.freeArenas.push(arena);
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    arena.times = times;
    const promise = new Promise<readonly WireTensor[]>(arena.executor);
    if (this.inFlight++ === 0) this.worker.ref();
    const at = nowNs();
    arena.workerTimes[TIME_APPENDED] = at;
    if (times) times.postedNs = at;
    this.append(arena.index);
    return promise;
  }

  /**
   * Appends a ring entry and wakes the worker if it dozes or sleeps (a busy
   * or busy-waiting worker needs nothing). C_LIGHT tells the worker whether
   * it may busy-wait after this run: only under light load (nothing else in
   * flight here), where the run's latency is what counts and the cores have
   * room; under load, busy-waiting takes a core the event loop needs.
   */
  private append(entry: number): void {
    if (this.ringed >= RING_SIZE) {
      // Every slot holds a run not yet finished: wait for one to finish.
      this.backlog.push(entry);
      return;
    }
    this.ringed++;
    const c = this.control;
    const light = this.inFlight <= 1;
    c[RING_BASE + (this.tail & RING_MASK)] = entry;
    this.tail = (this.tail + 1) | 0;
    c[C_LIGHT] = light ? 1 : 0;
    Atomics.store(c, C_TAIL, this.tail);
    const state = Atomics.load(c, C_STATE);
    if (state === STATE_DOZING) {
      // One notification at the end of this event-loop turn covers every run
      // appended in it: a worker faster than the event loop would otherwise
      // doze and be notified again for each.
      if (!this.notifyQueued) {
        this.notifyQueued = true;
        setImmediate(this.notifyDozing);
      }
    } else if (state === STATE_SLEEPING) this.wakeSleeping();
  }

  private wakeSleeping(): void {
    if (Atomics.compareExchange(this.control, C_STATE, STATE_SLEEPING, STATE_AWAKE) === STATE_SLEEPING) this.worker.postMessage(WAKE);
  }

  /** Made once: notifies a worker that dozes (or wakes one that fell asleep meanwhile). */
  private readonly notifyDozing = (): void => {
    this.notifyQueued = false;
    const state = Atomics.load(this.control, C_STATE);
    if (state === STATE_DOZING) Atomics.notify(this.control, C_TAIL, 1);
    else if (state === STATE_SLEEPING) this.wakeSleeping();
  };

  /** Posts a message the worker must receive before the next ring entry. */
  private postCounted(msg: ToWorker, transfer?: ArrayBuffer[]): void {
    this.worker.postMessage(msg, transfer);
    this.sent = (this.sent + 1) | 0;
    Atomics.store(this.control, C_SENT, this.sent);
  }

  async close(): Promise<void> {
    if (this.dead) return;
    this.dead = new SessionWorkerError('onnxruntime session is closed');
    // Let runs already handed to the worker finish before the session goes.
    if (this.inFlight > 0) await new Promise<void>((resolve) => (this.onDrained = resolve));
    this.worker.ref();
    this.worker.postMessage({ kind: 'close' } satisfies ToWorker);
    // (A busy-waiting worker reads it once its wait runs out and it sleeps.)
    const timer = setTimeout(() => void this.worker.terminate(), CLOSE_GRACE_MS);
    await this.exited;
    clearTimeout(timer);
  }

  /** Header words an arena run needs; -1 when the run must be cloned (strings, or too big a header). */
  private headerWords(feeds: readonly RunFeed[], fetches: readonly string[]): number {
    let words = 2 + fetches.length;
    for (const f of feeds) {
      if (f.strings !== undefined || arenaTypeCode(f.type) < 0) return -1;
      words += 6 + f.dims.length + FILE_PART_WORDS * f.fileParts;
    }
    return words > USABLE_HEADER_WORDS ? -1 : words;
  }

  private takeArena(feeds: readonly RunFeed[]): Arena {
    let data = 0;
    for (const f of feeds) data += alignUp(f.memoryBytes);
    let arena = this.freeArenas.pop();
    if (arena === undefined) {
      arena = new Arena(this.arenas.length, this.newBuffer(data, 0));
      this.arenas.push(arena);
      this.postCounted({ kind: 'arena', arena: arena.index, buffer: arena.bytes.buffer as SharedArrayBuffer });
    }
    const need = HEADER_BYTES + Math.max(data, arena.outputBytes);
    if (arena.bytes.byteLength < need) {
      arena.setBuffer(this.newBuffer(Math.max(data, arena.outputBytes), arena.bytes.byteLength));
      this.postCounted({ kind: 'arena', arena: arena.index, buffer: arena.bytes.buffer as SharedArrayBuffer });
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
      this.postCounted({ kind: 'name', name });
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

  private runCloned(feeds: readonly RunFeed[], fetches: readonly string[], times: RunTimes | undefined): Promise<readonly WireTensor[]> {
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
      wire[i] = { name: f.name, type: f.type, dims: f.dims, data: new Ctor(buffer, 0, f.byteLength / Ctor.BYTES_PER_ELEMENT) };
      transfer.push(buffer);
    }
    const msg: ToWorker = { kind: 'run', id, feeds: wire, fetches };
    return new Promise((resolve, reject) => {
      this.pending.set(id, new PendingRun(resolve, reject, times));
      if (this.inFlight++ === 0) this.worker.ref();
      this.postCounted(msg, transfer);
      if (times) times.postedNs = nowNs();
      this.append(RING_PORT_RUN);
    });
  }

  private onMessage(msg: FromWorker): void {
    if (typeof msg === 'number') {
      const arena = this.arenas[msg];
      if (!arena || !arena.resolve) return;
      arena.times?.setWorkerTimes(arena.workerTimes);
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
    }
    else p.reject(new SessionWorkerError(msg.message));
  }

  private finish(): void {
    this.ringed--;
    const next = this.backlog.shift();
    if (next !== undefined) this.append(next);
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
    this.ringed = 0;
    this.backlog.length = 0;
    this.onDrained?.();
  }
}

/** Reads a file part into `target` at `at` (the cloned path reads on this thread). */
function readWindow(w: FileWindow, target: Uint8Array, at: number, input: string): void {
  let done = 0;
  while (done < w.byteLength) {
    const n = readSync(w.fd, target, at + done, w.byteLength - done, w.position + done);
    if (n === 0) break;
    done += n;
  }
  if (done !== w.byteLength) throw new SessionWorkerError(`input '${input}': the file holding it ended after ${done} of its ${w.byteLength} bytes`);
}

/** Data bytes an arena needs to hold these outputs (strings count as none). */
function clonedBytes(outputs: readonly WireTensor[]): number {
  let n = 0;
  for (const o of outputs) if (!Array.isArray(o.data)) n += alignUp((o.data as ArrayBufferView).byteLength);
  return n;
}
