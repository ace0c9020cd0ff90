/**
 * The worker thread of one JavaScript model instance: imports the model
 * file, runs initialize(), then execute() for each batch the main thread
 * posts, one at a time and in order, and finalize() at unload. Model code
 * runs only here, so a model that blocks or throws cannot stall the server's
 * event loop or other models. In "auto-complete" mode it only calls the
 * model class's static auto_complete_config().
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import type { ParameterValue } from '../backend.js';
import { IdleWait } from '../idle-wait.js';
import { describeError, describeImportError } from './describe.js';
import { OutputChecker } from './outputs.js';
import {
  type ExecuteMessage,
  type FromWorker,
  type InferResultMessage,
  type ToWorker,
  type WireRequest,
  type WireResponse,
  type WorkerInit,
  nowNs,
} from './protocol.js';
import { type ModelTensor, type StagedTensor, TensorError, packStaged, stageTensor, toModelTensor } from './tensors.js';

const init = workerData as WorkerInit;
const port = parentPort!;

/** A failure before the model serves: reported to the main thread as the load error. */
class InitError extends Error {}

/** The error infer() rejects with: the server's message, with its Triton error class. */
class InferenceServerError extends Error {
  override readonly name = 'InferenceServerError';
  constructor(
    message: string,
    readonly code: string,
    readonly errorClass: string,
  ) {
    super(message);
  }
}

interface ModelObject {
  initialize?(args: unknown): unknown;
  execute(requests: unknown[]): unknown;
  finalize?(): unknown;
}

function post(msg: FromWorker, transfer?: ArrayBuffer[]): void {
  port.postMessage(msg, transfer);
}

function rel(file: string): string {
  return path.relative(init.modelDir, file);
}

/** The default export of the model file: a class (or, accepted too, an object with execute()). */
async function importModel(file: string): Promise<unknown> {
  let mod: { default?: unknown };
  try {
    mod = (await import(pathToFileURL(file).href)) as { default?: unknown };
  } catch (err) {
    throw new InitError(describeImportError(err, file, init.modelDir));
  }
  let exported = mod.default;
  // CommonJS compiled from TypeScript puts the class at exports.default.
  if (exported !== null && typeof exported === 'object' && 'default' in exported)
    exported = (exported as { default: unknown }).default;
  if (typeof exported !== 'function' && (exported === null || typeof exported !== 'object')) {
    throw new InitError(
      `${rel(file)} has no default export; it must export a model ` +
      `class: export default class { async execute(requests) { ... } }`,
    );
  }
  return exported;
}

// ---- serving ---------------------------------------------------------------------------------

let model: ModelObject;
let checker: OutputChecker;
const queue: ExecuteMessage[] = [];
let running = false;
let closing = false;
let finished = false;

/** infer() calls waiting for the main thread. */
const pendingInfers = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
let nextInferId = 1;

/** How the thread waits for the next batch once it has none (../idle-wait.ts: it spins, then sleeps). */
const idleWait = new IdleWait(init.mode === 'serve' ? init.spinMicros : 0);
/** The last batch came with nothing else in flight on the instance. */
let lastLight = false;

function noteArrival(msg: ExecuteMessage): void {
  lastLight = msg.light;
  idleWait.arrived(msg.at);
}

function onMessage(msg: ToWorker): void {
  switch (msg.t) {
    case 'x':
      noteArrival(msg);
      // From now on a cancellation of its requests is kept, also while the batch waits behind another.
      for (const r of msg.requests) {
        if (r.k !== undefined) liveKeys.add(r.k);
        else if (r.c !== undefined) liveKeys.add(r.c);
      }
      queue.push(msg);
      if (!running) void drain();
      return;
    case 'r':
      settleInfer(msg);
      return;
    case 'c':
      // A cancellation that crossed the end of its stream or execute() concerns nothing any more.
      if (liveKeys.has(msg.k)) cancelledKeys.add(msg.k);
      return;
    case 'close':
      closing = true;
      if (!running) void finish();
      return;
  }
}

/** Spins for the next message while that usually pays; true when a batch arrived. */
function spin(): boolean {
  if (!idleWait.idle(lastLight) || pendingInfers.size > 0) return false;
  const arrived = (): boolean => {
    const got = receiveMessageOnPort(port);
    if (got !== undefined) onMessage(got.message as ToWorker);
    return got !== undefined;
  };
  return idleWait.spin(arrived) && queue.length > 0;
}

