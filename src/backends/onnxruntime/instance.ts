/**
 * One onnxruntime instance: gathers a batch of requests into one session run
 * and hands each request its slice of the outputs.
 *
 * Inputs: the session client copies each numeric input of every request
 * straight into its shared arena (all requests of the batch back to back);
 * inputs whose bytes still lie in a file (client shared memory) are read by
 * the session thread itself.
 * Outputs come back in buffers of their own, and each request's outputs are
 * views into them.
 */
import type {
  BackendInstance,
  BackendRequest,
  BackendResponse,
  ExecutionTimer,
  SchedulingHooks,
} from '../backend.js';
import { Errors, asNereidError } from '../../errors.js';
import { DATATYPES, datatypeInfo, type TypedArray } from '../../tensor/datatype.js';
import { decodeBytesElements, encodeBytesElements, makeTensor, type Tensor } from '../../tensor/tensor.js';
import type { Tensor as OrtTensor } from 'onnxruntime-node';
import { type InlinePolicy, type InlineSession, runOverlap } from './policies/inline.js';
import {
  JsonTextPolicy,
  LARGE_TEXT_ELEMENTS,
  SPARE_CORES,
  processCoresUsed,
  spareCores,
} from './policies/json-text.js';
import type { ModelPlan, TensorPlan } from './plan.js';
import { RunTimes, type SessionClient } from './thread/session-client.js';
import {
  ARENA_ARRAYS,
  MERGED_LATER,
  MERGED_NOT,
  EMBED_BASE64,
  EMBED_NORMALIZE,
  EMBED_POOL,
  RunFeed,
  SLICE_FORMAT,
  SLICE_SKIP,
  TextPlan,
  TextRequest,
  arenaTypeCode,
  sliceWord,
  nowNs,
  type RunPart,
  type WireTensor,
} from './thread/worker-protocol.js';

const utf8 = new TextDecoder();

function findTensor(tensors: readonly Tensor[], name: string): Tensor | undefined {
  for (const t of tensors) if (t.name === name) return t;
  return undefined;
}

function findWire(tensors: readonly WireTensor[], name: string): WireTensor | undefined {
  for (const t of tensors) if (t.name === name) return t;
  return undefined;
}

function product(dims: readonly number[], from: number): number {
  let n = 1;
  for (let i = from; i < dims.length; i++) n *= dims[i]!;
  return n;
}

function withBatch(batch: number, rest: readonly number[]): number[] {
  const out = new Array<number>(rest.length + 1);
  out[0] = batch;
  for (let i = 0; i < rest.length; i++) out[i + 1] = rest[i]!;
  return out;
}

