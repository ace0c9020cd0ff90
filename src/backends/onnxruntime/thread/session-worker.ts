/**
 * Worker-thread entry: holds the onnxruntime InferenceSessions of one or more
 * instances and runs them, one entry of the ring at a time. See
 * worker-protocol.ts for why this is a thread and how arenas carry runs.
 */
import { readSync } from 'node:fs';
import { parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import * as ort from 'onnxruntime-node';
import { DATATYPES } from '../../../tensor/datatype.js';
import { hintedItems } from '../../../tensor/embedding-text.js';
import { encodeJsonTensorData } from '../../../tensor/json-codec.js';
import { IdleWait, doze } from '../../idle-wait.js';
import {
  ARENA_ARRAYS,
  ARENA_TYPES,
  C_ABANDONED,
  C_DONE,
  C_RUNNING,
  C_SENT,
  C_STATE,
  C_LIGHT,
  C_TAIL,
  EMBED_BASE64,
  EMBED_NORMALIZE,
  EMBED_POOL,
  FILE_PART_WORDS,
  HEADER_BYTES,
  HEADER_WORDS,
  MAX_TEXT_BYTES,
  MERGED_FIRST,
  MERGED_LATER,
  MERGED_NOT,
  MERGE_ROWS_WORD,
  RING_BASE,
  RING_CONTROL,
  RING_MASK,
  SLICE_FORMAT,
  SLICE_IF_LARGE,
  STATE_AWAKE,
  STATE_DOZING,
  STATE_SLEEPING,
  TIMES_BYTE_OFFSET,
  TIMES_COUNT,
  TIME_APPENDED,
  TIME_DONE,
  TIME_MERGED,
  USABLE_HEADER_WORDS,
  alignUp,
  arenaTypeCode,
  entryArena,
  entrySession,
  nowNs,
  positionFromWords,
  ringEntry,
  type FromWorker,
  type SessionWorkerInit,
  type TextPlan,
  type ToWorker,
  type WireTensor,
} from './worker-protocol.js';

// Node 24 has Float16Array, and onnxruntime-common then wraps float16 data in one, which the native
// binding (1.30) reads as zero bytes. Without it in this thread's realm, float16 stays raw 16-bit words.
if ('Float16Array' in globalThis) delete (globalThis as { Float16Array?: unknown }).Float16Array;

const port = parentPort!;
const init = workerData as SessionWorkerInit;

function post(msg: FromWorker, transfer?: ArrayBuffer[]): void {
  init.answers.postMessage(msg, transfer);
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
  /** The same memory, for writing texts. */
  readonly text: Buffer;
  readonly times: Float64Array;
  readonly scratch: ArrayBuffer[] = [];

  constructor(readonly index: number, buffer: SharedArrayBuffer) {
    this.header = new Int32Array(buffer, 0, HEADER_WORDS);
    this.bytes = new Uint8Array(buffer);
    this.text = Buffer.from(buffer);
    this.times = new Float64Array(buffer, TIMES_BYTE_OFFSET, TIMES_COUNT);
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

/** One session of this thread and what its instance has sent it. */
class HostedSession {
  readonly names: string[] = [];
  readonly arenas: Arena[] = [];
  /** Cloned runs received and not yet started, in order. */
  readonly portRuns: Array<Extract<ToWorker, { kind: 'run' }>> = [];
  session: ort.InferenceSession | undefined;

  constructor(readonly slot: number) {}
}

type ControlMessage = Extract<ToWorker, { kind: 'open' | 'release' | 'exit' }>;

const sessions = new Map<number, HostedSession>();
/** Control messages received and not yet taken up by their RING_CONTROL entry, in order. */
const controls: ControlMessage[] = [];
const control = new Int32Array(init.control);
/** Counted messages received so far (see C_SENT). */
let received = 0;
let exiting = false;
let wakeUp: (() => void) | undefined;

function hosted(slot: number): HostedSession {
  let s = sessions.get(slot);
  if (s === undefined) {
    s = new HostedSession(slot);
    sessions.set(slot, s);
  }
  return s;
}

function apply(msg: ToWorker): void {
  if (typeof msg === 'number') return; // WAKE
  switch (msg.kind) {
    case 'name':
      hosted(msg.session).names.push(msg.name);
      break;
    case 'arena':
      hosted(msg.session).arenas[msg.arena] = new Arena(msg.arena, msg.buffer);
      break;
    case 'run':
      hosted(msg.session).portRuns.push(msg);
      break;
    case 'open':
    case 'release':
    case 'exit':
      controls.push(msg);
      break;
  }
  received++;
}

/** Receives every counted message sent before the entry about to start. */
function catchUp(): void {
  while (received !== Atomics.load(control, C_SENT)) {
    const got = receiveMessageOnPort(port);
    if (got === undefined) return;
    apply(got.message as ToWorker);
  }
}

/** How the worker waits for the next entry once the ring is empty (../../idle-wait.ts). */
const idleWait = new IdleWait(init.spinMicros);

function awaitEntry(head: number): boolean {
  if (idleWait.idle(control[C_LIGHT] === 1)) {
    const arrived = (): boolean => {
      for (let i = 0; i < 32; i++) if (Atomics.load(control, C_TAIL) !== head) return true;
      return false;
    };
    if (idleWait.spin(arrived)) return true;
  }
  Atomics.store(control, C_STATE, STATE_DOZING);
  const got = doze(control, C_TAIL, head);
  Atomics.store(control, C_STATE, STATE_AWAKE);
  return got || Atomics.load(control, C_TAIL) !== head;
}

/** Takes up the oldest control message (open, release or exit). */
async function runControl(msg: ControlMessage): Promise<void> {
  if (msg.kind === 'exit') {
    exiting = true;
    return;
  }
  const s = hosted(msg.session);
  Atomics.store(control, C_RUNNING, msg.session + 1);
  if (msg.kind === 'open') {
    try {
      s.session = await ort.InferenceSession.create(msg.modelPath, msg.options);
    } catch (err) {
      sessions.delete(msg.session);
      post({ kind: 'open-error', session: msg.session, message: message(err) });
      return;
    }
    post({ kind: 'opened', session: msg.session });
    return;
  }
  sessions.delete(msg.session);
  try {
    await s.session?.release();
  } finally {
    post({ kind: 'released', session: msg.session });
  }
}

async function runEntry(entry: number, pickNs: number): Promise<void> {
  const slot = entrySession(entry);
  const s = sessions.get(slot);
  const arenaIndex = entryArena(entry);
  Atomics.store(control, C_RUNNING, slot + 1);
  if (arenaIndex >= 0) {
    const arena = s?.arenas[arenaIndex];
    if (s?.session === undefined || arena === undefined) {
      post({ kind: 'run-error', session: slot, id: -1 - arenaIndex, message: `no session in slot ${slot}` });
      return;
    }
    idleWait.arrived(arena.times[TIME_APPENDED]!);
    await runArena(s.session, slot, s.names, arena, pickNs);
    return;
  }
  idleWait.forget();
  const msg = s?.portRuns.shift();
  if (msg === undefined) return;
  if (s?.session === undefined) {
    post({ kind: 'run-error', session: slot, id: msg.id, message: `no session in slot ${slot}` });
    return;
  }
  await run(
    s.session,
    slot,
    msg.id,
    msg.feeds,
    msg.fetches,
    pickNs,
    msg.texts === undefined ? undefined : clonedTextPlan(msg.texts),
  );
}

async function serve(): Promise<void> {
  let head = 0;
  for (;;) {
    if (Atomics.load(control, C_ABANDONED) === 1) break;
    if (Atomics.load(control, C_TAIL) !== head) {
      const entry = control[RING_BASE + (head & RING_MASK)]!;
      head = (head + 1) | 0;
      catchUp();
      if (entry === RING_CONTROL) {
        const msg = controls.shift();
        if (msg !== undefined) await runControl(msg);
      } else {
        const merge = mergeGroup(entry, head);
        if (merge === undefined) await runEntry(entry, nowNs());
        else {
          head = (head + merge.arenas.length - 1) | 0;
          await runMerged(merge, nowNs());
          Atomics.add(control, C_DONE, merge.arenas.length - 1);
        }
      }
      Atomics.store(control, C_RUNNING, 0);
      Atomics.add(control, C_DONE, 1);
      if (exiting) break;
      continue;
    }
    if (awaitEntry(head)) continue;
    Atomics.store(control, C_STATE, STATE_SLEEPING);
    if (Atomics.load(control, C_TAIL) !== head) {
      // Appended meanwhile. If the main thread saw SLEEPING first, a WAKE is on its way and is ignored.
      Atomics.compareExchange(control, C_STATE, STATE_SLEEPING, STATE_AWAKE);
      continue;
    }
    await new Promise<void>((resolve) => (wakeUp = resolve));
    Atomics.store(control, C_STATE, STATE_AWAKE);
  }
  for (const s of sessions.values()) await s.session?.release();
  port.close();
}

port.on('message', (msg: ToWorker) => {
  apply(msg);
  const w = wakeUp;
  wakeUp = undefined;
  w?.();
});

async function runArena(
  session: ort.InferenceSession,
  slot: number,
  names: readonly string[],
  arena: Arena,
  pickNs: number,
): Promise<void> {
  const h = arena.header;
  const times = arena.times;
  times[0] = pickNs;
  times[TIME_MERGED] = MERGED_NOT;
  let fetches: string[];
  let results: ort.InferenceSession.OnnxValueMapType;
  let textsAt: number;
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
      const files = h[p++]!;
      const scratch = arena.scratchFor(i, len);
      const target = new Uint8Array(scratch, 0, len);
      if (files === 0) target.set(arena.bytes.subarray(off, off + len));
      else {
        // Parts in memory come from the arena, in order; parts in files are read from them.
        let from = off;
        let at = 0;
        for (let f = 0; f < files; f++, p += FILE_PART_WORDS) {
          const partAt = h[p]!;
          const partLen = h[p + 1]!;
          if (partAt > at) {
            target.set(arena.bytes.subarray(from, from + partAt - at), at);
            from += partAt - at;
          }
          readFilePart(
            name,
            h[p + 2]!,
            positionFromWords(h[p + 3]!, h[p + 4]!),
            target.subarray(partAt, partAt + partLen),
          );
          at = partAt + partLen;
        }
        if (at < len) target.set(arena.bytes.subarray(from, from + len - at), at);
      }
      const Ctor = ARENA_ARRAYS[code]!;
      inputs[name] = new ort.Tensor(
        ARENA_TYPES[code]!,
        new Ctor(scratch, 0, len / Ctor.BYTES_PER_ELEMENT) as ort.Tensor.DataType,
        dims,
      );
    }
    const nFetches = h[p++]!;
    fetches = new Array<string>(nFetches);
    for (let i = 0; i < nFetches; i++) fetches[i] = names[h[p + i]!]!;
    textsAt = p + nFetches;
    times[1] = nowNs();
    results = await session.run(inputs, fetches);
    times[2] = nowNs();
  } catch (err) {
    post({ kind: 'run-error', session: slot, id: -1 - arena.index, message: message(err) });
    return;
  }
  // Read before the outputs' entries overwrite the run header.
  const texts = readTextPlan(h, textsAt);
  if (!writeOutputs(arena, fetches, results, texts))
    sendCloned(slot, -1 - arena.index, fetches, results, [times[0]!, times[1]!, times[2]!, 0], texts);
  else {
    times[TIME_DONE] = nowNs();
    post(ringEntry(slot, arena.index));
  }
}

/**
 * Runs queued behind each other for one session of a model that batches
 * along dim 0 are merged into one session run: the thread takes every run
 * the event loop handed it while the previous one ran, so the batch is
 * formed when the thread is free to run it, from all that arrived meanwhile,
 * instead of the event loop fixing it beforehand (one batch running and one
 * waiting left the thread idle whenever the loop had not yet handed over the
 * next batch when the waiting one ended). Each run still gets its own rows
 * of the outputs, its own texts and its own completion, as if run alone.
 * Runs merge when the first allows it (MERGE_ROWS_WORD), they hold the same
 * inputs (names, types, dims after the first) and fetches, no input lies in
 * a file, and the rows stay within the first's limit (the model's
 * max_batch_size). A merged run that fails, or whose outputs are not batched
 * along dim 0 as its inputs were, is made again run by run, so errors and
 * results stay each run's own.
 */
interface RunShape {
  readonly rows: number;
  readonly names: readonly number[];
  readonly codes: readonly number[];
  readonly offsets: readonly number[];
  readonly lengths: readonly number[];
  readonly dims: readonly (readonly number[])[];
  readonly fetchIds: readonly number[];
  readonly textsAt: number;
}

interface MergeGroup {
  readonly session: ort.InferenceSession;
  readonly slot: number;
  readonly names: readonly string[];
  readonly arenas: readonly Arena[];
  readonly shapes: readonly RunShape[];
  readonly rows: number;
}

/** The inputs and fetches of an arena's run header; undefined when it cannot merge (file parts, no batch dim). */
function runShape(h: Int32Array): RunShape | undefined {
  const nFeeds = h[0]!;
  if (nFeeds === 0) return undefined;
  const names: number[] = [];
  const codes: number[] = [];
  const offsets: number[] = [];
  const lengths: number[] = [];
  const dims: number[][] = [];
  let rows = -1;
  let p = 1;
  for (let i = 0; i < nFeeds; i++) {
    const nd = h[p + 4]!;
    const d = Array.from(h.subarray(p + 5, p + 5 + nd));
    if (nd === 0 || h[p + 5 + nd] !== 0) return undefined;
    if (rows < 0) rows = d[0]!;
    else if (d[0] !== rows) return undefined;
    names.push(h[p]!);
    codes.push(h[p + 1]!);
    offsets.push(h[p + 2]!);
    lengths.push(h[p + 3]!);
    dims.push(d);
    p += 6 + nd;
  }
  const nFetches = h[p++]!;
  const fetchIds = Array.from(h.subarray(p, p + nFetches));
  return { rows, names, codes, offsets, lengths, dims, fetchIds, textsAt: p + nFetches };
}

function sameRun(a: RunShape, b: RunShape): boolean {
  if (a.names.length !== b.names.length || a.fetchIds.length !== b.fetchIds.length) return false;
  for (let i = 0; i < a.names.length; i++) {
    if (a.names[i] !== b.names[i] || a.codes[i] !== b.codes[i]) return false;
    const x = a.dims[i]!;
    const y = b.dims[i]!;
    if (x.length !== y.length) return false;
    for (let d = 1; d < x.length; d++) if (x[d] !== y[d]) return false;
  }
  for (let i = 0; i < a.fetchIds.length; i++) if (a.fetchIds[i] !== b.fetchIds[i]) return false;
  return true;
}

/** The runs queued from `head` on that merge with `entry` (just taken from the ring), or undefined when none does. */
function mergeGroup(entry: number, head: number): MergeGroup | undefined {
  const arenaIndex = entryArena(entry);
  if (arenaIndex < 0 || Atomics.load(control, C_TAIL) === head) return undefined;
  const slot = entrySession(entry);
  const s = sessions.get(slot);
  const first = s?.arenas[arenaIndex];
  if (s?.session === undefined || first === undefined) return undefined;
  const limit = first.header[MERGE_ROWS_WORD]!;
  if (limit <= 0) return undefined;
  const shape = runShape(first.header);
  if (shape === undefined || shape.rows >= limit) return undefined;
  const arenas = [first];
  const shapes = [shape];
  let rows = shape.rows;
  for (let at = head; Atomics.load(control, C_TAIL) !== at; at = (at + 1) | 0) {
    const next = control[RING_BASE + (at & RING_MASK)]!;
    if (next === RING_CONTROL || entrySession(next) !== slot || entryArena(next) < 0) break;
    // The arena (new or grown) and names of that run were sent before it was appended.
    catchUp();
    const arena = s.arenas[entryArena(next)];
    if (arena === undefined || arena.header[MERGE_ROWS_WORD] !== limit) break;
    const other = runShape(arena.header);
    if (other === undefined || rows + other.rows > limit || !sameRun(shape, other)) break;
    arenas.push(arena);
    shapes.push(other);
    rows += other.rows;
  }
  return arenas.length > 1 ? { session: s.session, slot, names: s.names, arenas, shapes, rows } : undefined;
}

async function runMerged(g: MergeGroup, pickNs: number): Promise<void> {
  const first = g.shapes[0]!;
  const lead = g.arenas[0]!;
  idleWait.arrived(lead.times[TIME_APPENDED]!);
  Atomics.store(control, C_RUNNING, g.slot + 1);
  const fetches = first.fetchIds.map((id) => g.names[id]!);
  let results: ort.InferenceSession.OnnxValueMapType | undefined;
  let startNs = 0;
  let endNs = 0;
  try {
    const inputs: Record<string, ort.Tensor> = {};
    for (let i = 0; i < first.names.length; i++) {
      let total = 0;
      for (const sh of g.shapes) total += sh.lengths[i]!;
      const scratch = lead.scratchFor(i, total);
      const target = new Uint8Array(scratch, 0, total);
      let at = 0;
      for (let k = 0; k < g.arenas.length; k++) {
        const off = g.shapes[k]!.offsets[i]!;
        const len = g.shapes[k]!.lengths[i]!;
        target.set(g.arenas[k]!.bytes.subarray(off, off + len), at);
        at += len;
      }
      const code = first.codes[i]!;
      const Ctor = ARENA_ARRAYS[code]!;
      const dims = [g.rows, ...first.dims[i]!.slice(1)];
      inputs[g.names[first.names[i]!]!] = new ort.Tensor(
        ARENA_TYPES[code]!,
        new Ctor(scratch, 0, total / Ctor.BYTES_PER_ELEMENT) as ort.Tensor.DataType,
        dims,
      );
    }
    startNs = nowNs();
    results = await g.session.run(inputs, fetches);
    endNs = nowNs();
  } catch {
    results = undefined;
  }
  if (results === undefined || !batchedOutputs(results, fetches, g.rows)) {
    // Each run alone, so that each gets its own outcome.
    for (const arena of g.arenas) await runArena(g.session, g.slot, g.names, arena, nowNs());
    return;
  }
  let row = 0;
  for (let k = 0; k < g.arenas.length; k++) {
    const arena = g.arenas[k]!;
    const rows = g.shapes[k]!.rows;
    const own = rowsOf(results, fetches, row, rows);
    row += rows;
    const times = arena.times;
    times[0] = pickNs;
    times[1] = startNs;
    times[2] = endNs;
    const merged = k === 0 ? MERGED_FIRST : MERGED_LATER;
    times[TIME_MERGED] = merged;
    // Read before the outputs' entries overwrite the run header.
    const texts = readTextPlan(arena.header, g.shapes[k]!.textsAt);
    if (!writeOutputs(arena, fetches, own, texts)) {
      const copies: Record<string, ort.Tensor> = {};
      for (const name of fetches) {
        const t = own[name] as ort.Tensor;
        copies[name] = { ...t, data: (t.data as Float32Array).slice() } as unknown as ort.Tensor;
      }
      sendCloned(g.slot, -1 - arena.index, fetches, copies, [pickNs, startNs, endNs, 0, 0, merged], texts);
    } else {
      times[TIME_DONE] = nowNs();
      post(ringEntry(g.slot, arena.index));
    }
  }
}

/** Every output is numeric with dim 0 of `rows` (batched as the inputs were). */
function batchedOutputs(
  results: ort.InferenceSession.OnnxValueMapType,
  fetches: readonly string[],
  rows: number,
): boolean {
  for (const name of fetches) {
    const t = results[name] as ort.Tensor | undefined;
    if (t === undefined || arenaTypeCode(t.type) < 0 || t.dims.length === 0 || t.dims[0] !== rows) return false;
  }
  return true;
}

/** Rows `from` .. `from + rows` of every output, as tensors over the same memory. */
function rowsOf(
  results: ort.InferenceSession.OnnxValueMapType,
  fetches: readonly string[],
  from: number,
  rows: number,
): ort.InferenceSession.OnnxValueMapType {
  const out: Record<string, ort.Tensor> = {};
  for (const name of fetches) {
    const t = results[name] as ort.Tensor;
    const data = t.data as ArrayBufferView;
    const Ctor = ARENA_ARRAYS[arenaTypeCode(t.type)]!;
    let rowElements = 1;
    for (let d = 1; d < t.dims.length; d++) rowElements *= t.dims[d]!;
    const count = rows * rowElements;
    const view = new Ctor(data.buffer, data.byteOffset + from * rowElements * Ctor.BYTES_PER_ELEMENT, count);
    out[name] = { type: t.type, dims: [rows, ...t.dims.slice(1)], data: view, size: count } as unknown as ort.Tensor;
  }
  return out;
}

/** A TextRequest as read from a run header or a cloned run (see worker-protocol.ts). */
interface TextWanted {
  readonly fetch: number;
  readonly datatype: number;
  readonly typeCode: number;
  readonly byRows: boolean;
  readonly slices: ArrayLike<number>;
  /** Embeddings items: per slice its EMBED_* flags and first index; undefined for JSON data. */
  readonly embed?: ArrayLike<number> | undefined;
  readonly lengths?: ArrayLike<number> | undefined;
}

interface TextsWanted {
  readonly wanted: readonly TextWanted[];
  readonly largeElements: number;
}

/** The TextPlan of a cloned run. */
function clonedTextPlan(plan: TextPlan): TextsWanted {
  return { wanted: plan.requests, largeElements: plan.largeElements };
}

/** The TextPlan of a run header (undefined when it has none). */
function readTextPlan(h: Int32Array, at: number): TextsWanted | undefined {
  const n = h[at]!;
  if (n === 0) return undefined;
  const out = new Array<TextWanted>(n);
  const largeElements = h[at + 1]!;
  let p = at + 2;
  for (let i = 0; i < n; i++) {
    const count = h[p + 4]!;
    const flags = h[p + 3]!;
    const head = { fetch: h[p]!, datatype: h[p + 1]!, typeCode: h[p + 2]!, byRows: (flags & 1) !== 0 };
    const slices = h.slice(p + 5, p + 5 + count);
    p += 5 + count;
    let embed: Int32Array | undefined;
    let lengths: Int32Array | undefined;
    if ((flags & 2) !== 0) {
      embed = h.slice(p, p + 2 * count);
      p += 2 * count;
      const n = h[p++]!;
      lengths = h.slice(p, p + n);
      p += n;
    }
    out[i] = { ...head, slices, embed, lengths };
  }
  return { wanted: out, largeElements };
}

/** A formatted text waiting to be written: where it goes in the result header. */
interface FormattedText {
  readonly fetch: number;
  readonly slice: number;
  readonly text: string;
}

/**
 * Formats the texts asked for (the same encodeJsonTensorData the HTTP
 * frontend calls). A slice whose output came back with another type or
 * shape, or that fails to format, gets none: the event loop then formats
 * it and reports the error there.
 */
function formatTexts(
  fetches: readonly string[],
  results: ort.InferenceSession.OnnxValueMapType,
  plan: TextsWanted,
): FormattedText[] {
  const out: FormattedText[] = [];
  // Every value takes two characters at least: texts that cannot fit MAX_TEXT_BYTES are not formatted at all.
  let budget = MAX_TEXT_BYTES / 2;
  for (const w of plan.wanted) {
    const name = fetches[w.fetch]!;
    const t = results[name] as ort.Tensor | undefined;
    const info = DATATYPES[w.datatype];
    if (t === undefined || info === undefined || arenaTypeCode(t.type) !== w.typeCode) continue;
    const data = t.data as ArrayBufferView;
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    const size = info.byteSize;
    const dims = t.dims;
    if (w.embed !== undefined) {
      budget = embeddingTexts(out, w, t, budget);
      continue;
    }
    let rowElements = 1;
    if (w.byRows) {
      let rows = 0;
      for (let i = 0; i < w.slices.length; i++) rows += w.slices[i]! >> 2;
      if (dims.length === 0 || dims[0] !== rows) continue;
      for (let d = 1; d < dims.length; d++) rowElements *= dims[d]!;
    }
    let row = 0;
    for (let i = 0; i < w.slices.length; i++) {
      const word = w.slices[i]!;
      const mode = word & 3;
      const count = w.byRows ? (word >> 2) * rowElements : t.size;
      if ((mode === SLICE_FORMAT || (mode === SLICE_IF_LARGE && count >= plan.largeElements)) && count <= budget) {
        budget -= count;
        const from = row * rowElements * size;
        pushText(out, w.fetch, i, name, info.name, bytes.subarray(from, from + count * size), count);
      }
      row += word >> 2;
    }
  }
  return out;
}

/**
 * The embeddings items of an FP32 output's slices (see TextRequest.embed), made as the event loop would make them;
 * a slice with a non-finite value gets none (the event loop then reports it). Returns the budget left.
 */
function embeddingTexts(out: FormattedText[], w: TextWanted, t: ort.Tensor, budget: number): number {
  const embed = w.embed!;
  const lengths = w.lengths;
  const dims = t.dims;
  if (t.type !== 'float32' || dims.length < 2) return budget;
  let rows = 0;
  for (let i = 0; i < w.slices.length; i++) rows += w.slices[i]! >> 2;
  if (!w.byRows) rows = dims[0]!;
  if (dims[0] !== rows) return budget;
  let rowElements = 1;
  for (let d = 1; d < dims.length; d++) rowElements *= dims[d]!;
  const lastDim = dims[dims.length - 1]!;
  const f = t.data as Float32Array;
  let row = 0;
  for (let i = 0; i < w.slices.length; i++) {
    const word = w.slices[i]!;
    const n = w.byRows ? word >> 2 : rows;
    const count = n * rowElements;
    const flags = embed[2 * i]!;
    if ((word & 3) === SLICE_FORMAT && count <= budget) {
      const pooled = (flags & EMBED_POOL) !== 0;
      if (pooled && (lengths === undefined || lengths.length < row + n)) return budget;
      const hint = {
        output: '',
        lengths: pooled ? Array.prototype.slice.call(lengths, row, row + n) : undefined,
        normalize: (flags & EMBED_NORMALIZE) !== 0,
        base64: (flags & EMBED_BASE64) !== 0,
        firstIndex: embed[2 * i + 1]!,
      };
      const text = hintedItems(hint, f.subarray(row * rowElements, row * rowElements + count), n, rowElements, lastDim);
      if (typeof text === 'string') {
        budget -= count;
        out.push({ fetch: w.fetch, slice: i, text });
      }
    }
    row += n;
  }
  return budget;
}

function pushText(
  out: FormattedText[],
  fetch: number,
  slice: number,
  name: string,
  datatype: (typeof DATATYPES)[number]['name'],
  bytes: Uint8Array,
  count: number,
): void {
  try {
    out.push({ fetch, slice, text: encodeJsonTensorData(name, datatype, bytes, count) });
  } catch {
    // Left to the event loop, which reports the error.
  }
}

/** Fills `target` from the file `fd` at `position`; throws when the file ends first. */
function readFilePart(input: string, fd: number, position: number, target: Uint8Array): void {
  let done = 0;
  while (done < target.byteLength) {
    const n = readSync(fd, target, done, target.byteLength - done, position + done);
    if (n === 0) break;
    done += n;
  }
  if (done !== target.byteLength)
    throw new Error(`input '${input}': the file holding it ended after ${done} of its ${target.byteLength} bytes`);
}

/**
 * Puts the outputs (and the texts asked for, those that fit) in the arena; false when the outputs do not fit or are
 * strings.
 */
function writeOutputs(
  arena: Arena,
  fetches: readonly string[],
  results: ort.InferenceSession.OnnxValueMapType,
  texts: TextsWanted | undefined,
): boolean {
  const h = arena.header;
  let words = 3;
  let bytes = 0;
  for (const name of fetches) {
    const t = results[name] as ort.Tensor;
    if (arenaTypeCode(t.type) < 0) return false;
    words += 4 + t.dims.length;
    bytes += alignUp((t.data as ArrayBufferView).byteLength);
  }
  if (words > USABLE_HEADER_WORDS || HEADER_BYTES + bytes > arena.bytes.byteLength) return false;
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
  h[p] = 0;
  h[p + 1] = 0;
  if (texts !== undefined) writeTexts(arena, p, off, formatTexts(fetches, results, texts));
  return true;
}

/** Writes the texts after the outputs (from `off`), and their entries from header word `p`. */
function writeTexts(arena: Arena, p: number, off: number, texts: readonly FormattedText[]): void {
  const h = arena.header;
  let needed = 0;
  for (const t of texts) needed += t.text.length;
  if (needed > MAX_TEXT_BYTES) return;
  h[p + 1] = needed;
  let n = 0;
  let at = p + 2;
  const room = arena.bytes.byteLength;
  for (const t of texts) {
    const len = t.text.length;
    if (at + 4 > USABLE_HEADER_WORDS || off + len > room) break;
    arena.text.write(t.text, off, len, 'latin1');
    h[at] = t.fetch;
    h[at + 1] = t.slice;
    h[at + 2] = off;
    h[at + 3] = len;
    at += 4;
    off += len;
    n++;
  }
  h[p] = n;
}

function sendCloned(
  session: number,
  id: number,
  fetches: readonly string[],
  results: ort.InferenceSession.OnnxValueMapType,
  /** The worker's timestamps; TIME_DONE is set here. */
  times: number[],
  texts: TextsWanted | undefined,
): void {
  const outputs: WireTensor[] = [];
  const transfer: ArrayBuffer[] = [];
  const formatted = texts === undefined ? undefined : formatTexts(fetches, results, texts);
  times[TIME_DONE] = nowNs();
  for (let f = 0; f < fetches.length; f++) {
    const name = fetches[f]!;
    const t = results[name] as ort.Tensor;
    const data = t.data as WireTensor['data'];
    let slices: (string | undefined)[] | undefined;
    if (formatted !== undefined) {
      for (const x of formatted) if (x.fetch === f) (slices ??= [])[x.slice] = x.text;
    }
    outputs.push(
      slices === undefined
        ? { name, type: t.type, dims: t.dims, data }
        : { name, type: t.type, dims: t.dims, data, texts: slices },
    );
    if (!Array.isArray(data)) {
      const buf = (data as ArrayBufferView).buffer;
      if (buf instanceof ArrayBuffer && !transfer.includes(buf)) transfer.push(buf);
    }
  }
  post({ kind: 'result', session, id, outputs, times }, transfer);
}

async function run(
  session: ort.InferenceSession,
  slot: number,
  id: number,
  feeds: readonly WireTensor[],
  fetches: readonly string[],
  pickNs: number,
  texts: TextsWanted | undefined,
): Promise<void> {
  let results: ort.InferenceSession.OnnxValueMapType;
  let startNs: number;
  try {
    const inputs: Record<string, ort.Tensor> = {};
    for (const f of feeds) {
      inputs[f.name] = new ort.Tensor(f.type, f.data as ort.Tensor.DataType, f.dims);
    }
    startNs = nowNs();
    results = await session.run(inputs, fetches as string[]);
  } catch (err) {
    post({ kind: 'run-error', session: slot, id, message: message(err) });
    return;
  }
  sendCloned(slot, id, fetches, results, [pickNs, startNs, nowNs(), 0], texts);
}

void serve();