async function drain(): Promise<void> {
  running = true;
  for (;;) {
    const msg = queue.shift();
    if (msg !== undefined) {
      await runExecute(msg);
      continue;
    }
    if (closing || !spin()) break;
  }
  running = false;
  if (closing) await finish();
}

class ExecuteTimeout extends Error {}

function withTimeout(value: unknown, ms: number): Promise<unknown> {
  if (value === null || typeof (value as { then?: unknown })?.then !== 'function') return Promise.resolve(value);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new ExecuteTimeout()), ms);
    // Handlers on both paths: an execute() that settles after its timeout is ignored, never unhandled.
    (value as Promise<unknown>).then(
      (v) => {
        clearTimeout(timer);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(timer);
        reject(e);
      },
    );
  });
}

function typeName(v: unknown): string {
  if (v === null || v === undefined) return String(v);
  if (Array.isArray(v)) return 'an array';
  if (typeof v !== 'object') return `a ${typeof v}`;
  const ctor = (v as object).constructor?.name;
  return ctor && ctor !== 'Object' ? `a ${ctor}` : 'an object';
}

// ---- cancellation, and decoupled models' response senders ---------------------------------------

/**
 * Keys whose client went away: decoupled requests' stream keys, and other requests' cancel keys while their batch is in
 * the worker.
 */
const cancelledKeys = new Set<number>();
/**
 * Keys of the requests received and not ended: a decoupled request's (its
 * stream key) until its final response, another's until its execute() returns.
 */
const liveKeys = new Set<number>();

/** A request ended: a cancellation of it concerns nothing any more. */
function endKey(key: number): void {
  liveKeys.delete(key);
  cancelledKeys.delete(key);
}

/** A sender that is garbage collected before its final response ends its request with an error. */
const abandoned = new FinalizationRegistry<{ key: number; id: string }>(({ key, id }) => {
  if (!liveKeys.has(key)) return;
  endKey(key);
  const error = `the model released the response sender of request '${id}' without sending the final response`;
  post({ t: 's', k: key, final: true, r: { error } });
});

/** What a decoupled model's request.responseSender is. */
class ResponseSender {
  constructor(
    private readonly key: number,
    private readonly index: number,
    private readonly request: WireRequest,
  ) {
    abandoned.register(this, { key, id: request.id }, this);
  }

  /** Sends one response; `{ final: true }` ends the request (the response may then be left out). */
  send(response?: unknown, options?: { final?: boolean }): void {
    const final = options?.final === true;
    if (!liveKeys.has(this.key)) throw new Error('Unable to send response. Response sender has been closed.');
    if ((response === undefined || response === null) && !final) {
      throw new TypeError('send() needs a response unless it ends the request: send(undefined, { final: true })');
    }
    if (final) {
      endKey(this.key);
      abandoned.unregister(this);
    }
    if (response === undefined || response === null) {
      post({ t: 's', k: this.key, final });
      return;
    }
    const c = checker.check(this.index, this.request, response);
    if (c.error !== undefined) {
      post({ t: 's', k: this.key, final, r: { error: c.error } });
      return;
    }
    const { wire, transfer } = packStaged([c.outputs!]);
    const r: WireResponse = c.parameters ? { outputs: wire[0]!, parameters: c.parameters } : { outputs: wire[0]! };
    post({ t: 's', k: this.key, final, r }, transfer);
  }

  /** True once the client went away. */
  isCancelled(): boolean {
    return cancelledKeys.has(this.key);
  }
}

/** isCancelled() of a request no client can cancel. */
const notCancelled = (): boolean => false;

/** Ends the open requests of a failed decoupled execute() (the server reports the failure). */
function closeStreams(wire: readonly WireRequest[]): void {
  for (const r of wire) {
    if (r.k === undefined) continue;
    endKey(r.k);
  }
}

