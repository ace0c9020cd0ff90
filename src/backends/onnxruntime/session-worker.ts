/**
 * Worker-thread entry: holds one onnxruntime InferenceSession and runs it
 * for its instance. See worker-protocol.ts for why this is a thread and how
 * arenas carry runs.
 */
import { parentPort, workerData } from 'node:worker_threads';
import * as ort from 'onnxruntime-node';
import {
  ARENA_ARRAYS,
  ARENA_TYPES,
  HEADER_BYTES,
  HEADER_WORDS,
  alignUp,
  arenaTypeCode,
  type FromWorker,
  type SessionWorkerInit,
  type ToWorker,
  type WireTensor,
} from './worker-protocol.js';

const port = parentPort!;
const init = workerData as SessionWorkerInit;

function post(msg: FromWorker, transfer?: ArrayBuffer[]): void {
  port.postMessage(msg, transfer);
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * One arena as the worker sees it. onnxruntime does not take views of shared
 * memory, so each input is copied into an unshared buffer of its own, kept
 * for the next run (one per input position, per arena, since runs of
 * different arenas may be set up before either runs).
 */
class Arena {
  readonly header: Int32Array;
  readonly bytes: Uint8Array;
  readonly scratch: ArrayBuffer[] = [];

  constructor(readonly index: number, buffer: SharedArrayBuffer) {
    this.header = new Int32Array(buffer, 0, HEADER_WORDS);
    this.bytes = new Uint8Array(buffer);
  }

  scratchFor(i: number, bytes: number): ArrayBuffer {
    let s = this.scratch[i];
    if (s === undefined || s.byteLength < bytes) {
      s = new ArrayBuffer(Math.max(bytes, 64));
      this.scratch[i] = s;
    }
    return s;
  }
}

const names: string[] = [];
const arenas: Arena[] = [];

async function main(): Promise<void> {
  let session: ort.InferenceSession;
  try {
    session = await ort.InferenceSession.create(init.modelPath, init.options);
  } catch (err) {
    // Stay alive until the instance has read this and terminates the thread:
    // a thread that exits right after posting may lose the message.
    port.on('message', () => port.close());
    post({ kind: 'init-error', message: message(err) });
    return;
  }
  port.on('message', (msg: ToWorker) => {
    if (typeof msg === 'number') {
      void runArena(session, arenas[msg]!);
      return;
    }
    switch (msg.kind) {
      case 'name':
        names.push(msg.name);
        return;
      case 'arena':
        arenas[msg.arena] = new Arena(msg.arena, msg.buffer);
        return;
      case 'run':
        void run(session, msg.id, msg.feeds, msg.fetches);
        return;
      case 'close':
        void session.release().finally(() => port.close());
        return;
    }
  });
  post({ kind: 'ready' });
}

async function runArena(session: ort.InferenceSession, arena: Arena): Promise<void> {
  const h = arena.header;
  let fetches: string[];
  let results: ort.InferenceSession.OnnxValueMapType;
  try {
    const inputs: Record<string, ort.Tensor> = {};
    const nFeeds = h[0]!;
    let p = 1;
    for (let i = 0; i < nFeeds; i++) {
      const name = names[h[p]!]!;
      const code = h[p + 1]!;
      const off = h[p + 2]!;
      const len = h[p + 3]!;
      const nd = h[p + 4]!;
      p += 5;
      const dims = new Array<number>(nd);
      for (let d = 0; d < nd; d++) dims[d] = h[p + d]!;
      p += nd;
      const scratch = arena.scratchFor(i, len);
      new Uint8Array(scratch, 0, len).set(arena.bytes.subarray(off, off + len));
      const Ctor = ARENA_ARRAYS[code]!;
      inputs[name] = new ort.Tensor(ARENA_TYPES[code]!, new Ctor(scratch, 0, len / Ctor.BYTES_PER_ELEMENT) as ort.Tensor.DataType, dims);
    }
    const nFetches = h[p++]!;
    fetches = new Array<string>(nFetches);
    for (let i = 0; i < nFetches; i++) fetches[i] = names[h[p + i]!]!;
    results = await session.run(inputs, fetches);
  } catch (err) {
    post({ kind: 'run-error', id: -1 - arena.index, message: message(err) });
    return;
  }
  if (!writeOutputs(arena, fetches, results)) sendCloned(-1 - arena.index, fetches, results);
  else post(arena.index);
}

/** Puts the outputs in the arena; false when they do not fit or are strings. */
function writeOutputs(arena: Arena, fetches: readonly string[], results: ort.InferenceSession.OnnxValueMapType): boolean {
  const h = arena.header;
  let words = 1;
  let bytes = 0;
  for (const name of fetches) {
    const t = results[name] as ort.Tensor;
    if (arenaTypeCode(t.type) < 0) return false;
    words += 4 + t.dims.length;
    bytes += alignUp((t.data as ArrayBufferView).byteLength);
  }
  if (words > HEADER_WORDS || HEADER_BYTES + bytes > arena.bytes.byteLength) return false;
  h[0] = fetches.length;
  let p = 1;
  let off = HEADER_BYTES;
  for (const name of fetches) {
    const t = results[name] as ort.Tensor;
    const data = t.data as ArrayBufferView;
    const len = data.byteLength;
    h[p] = arenaTypeCode(t.type);
    h[p + 1] = off;
    h[p + 2] = len;
    const dims = t.dims;
    h[p + 3] = dims.length;
    p += 4;
    for (let d = 0; d < dims.length; d++) h[p + d] = dims[d]!;
    p += dims.length;
    arena.bytes.set(new Uint8Array(data.buffer, data.byteOffset, len), off);
    off += alignUp(len);
  }
  return true;
}

function sendCloned(id: number, fetches: readonly string[], results: ort.InferenceSession.OnnxValueMapType): void {
  const outputs: WireTensor[] = [];
  const transfer: ArrayBuffer[] = [];
  for (const name of fetches) {
    const t = results[name] as ort.Tensor;
    const data = t.data as WireTensor['data'];
    outputs.push({ name, type: t.type, dims: t.dims, data });
    if (!Array.isArray(data)) {
      const buf = (data as ArrayBufferView).buffer;
      if (buf instanceof ArrayBuffer && !transfer.includes(buf)) transfer.push(buf);
    }
  }
  post({ kind: 'result', id, outputs }, transfer);
}

async function run(session: ort.InferenceSession, id: number, feeds: readonly WireTensor[], fetches: readonly string[]): Promise<void> {
  let results: ort.InferenceSession.OnnxValueMapType;
  try {
    const inputs: Record<string, ort.Tensor> = {};
    for (const f of feeds) {
      inputs[f.name] = new ort.Tensor(f.type, f.data as ort.Tensor.DataType, f.dims);
    }
    results = await session.run(inputs, fetches as string[]);
  } catch (err) {
    post({ kind: 'run-error', id, message: message(err) });
    return;
  }
  sendCloned(id, fetches, results);
}

void main();