function sameDims(a: readonly number[], b: readonly number[], from: number): boolean {
  if (a.length !== b.length) return false;
  for (let i = from; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * Executions an instance takes at once: one running on the session thread and
 * the rest waiting in its ring, so that under load the thread goes from run to
 * run without waiting for the event loop (the dynamic batcher uses two).
 */
export const ORT_MAX_IN_FLIGHT = 8;

export class OnnxRuntimeInstance implements BackendInstance {
  readonly scheduling: SchedulingHooks = {
    maxInFlight: ORT_MAX_IN_FLIGHT,
    collectFinished: () => this.client.currentThread?.collectFinished(),
    spreadBatches: () => this.spreadBatches(),
  };
  // No batchSlots: the batcher's default two (running and one waiting). The session thread would
  // merge more waiting batches into one run, but four slots served the medium MLP at concurrency 32
  // slower (same run, load 8: binary 6,077 -> 5,781 requests/s, binary in / JSON out 5,004 -> 4,155).
  private readonly client: SessionClient;
  private readonly plan: ModelPlan;
  /** Where each run goes (see policies/inline.ts); undefined: always the session thread. */
  private readonly inline: InlinePolicy | undefined;
  /** Inline runs: input bytes that are not aligned views, by input position. */
  private readonly scratch: ArrayBuffer[] = [];
  /** Runs made on the event loop so far. */
  inlineRuns = 0;
  /** Of which in the model's wide main-thread session (see policies/inline.ts). */
  wideInlineRuns = 0;
  /** Which JSON output texts the session thread formats (see policies/json-text.ts). */
  readonly jsonText: JsonTextPolicy;

  constructor(client: SessionClient, plan: ModelPlan, inline?: InlinePolicy) {
    this.client = client;
    this.plan = plan;
    this.inline = inline;
    this.jsonText = new JsonTextPolicy(plan);
  }

  /** Whether batches are being spread (see spreadBatches). */
  private spreading = false;

  /**
   * Spread while a core is idle (spareCores, the reading the JSON text
   * policy takes): from SPARE_CORES idle on, and on while the process keeps
   * using more than one core (the idle core it put to work) with at least
   * SPARE_CORES idle or so used; a machine whose cores are busy with other
   * work ends it.
   */
  private spreadBatches(): boolean {
    const spare = spareCores(nowNs());
    this.spreading =
      spare >= SPARE_CORES || (this.spreading && spare + Math.max(0, processCoresUsed() - 1) >= SPARE_CORES);
    return this.spreading;
  }

  async execute(requests: readonly BackendRequest[], timer: ExecutionTimer): Promise<BackendResponse[]> {
    if (requests.length === 0) return [];
    if (requests.length === 1 || (this.plan.maxBatchSize > 0 && this.canRunTogether(requests))) {
      return this.runTogether(requests, timer);
    }
    // Without a batch dim, or with shapes that differ, each request is a run of
    // its own. All are handed to the session thread at once (it runs them in
    // order), so only one round trip is waited for.
    const runs = new Array<Promise<BackendResponse>>(requests.length);
    for (let i = 0; i < requests.length; i++) runs[i] = this.runAlone(requests[i]!);
    // Each run gathered its inputs synchronously before waiting.
    timer.inputDone();
    const responses = await Promise.all(runs);
    timer.inferDone();
    return responses;
  }

  private async runAlone(request: BackendRequest): Promise<BackendResponse> {
    try {
      return (await this.runTogether([request], undefined))[0]!;
    } catch (err) {
      return { error: asNereidError(err) };
    }
  }

  /** Intra-op threads of the model's wide main-thread session (see policies/inline.ts); 1 when it has none. */
  get inlineWideThreads(): number {
    return this.inline?.wideThreads ?? 1;
  }

  async isReady(): Promise<boolean> {
    return this.client.alive;
  }

  close(): Promise<void> {
    return this.client.close();
  }

  /** One run on the event loop (see policies/inline.ts); times it for the policy and the timer. */
  private runInline(
    session: InlineSession,
    feeds: readonly RunFeed[],
    fetches: readonly string[],
    size: number,
    timer: ExecutionTimer | undefined,
  ): WireTensor[] {
    const Tensor = session.Tensor;
    const inputs: Record<string, OrtTensor> = {};
    for (let i = 0; i < feeds.length; i++) {
      const f = feeds[i]!;
      if (f.strings !== undefined) {
        inputs[f.name] = new Tensor('string', f.strings as string[], f.dims);
        continue;
      }
      const Ctor = ARENA_ARRAYS[arenaTypeCode(f.type)]!;
      const size = Ctor.BYTES_PER_ELEMENT;
      const parts = f.parts as readonly Uint8Array[]; // (no file parts: see inFiles)
      const only = parts.length === 1 ? parts[0]! : undefined;
      let data: ArrayBufferView;
      if (only !== undefined && only.byteOffset % size === 0) {
        // One request's bytes, aligned: onnxruntime reads them where they are.
        data = new Ctor(only.buffer, only.byteOffset, f.byteLength / size);
      } else {
        let s = this.scratch[i];
        if (s === undefined || s.byteLength < f.byteLength) {
          s = new ArrayBuffer(Math.max(64, f.byteLength));
          this.scratch[i] = s;
        }
        const target = new Uint8Array(s, 0, f.byteLength);
        let at = 0;
        for (const part of parts) {
          target.set(part, at);
          at += part.byteLength;
        }
        data = new Ctor(s, 0, f.byteLength / size);
      }
      inputs[f.name] = new Tensor(f.type as 'float32', data as Float32Array, f.dims);
    }
    timer?.inputDone();
    this.inlineRuns++;
    if (this.inline!.isWide(session)) this.wideInlineRuns++;
    const start = nowNs();
    let results: Record<string, OrtTensor>;
    try {
      results = session.run(inputs, fetches);
    } catch (err) {
      throw Errors.modelExecution(this.plan.modelName, err instanceof Error ? err.message : String(err));
    } finally {
      this.inline!.recordRun(size, nowNs() - start, session);
    }
    timer?.inferDone();
    const outputs = new Array<WireTensor>(fetches.length);
    for (let i = 0; i < fetches.length; i++) {
      const name = fetches[i]!;
      const t = results[name]!;
      outputs[i] = { name, type: t.type, dims: t.dims, data: t.data as WireTensor['data'] };
    }
    return outputs;
  }

  /** Same inputs with the same datatypes and non-batch dims in every request. */
  private canRunTogether(requests: readonly BackendRequest[]): boolean {
    const first = requests[0]!;
    for (let i = 1; i < requests.length; i++) {
      const r = requests[i]!;
      if (r.inputs.length !== first.inputs.length) return false;
      for (const t0 of first.inputs) {
        const t = findTensor(r.inputs, t0.name);
        if (!t || t.datatype !== t0.datatype || !sameDims(t.shape, t0.shape, 1)) return false;
      }
    }
    return true;
  }

  private async runTogether(
    requests: readonly BackendRequest[],
    timer: ExecutionTimer | undefined,
  ): Promise<BackendResponse[]> {
    const plan = this.plan;
    const batching = plan.maxBatchSize > 0;
    const n = requests.length;
    const offsets = new Array<number>(n);
    let total = 0;
    for (let i = 0; i < n; i++) {
      offsets[i] = total;
      total += batching ? requests[i]!.batchSize : 1;
    }

    const first = requests[0]!;
    const feeds = new Array<RunFeed>(first.inputs.length);
    for (let i = 0; i < first.inputs.length; i++) {
      const t0 = first.inputs[i]!;
      const p = plan.input(t0.name);
      if (!p) throw Errors.unknownInput(t0.name, plan.modelName);
      const modelShape = p.toModelShape(batching ? t0.shape.slice(1) : t0.shape);
      feeds[i] = gatherInput(plan.modelName, requests, p, batching ? withBatch(total, modelShape) : modelShape);
    }

    const fetches: string[] = [];
    for (const p of plan.outputs) {
      for (const r of requests) {
        if (r.requestedOutputs.includes(p.name)) {
          fetches.push(p.name);
          break;
        }
      }
    }
    for (const r of requests) {
      for (const name of r.requestedOutputs) {
        if (!plan.outputsByName.has(name)) throw Errors.unknownOutput(name, plan.modelName);
      }
    }

    let outputs: readonly WireTensor[];
    const policy = this.inline;
    const threadIdle = this.client.idle;
    // A shared thread busy with other sessions' runs would count their time as crossing.
    const threadEmpty = this.client.currentThread?.idle === true;
    // Bytes still in a file (client shared memory) are for the thread to read, never the event loop.
    // A run's size for the policy: the input elements it carries (variable dims make items a poor measure).
    let size = 0;
    for (const f of feeds) size += product(f.dims, 0);
    const session =
      policy !== undefined && !inFiles(feeds)
        ? policy.choose(size, threadIdle, requests.length, threadEmpty && this.client.currentThread?.asleep === true)
        : undefined;
    if (session) {
      outputs = this.runInline(session, feeds, fetches, size, timer);
    } else {
      const times = new RunTimes();
      runOverlap.started();
      const texts = withEmbeddings(this.jsonText.textPlan(requests, fetches), requests, fetches, batching);
      try {
        // A batching model's runs may be merged on the thread with those queued behind them.
        outputs = await this.client.run(
          feeds,
          fetches,
          times,
          texts,
          batching && !inFiles(feeds) ? plan.maxBatchSize : 0,
        );
      } catch (err) {
        throw Errors.modelExecution(plan.modelName, err instanceof Error ? err.message : String(err));
      } finally {
        runOverlap.ended();
      }
      if (timer) {
        // The session thread's own timestamps: waiting for it to take the run up is queue time.
        timer.waited(times.pickedNs - times.postedNs);
        timer.inputDone(BigInt(Math.round(times.startNs)));
        timer.inferDone(BigInt(Math.round(times.endNs)));
      }
      // A merged run's time counts once (with its first run), and its size is not this run's.
      if (times.merged !== MERGED_LATER) this.jsonText.recordRun(times.pickedNs, times.doneNs, nowNs());
      if (policy && times.merged === MERGED_NOT) {
        const runNs = times.endNs - times.startNs;
        policy.recordRun(size, runNs);
        // With nothing before it on the thread, all but the run itself is the crossing.
        if (threadEmpty) policy.recordCrossing(nowNs() - times.postedNs - runNs);
      }
    }

    const responses = new Array<BackendResponse>(n);
    for (let i = 0; i < n; i++) {
      const r = requests[i]!;
      try {
        const tensors: Tensor[] = [];
        for (const name of r.requestedOutputs) {
          tensors.push(
            sliceOutput(
              plan.modelName,
              plan.outputsByName.get(name)!,
              findWire(outputs, name)!,
              batching,
              total,
              offsets[i]!,
              batching ? r.batchSize : 1,
              i,
              r.embeddingText?.output === name,
            ),
          );
        }
        responses[i] = { outputs: tensors };
      } catch (err) {
        responses[i] = { error: asNereidError(err) };
      }
    }
    return responses;
  }
}

const FP32_INDEX = DATATYPES.findIndex((d) => d.name === 'FP32');

/**
 * `texts` with the embeddings items the requests ask for (BackendRequest.embeddingText): a run on the session
 * thread makes them there, after the run, so the event loop only joins them (docs/openai.md, "Off the event
 * loop"); a run made inline leaves them to the caller.
 */
function withEmbeddings(
  texts: TextPlan | undefined,
  requests: readonly BackendRequest[],
  fetches: readonly string[],
  batching: boolean,
): TextPlan | undefined {
  let out: TextRequest[] | undefined;
  for (let f = 0; f < fetches.length; f++) {
    const name = fetches[f]!;
    let wanted = false;
    for (let i = 0; i < requests.length; i++) if (requests[i]!.embeddingText?.output === name) wanted = true;
    if (!wanted) continue;
    const slices = new Array<number>(requests.length);
    const embed = new Array<number>(2 * requests.length).fill(0);
    const lengths: number[] = [];
    let pooled = false;
    for (let i = 0; i < requests.length; i++) {
      const r = requests[i]!;
      const rows = batching ? r.batchSize : 0;
      const hint = r.embeddingText;
      const wants = hint?.output === name && r.requestedOutputs.includes(name);
      slices[i] = sliceWord(rows, wants ? SLICE_FORMAT : SLICE_SKIP);
      const n = batching ? rows : (hint?.lengths?.length ?? 0);
      if (wants && hint.lengths !== undefined) {
        if (hint.lengths.length !== n) return texts;
        pooled = true;
        for (let k = 0; k < n; k++) lengths.push(hint.lengths[k]!);
      } else for (let k = 0; k < n; k++) lengths.push(0);
      if (wants) {
        embed[2 * i] =
          (hint.base64 ? EMBED_BASE64 : 0) |
          (hint.normalize ? EMBED_NORMALIZE : 0) |
          (hint.lengths !== undefined ? EMBED_POOL : 0);
        embed[2 * i + 1] = hint.firstIndex;
      }
    }
    (out ??= []).push(
      new TextRequest(
        f,
        FP32_INDEX,
        arenaTypeCode('float32'),
        batching,
        batching ? slices : [slices[0]!],
        batching ? embed : embed.slice(0, 2),
        pooled ? lengths : [],
      ),
    );
  }
  if (out === undefined) return texts;
  return new TextPlan([...(texts?.requests ?? []), ...out], texts?.largeElements ?? LARGE_TEXT_ELEMENTS);
}

function inFiles(feeds: readonly RunFeed[]): boolean {
  for (const f of feeds) if (f.fileParts > 0) return true;
  return false;
}

/** One input of every request: the parts to place back to back (strings for BYTES). */
function gatherInput(
  modelName: string,
  requests: readonly BackendRequest[],
  p: TensorPlan,
  dims: readonly number[],
): RunFeed {
  if (p.datatype === 'BYTES') {
    const strings: string[] = [];
    for (const r of requests) {
      const t = findTensor(r.inputs, p.name)!;
      for (const e of decodeBytesElements(t.data, p.name)) strings.push(utf8.decode(e));
    }
    return new RunFeed(p.name, p.ortType, dims, [], 0, strings);
  }
  const info = datatypeInfo(p.datatype);
  const parts = new Array<RunPart>(requests.length);
  let bytes = 0;
  for (let i = 0; i < requests.length; i++) {
    const t = findTensor(requests[i]!.inputs, p.name)!;
    // Bytes still in a file are read by the session thread, straight into the buffer it runs on.
    const part = t.file ?? t.data;
    parts[i] = part;
    bytes += part.byteLength;
  }
  if (bytes % info.byteSize !== 0) {
    throw Errors.invalidRequest(
      `input '${p.name}' for model '${modelName}' has ${bytes} bytes, not a whole number of ${p.datatype} elements`,
    );
  }
  return new RunFeed(p.name, p.ortType, dims, parts, bytes, undefined);
}

function sliceOutput(
  modelName: string,
  p: TensorPlan,
  w: WireTensor,
  batching: boolean,
  total: number,
  offset: number,
  batchSize: number,
  /** The request's position in the batch (its slice of the texts). */
  slice: number,
  /** Its text is embeddings items (BackendRequest.embeddingText), not JSON data. */
  embedded: boolean,
): Tensor {
  let start = 0;
  let count: number;
  let shape: readonly number[];
  if (batching) {
    if (w.dims.length === 0 || w.dims[0] !== total) {
      throw Errors.modelExecution(
        modelName,
        `it returned output '${p.name}' with shape [${w.dims.join(',')}], but the batch has ${total} items`,
      );
    }
    const rowDims = w.dims.slice(1);
    const rowElems = product(w.dims, 1);
    start = offset * rowElems;
    count = batchSize * rowElems;
    shape = withBatch(batchSize, p.toConfigShape(rowDims));
  } else {
    count = product(w.dims, 0);
    shape = p.toConfigShape(w.dims);
  }
  if (Array.isArray(w.data)) {
    const strings = w.data as readonly string[];
    return makeTensor(
      p.name,
      p.datatype,
      shape,
      encodeBytesElements(start === 0 && count === strings.length ? strings : strings.slice(start, start + count)),
    );
  }
  const view = w.data as TypedArray;
  const size = view.BYTES_PER_ELEMENT;
  const data = new Uint8Array(view.buffer, view.byteOffset + start * size, count * size);
  const text = w.texts?.[slice];
  if (text === undefined) return makeTensor(p.name, p.datatype, shape, data);
  return embedded
    ? { name: p.name, datatype: p.datatype, shape, data, embeddingText: text }
    : { name: p.name, datatype: p.datatype, shape, data, jsonData: text };
}