async function runExecute(msg: ExecuteMessage): Promise<void> {
  if (init.mode !== 'serve') return;
  const picked = nowNs();
  const wire = msg.requests;
  const requests = new Array<unknown>(wire.length);
  for (let i = 0; i < wire.length; i++) {
    const r = wire[i]!;
    const inputs = new Array<ModelTensor>(r.inputs.length);
    for (let k = 0; k < r.inputs.length; k++) inputs[k] = toModelTensor(r.inputs[k]!);
    const request: Record<string, unknown> = {
      id: r.id,
      inputs,
      requestedOutputs: r.requestedOutputs,
      parameters: r.parameters,
      batchSize: r.batchSize,
      correlationId: r.correlationId,
      flags: r.flags,
    };
    if (r.k !== undefined) {
      // A decoupled model's request also carries its response sender.
      const sender = new ResponseSender(r.k, i, r);
      request.responseSender = sender;
      request.isCancelled = () => sender.isCancelled();
    } else if (r.c !== undefined) {
      const key = r.c;
      request.isCancelled = () => cancelledKeys.has(key);
    } else request.isCancelled = notCancelled;
    requests[i] = request;
  }
  const start = nowNs();
  let result: unknown;
  let failure: string | undefined;
  // The batch's only traced request is the parent of the infer() calls its execute() makes.
  let trace: number | undefined;
  for (const r of wire) {
    if (r.tr === undefined) continue;
    trace = trace === undefined ? r.tr : -1;
  }
  try {
    const running =
      trace === undefined || trace < 0 ? model.execute(requests) : batchTrace.run(trace, () => model.execute(requests));
    result = await withTimeout(running, init.executeTimeoutMs);
  } catch (err) {
    failure =
      err instanceof ExecuteTimeout
        ? `execute() did not finish within ${init.executeTimeoutMs} ms (model parameter execute_timeout_ms)`
        : `execute() threw ${describeError(err, init.modelDir)}`;
  }
  const times = [picked, start, nowNs()];
  for (const r of wire) {
    if (r.c === undefined) continue;
    endKey(r.c);
  }
  if (init.decoupled) {
    if (failure === undefined && result !== undefined && result !== null) {
      failure = `execute() of a decoupled model returned ${typeName(result)}; it ` +
        `must return nothing, its responses go through request.responseSender`;
    }
    if (failure !== undefined) {
      closeStreams(wire);
      post({ t: 'd', id: msg.id, times, error: failure });
    } else {
      post({ t: 'd', id: msg.id, times, responses: [] });
    }
    return;
  }
  if (failure === undefined) {
    if (!Array.isArray(result))
      failure = `execute() returned ${typeName(result)}, not an array with one response per request`;
    else if (result.length !== wire.length) {
      failure = `execute() returned ${result.length} response${result.length === 1 ? '' : 's'} ` +
        `for ${wire.length} request${wire.length === 1 ? '' : 's'}`;
    }
  }
  if (failure !== undefined) {
    post({ t: 'd', id: msg.id, times, error: failure });
    return;
  }
  const list = result as unknown[];
  const staged: (readonly StagedTensor[])[] = [];
  const checked = list.map((resp, i) => {
    const c = checker.check(i, wire[i]!, resp);
    if (c.outputs) staged.push(c.outputs);
    return c;
  });
  const { wire: packed, transfer } = packStaged(staged);
  let g = 0;
  const responses = checked.map((c): WireResponse => {
    if (c.error !== undefined) return { error: c.error };
    const outputs = packed[g++]!;
    return c.parameters ? { outputs, parameters: c.parameters } : { outputs };
  });
  post({ t: 'd', id: msg.id, times, responses }, transfer);
}

async function finish(): Promise<void> {
  if (finished) return;
  finished = true;
  try {
    if (typeof model?.finalize === 'function') await model.finalize();
  } catch (err) {
    process.stderr.write(`finalize() failed: ${describeError(err, init.modelDir)}\n`);
  }
  post({ t: 'closed' });
}

// ---- infer() (BLS) ---------------------------------------------------------------------------

/** The trace handle of the batch whose execute() is running, across its awaits. */
const batchTrace = new AsyncLocalStorage<number>();

interface InferArgument {
  model?: unknown;
  version?: unknown;
  id?: unknown;
  inputs?: unknown;
  outputs?: unknown;
  parameters?: unknown;
}

async function infer(request: InferArgument): Promise<unknown> {
  if (request === null || typeof request !== 'object')
    throw new TypeError('infer() takes { model, inputs, version?, outputs?, parameters? }');
  if (typeof request.model !== 'string' || request.model === '')
    throw new TypeError('infer(): model must be the name of a model');
  if (!Array.isArray(request.inputs))
    throw new TypeError(`infer() to '${request.model}': inputs must be an array of tensors`);
  const staged: StagedTensor[] = [];
  try {
    for (let k = 0; k < request.inputs.length; k++) staged.push(stageTensor('input', k, request.inputs[k]));
  } catch (err) {
    if (err instanceof TensorError) {
      throw new TypeError(`infer() to '${request.model}': ${err.message}`, { cause: err });
    }
    throw err;
  }
  let outputs: string[] | undefined;
  if (request.outputs !== undefined) {
    if (!Array.isArray(request.outputs) || !request.outputs.every((o) => typeof o === 'string')) {
      throw new TypeError(`infer() to '${request.model}': outputs must be an array of output names`);
    }
    outputs = request.outputs as string[];
  }
  let version: string | undefined;
  if (request.version !== undefined && request.version !== null) {
    if (typeof request.version !== 'string' && typeof request.version !== 'number') {
      throw new TypeError(`infer() to '${request.model}': version must be a number or a string`);
    }
    version = String(request.version);
  }
  let parameters: Record<string, ParameterValue> | undefined;
  if (request.parameters !== undefined) {
    if (request.parameters === null || typeof request.parameters !== 'object') {
      throw new TypeError(`infer() to '${request.model}': parameters must be an object`);
    }
    parameters = request.parameters as Record<string, ParameterValue>;
  }
  const { wire, transfer } = packStaged([staged]);
  const id = nextInferId++;
  const promise = new Promise<unknown>((resolve, reject) => pendingInfers.set(id, { resolve, reject }));
  post(
    {
      t: 'i',
      id,
      model: request.model,
      version,
      requestId: typeof request.id === 'string' ? request.id : undefined,
      inputs: wire[0]!,
      outputs,
      parameters,
      trace: batchTrace.getStore(),
    },
    transfer,
  );
  return promise;
}

function settleInfer(msg: InferResultMessage): void {
  const p = pendingInfers.get(msg.id);
  if (!p) return;
  pendingInfers.delete(msg.id);
  if ('error' in msg) {
    p.reject(new InferenceServerError(msg.error, msg.code, msg.errorClass));
    return;
  }
  const result: {
    modelName: string;
    modelVersion: string;
    outputs: ModelTensor[];
    parameters?: Readonly<Record<string, ParameterValue>>;
  } = {
    modelName: msg.modelName,
    modelVersion: msg.modelVersion,
    outputs: msg.outputs.map(toModelTensor),
  };
  if (msg.parameters) result.parameters = msg.parameters;
  p.resolve(result);
}

// ---- start -----------------------------------------------------------------------------------

function asModelObject(exported: unknown, file: string): ModelObject {
  let obj: unknown;
  if (typeof exported === 'function') {
    try {
      obj = new (exported as new () => unknown)();
    } catch (err) {
      throw new InitError(
        `the model class of ${rel(file)} could not be constructed: ${describeError(err, init.modelDir)}`,
      );
    }
  } else {
    obj = exported;
  }
  if (obj === null || typeof obj !== 'object' || typeof (obj as { execute?: unknown }).execute !== 'function') {
    throw new InitError(`the model class of ${rel(file)} has no execute(requests) method`);
  }
  return obj as ModelObject;
}

async function serve(): Promise<void> {
  if (init.mode !== 'serve') return;
  const exported = await importModel(init.file);
  model = asModelObject(exported, init.file);
  checker = new OutputChecker(init.outputs, init.maxBatchSize);
  // Listening before initialize(): it may call infer() too.
  port.on('message', onMessage);
  if (typeof model.initialize === 'function') {
    try {
      await model.initialize({ ...init.args, infer });
    } catch (err) {
      throw new InitError(`initialize() failed: ${describeError(err, init.modelDir)}`);
    }
  }
  post({ t: 'ready' });
}

async function autoComplete(): Promise<void> {
  if (init.mode !== 'auto-complete') return;
  const exported = await importModel(init.file);
  const fn =
    typeof exported === 'function' ? (exported as { auto_complete_config?: unknown }).auto_complete_config : undefined;
  if (typeof fn !== 'function') {
    post({ t: 'config', config: null });
    return;
  }
  let out: unknown;
  try {
    out = await (fn as (c: unknown) => unknown).call(exported, init.config);
  } catch (err) {
    throw new InitError(`auto_complete_config() failed: ${describeError(err, init.modelDir)}`);
  }
  if (out === undefined) out = init.config;
  if (out === null || typeof out !== 'object' || Array.isArray(out)) {
    throw new InitError(`auto_complete_config() must return the configuration object, not ${typeName(out)}`);
  }
  post({ t: 'config', config: out as Record<string, unknown> });
}

try {
  if (init.mode === 'serve') await serve();
  else await autoComplete();
} catch (err) {
  const message =
    err instanceof InitError ? err.message : `the model could not start: ${describeError(err, init.modelDir)}`;
  post({ t: 'init-error', message });
}

