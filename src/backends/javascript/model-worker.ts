/**
 * The main-thread handle of one instance's worker thread: starts it, posts
 * batches and serves the model's infer() calls through the server. A worker
 * that dies (an uncaught error, process.exit(), or an execute() that blocks
 * its thread past the timeout, which stops it) fails the executions it held;
 * its supervisor starts a new one.
 */
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import type { BackendRequest, BackendResponse, InferenceCaller } from '../backend.js';
import type { SupervisedWorker } from '../supervisor.js';
import { Errors, NereidError } from '../../errors.js';
import type { Tensor } from '../../tensor/tensor.js';
import type { CancellationSignal } from '../../types/cancellation.js';
import type { RequestTrace } from '../../types/api.js';
import { datatypeInfo } from '../../tensor/datatype.js';
import { type StartWaiter, waitForStart } from '../start-timeout.js';
import { describeError } from './describe.js';
import {
  type ExecuteDoneMessage,
  type ExecuteMessage,
  type FromWorker,
  type InferCallMessage,
  type StreamResponseMessage,
  type ToWorker,
  type WireResponse,
  type WireRequest,
  type WireTensor,
  type WorkerInit,
  align8,
  nowNs,
} from './protocol.js';

const WORKER_URL = new URL('./worker.js', import.meta.url);

/** How long past its timeout an execute() may hold the thread before it counts as blocked. */
const BLOCKED_GRACE_MS = 1000;

export interface ModelWorkerOptions {
  readonly init: Extract<WorkerInit, { mode: 'serve' }>;
  /** "model 'm' instance 'm_0'", for messages. */
  readonly label: string;
  readonly server: InferenceCaller;
  readonly logger: Logger;
  readonly initializeTimeoutMs: number;
  /** The thread's heap limit (MB); 0: Node's default. */
  readonly maxHeapMb: number;
}

export interface ExitInfo {
  readonly code: number;
}

class PendingExecute {
  constructor(
    readonly id: number,
    readonly resolve: (msg: ExecuteDoneMessage) => void,
    readonly reject: (err: Error) => void,
    /** Stream keys of its decoupled requests. */
    readonly keys: readonly number[],
    /** Its requests that are not decoupled and that a client may cancel, while execute() runs. */
    readonly watches: readonly CancelWatch[],
  ) {}

  /** execute() has returned (or its thread ended): cancellation no longer concerns it. */
  settled(): void {
    for (const w of this.watches) w.detach();
  }
}

/**
 * Forwards a request's cancellation to the worker under its key, until
 * detached (its execute() returned, or for a decoupled request its final
 * response came): the model sees it through request.isCancelled().
 */
class CancelWatch {
  constructor(
    readonly key: number,
    private readonly signal: CancellationSignal | undefined,
    private readonly worker: ModelWorker,
  ) {
    signal?.addEventListener('abort', this);
  }
  handleEvent(): void {
    this.worker.cancelKey(this.key);
  }
  /** A client that went away before the batch was posted. */
  sendIfAborted(): void {
    if (this.signal?.aborted) this.worker.cancelKey(this.key);
  }
  detach(): void {
    this.signal?.removeEventListener('abort', this);
  }
}

/**
 * A decoupled request whose final response has not come yet. A traced one
 * keeps its trace reachable by handle until then: infer() calls the model
 * makes for it after execute() returned still join the request's trace.
 */
class OpenStream extends CancelWatch {
  constructor(
    key: number,
    readonly request: BackendRequest,
    worker: ModelWorker,
    private readonly traces: Map<number, RequestTrace> | undefined,
  ) {
    super(key, request.signal, worker);
    if (traces !== undefined) traces.set(request.trace!.id, request.trace!);
  }
  override detach(): void {
    super.detach();
    this.traces?.delete(this.request.trace!.id);
  }
}

/** A response as the worker sends it, as the server's backend response. */
export function fromWireResponse(model: string, r: WireResponse): BackendResponse {
  if ('error' in r) return { error: Errors.modelExecution(model, r.error) };
  const outputs = new Array<Tensor>(r.outputs.length);
  for (let k = 0; k < r.outputs.length; k++) {
    const w = r.outputs[k]!;
    outputs[k] = { name: w.n, datatype: w.d, shape: w.s, data: new Uint8Array(w.b, w.o, w.l) };
  }
  return r.parameters ? { outputs, parameters: r.parameters } : { outputs };
}

function isShared(data: Uint8Array): boolean {
  return data.buffer instanceof SharedArrayBuffer;
}

/** Tensors as wire tensors: shared bytes by reference, the rest copied into one SharedArrayBuffer. */
function shareTensors(tensors: readonly Tensor[]): WireTensor[] {
  let total = 0;
  for (const t of tensors) if (!canShare(t)) total += align8(t.data.byteLength);
  const sab = total > 0 ? new SharedArrayBuffer(total) : undefined;
  const bytes = sab ? new Uint8Array(sab) : undefined;
  let at = 0;
  const out = new Array<WireTensor>(tensors.length);
  for (let i = 0; i < tensors.length; i++) {
    const t = tensors[i]!;
    if (canShare(t)) {
      out[i] = { n: t.name, d: t.datatype, s: t.shape, b: t.data.buffer, o: t.data.byteOffset, l: t.data.byteLength };
    } else {
      bytes!.set(t.data, at);
      out[i] = { n: t.name, d: t.datatype, s: t.shape, b: sab!, o: at, l: t.data.byteLength };
      at += align8(t.data.byteLength);
    }
  }
  return out;
}

/** Shared bytes the worker can view as the tensor's typed array where they lie. */
function canShare(t: Tensor): boolean {
  if (!isShared(t.data)) return false;
  const size = datatypeInfo(t.datatype).byteSize;
  return size === 0 || t.data.byteOffset % size === 0;
}

function pipeLines(stream: NodeJS.ReadableStream, log: (line: string) => void): void {
  let partial = '';
  stream.setEncoding('utf8');
  stream.on('data', (text: string) => {
    const lines = (partial + text).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) log(line);
  });
  stream.on('end', () => {
    if (partial) log(partial);
    partial = '';
  });
}

export class ModelWorker implements SupervisedWorker {
  readonly startedAt = Date.now();
  onUnexpectedExit: ((info: ExitInfo, err: Error) => void) | undefined;
  readonly pid: number;

  private readonly worker: Worker;
  private alive = true;
  private closing = false;
  /** Executions posted and not yet answered, in the order the worker runs them. */
  private readonly inFlight: PendingExecute[] = [];
  private nextId = 1;
  /** Decoupled requests by stream key, until their final response. */
  private readonly streams = new Map<number, OpenStream>();
  private nextStreamKey = 1;
  /** Traces of the requests whose execute() runs, by handle (see InferCallMessage.trace). */
  private readonly traces = new Map<number, RequestTrace>();
  private watchdog: NodeJS.Timeout | undefined;
  private watchedId = 0;
  /** Why the thread ended, when we know better than its exit code. */
  private endReason: string | undefined;
  private readonly exited: Promise<void>;
  private onClosed: (() => void) | undefined;
  private starting: StartWaiter | undefined;

  private constructor(private readonly opts: ModelWorkerOptions) {
    // The model's console output goes to the server's log, line by line.
    this.worker = new Worker(WORKER_URL, {
      workerData: opts.init,
      stdout: true,
      stderr: true,
      resourceLimits: opts.maxHeapMb > 0 ? { maxOldGenerationSizeMb: opts.maxHeapMb } : undefined,
    });
    this.pid = this.worker.threadId;
    pipeLines(this.worker.stdout, (line) => opts.logger.info({ stream: 'stdout' }, line));
    pipeLines(this.worker.stderr, (line) => opts.logger.warn({ stream: 'stderr' }, line));
    this.exited = new Promise((resolve) => this.worker.once('exit', () => resolve()));
    this.worker.on('message', (msg: FromWorker) => this.onMessage(msg));
    this.worker.on('error', (err: unknown) => {
      this.endReason ??= `the worker thread failed: ${describeError(err, opts.init.modelDir)}`;
    });
    this.worker.on('exit', (code: number) => this.onExit(code));
  }

  /** Starts the thread and waits until the model is imported and initialized. */
  static async start(opts: ModelWorkerOptions): Promise<ModelWorker> {
    const w = new ModelWorker(opts);
    await waitForStart(
      opts.initializeTimeoutMs,
      () =>
        new Error(
          `initialize() did not finish within ${opts.initializeTimeoutMs} ms (model parameter initialize_timeout_ms)`,
        ),
      () => {
        w.endReason = 'initialize() timed out';
        void w.worker.terminate();
      },
      (waiter) => (w.starting = waiter),
    );
    // Idle workers do not keep the process alive; an execution in flight does.
    w.worker.unref();
    return w;
  }

  get isAlive(): boolean {
    return this.alive;
  }

  /** Posts a batch; resolves with the worker's answer, rejects if the thread ends first. */
  execute(requests: readonly BackendRequest[]): { posted: number; done: Promise<ExecuteDoneMessage> } {
    if (!this.alive)
      return {
        posted: nowNs(),
        done: Promise.reject(new Error(`${this.opts.label}: the worker thread is not running`)),
      };
    const keys: number[] = [];
    const watches: CancelWatch[] = [];
    const traced: number[] = [];
    const wire = this.packRequests(requests, keys, watches, traced);
    const id = this.nextId++;
    const light = this.inFlight.length === 0;
    const done = new Promise<ExecuteDoneMessage>((resolve, reject) =>
      this.inFlight.push(new PendingExecute(id, resolve, reject, keys, watches)),
    );
    if (traced.length > 0) {
      // The batch's traces are parents of its infer() calls while execute() runs.
      const forget = (): void => {
        for (const tr of traced) this.traces.delete(tr);
      };
      done.then(forget, forget);
    }
    if (light) {
      this.worker.ref();
      this.watch(id);
    }
    const posted = nowNs();
    const msg: ExecuteMessage = { t: 'x', id, at: posted, light, requests: wire };
    this.worker.postMessage(msg satisfies ToWorker);
    for (const w of watches) w.sendIfAborted();
    return { posted, done };
  }

  /** One SharedArrayBuffer for the batch's inputs (inputs already in shared memory stay where they are). */
  private packRequests(
    requests: readonly BackendRequest[],
    keys: number[],
    watches: CancelWatch[],
    traced: number[],
  ): WireRequest[] {
    let total = 0;
    for (const r of requests) for (const t of r.inputs) if (!canShare(t)) total += align8(t.data.byteLength);
    const sab = new SharedArrayBuffer(total);
    const bytes = new Uint8Array(sab);
    let at = 0;
    const out = new Array<WireRequest>(requests.length);
    for (let i = 0; i < requests.length; i++) {
      const r = requests[i]!;
      const inputs = new Array<WireTensor>(r.inputs.length);
      for (let k = 0; k < r.inputs.length; k++) {
        const t = r.inputs[k]!;
        if (canShare(t)) {
          inputs[k] = {
            n: t.name,
            d: t.datatype,
            s: t.shape,
            b: t.data.buffer,
            o: t.data.byteOffset,
            l: t.data.byteLength,
          };
          continue;
        }
        bytes.set(t.data, at);
        inputs[k] = { n: t.name, d: t.datatype, s: t.shape, b: sab, o: at, l: t.data.byteLength };
        at += align8(t.data.byteLength);
      }
      let k: number | undefined;
      let c: number | undefined;
      if (r.responseSender) {
        k = this.nextStreamKey++;
        this.streams.set(k, new OpenStream(k, r, this, r.trace === undefined ? undefined : this.traces));
        keys.push(k);
      } else if (r.signal) {
        c = this.nextStreamKey++;
        watches.push(new CancelWatch(c, r.signal, this));
      }
      let tr: number | undefined;
      if (r.trace !== undefined) {
        tr = r.trace.id;
        if (!r.responseSender) {
          this.traces.set(tr, r.trace);
          traced.push(tr);
        }
      }
      out[i] = {
        id: r.id,
        inputs,
        requestedOutputs: r.requestedOutputs,
        parameters: r.parameters,
        batchSize: r.batchSize,
        correlationId: r.correlationId,
        flags: r.flags,
        k,
        c,
        tr,
      };
    }
    return out;
  }

  /** Tells the worker that the client of the request with this key went away. */
  cancelKey(key: number): void {
    if (this.alive) this.worker.postMessage({ t: 'c', k: key } satisfies ToWorker);
  }

  /** Forgets streams the server ends itself (their execute() failed). */
  private dropStreams(keys: readonly number[]): void {
    for (const k of keys) {
      const open = this.streams.get(k);
      if (!open) continue;
      this.streams.delete(k);
      open.detach();
    }
  }

  private onStreamResponse(msg: StreamResponseMessage): void {
    const open = this.streams.get(msg.k);
    if (!open) {
      this.opts.logger.warn({ key: msg.k }, 'a response for a request that already ended was dropped');
      return;
    }
    if (msg.final) {
      this.streams.delete(msg.k);
      open.detach();
    }
    const sender = open.request.responseSender!;
    sender.send(msg.r === undefined ? undefined : fromWireResponse(this.opts.init.args.modelName, msg.r), msg.final);
  }

  /**
   * Arms the watchdog for the execution at the head of the queue. The worker
   * times out an execute() that does not settle by itself; one that never
   * lets its thread return to the event loop can only be stopped from here.
   */
  private watch(id: number): void {
    this.watchedId = id;
    const ms = this.opts.init.executeTimeoutMs + BLOCKED_GRACE_MS;
    if (this.watchdog) this.watchdog.refresh();
    else {
      this.watchdog = setTimeout(() => this.onWatchdog(), ms);
      this.watchdog.unref();
    }
  }

  private onWatchdog(): void {
    const head = this.inFlight[0];
    if (!head || head.id !== this.watchedId || !this.alive) return;
    this.endReason = `execute() blocked the worker thread for more than ${this.opts.init.executeTimeoutMs} ` +
      `ms (model parameter execute_timeout_ms); the thread was stopped and is restarted`;
    this.opts.logger.error({}, `${this.opts.label}: ${this.endReason}`);
    void this.worker.terminate();
  }

  private onMessage(msg: FromWorker): void {
    switch (msg.t) {
      case 's':
        this.onStreamResponse(msg);
        return;
      case 'd': {
        const head = this.inFlight[0];
        if (!head || head.id !== msg.id) return;
        this.inFlight.shift();
        head.settled();
        if ('error' in msg) this.dropStreams(head.keys);
        const next = this.inFlight[0];
        if (next) this.watch(next.id);
        else {
          clearTimeout(this.watchdog);
          this.watchdog = undefined;
          this.worker.unref();
        }
        head.resolve(msg);
        return;
      }
      case 'i':
        this.serveInfer(msg);
        return;
      case 'ready':
        this.starting?.resolve();
        this.starting = undefined;
        return;
      case 'init-error':
        this.endReason = msg.message;
        this.starting?.reject(new Error(msg.message));
        this.starting = undefined;
        void this.worker.terminate();
        return;
      case 'closed':
        this.onClosed?.();
        return;
      case 'config':
        return;
    }
  }

  private serveInfer(msg: InferCallMessage): void {
    const inputs: Tensor[] = msg.inputs.map((w) => ({
      name: w.n,
      datatype: w.d,
      shape: w.s,
      data: new Uint8Array(w.b, w.o, w.l),
    }));
    const trace = msg.trace === undefined ? undefined : this.traces.get(msg.trace)?.spawn();
    let call = this.opts.server.infer({
      model: msg.model,
      version: msg.version,
      id: msg.requestId,
      inputs,
      outputs: msg.outputs?.map((name) => ({ name })),
      parameters: msg.parameters,
      trace,
    });
    if (trace !== undefined) call = call.finally(() => trace.end());
    call
      .then(
        (r) => {
          if (!this.alive) return;
          const reply: ToWorker = {
            t: 'r',
            id: msg.id,
            modelName: r.modelName,
            modelVersion: r.modelVersion,
            outputs: shareTensors(r.outputs),
          };
          if (r.parameters && Object.keys(r.parameters).length > 0)
            (reply as { parameters?: unknown }).parameters = r.parameters;
          this.worker.postMessage(reply);
        },
        (err: unknown) => {
          if (!this.alive) return;
          const e = err instanceof NereidError ? err : undefined;
          const reply: ToWorker = {
            t: 'r',
            id: msg.id,
            error: err instanceof Error ? err.message : String(err),
            code: e?.code ?? 'NRD_INTERNAL',
            errorClass: e?.errorClass ?? 'INTERNAL',
          };
          this.worker.postMessage(reply);
        },
      );
  }

  private onExit(code: number): void {
    if (!this.alive) return;
    this.alive = false;
    clearTimeout(this.watchdog);
    const reason = this.endReason ?? `the worker thread exited with code ${code}`;
    const err = new Error(`${this.opts.label}: ${reason}`);
    this.starting?.reject(new Error(reason));
    this.starting = undefined;
    for (const p of this.inFlight.splice(0)) {
      p.settled();
      this.dropStreams(p.keys);
      p.reject(err);
    }
    // Requests whose execute() had returned, still streaming.
    const open = [...this.streams.values()];
    this.streams.clear();
    for (const o of open) {
      o.detach();
      o.request.responseSender!.send(
        { error: Errors.modelExecution(this.opts.init.args.modelName, err.message) },
        true,
      );
    }
    this.onClosed?.();
    if (!this.closing) this.onUnexpectedExit?.({ code }, err);
  }

  /** Runs finalize() and ends the thread; stops it if finalize() takes longer than graceMs. */
  async close(graceMs: number): Promise<void> {
    if (!this.alive) return;
    this.closing = true;
    this.worker.ref();
    const closed = new Promise<void>((resolve) => (this.onClosed = resolve));
    this.worker.postMessage({ t: 'close' } satisfies ToWorker);
    const timer = setTimeout(() => {
      this.opts.logger.warn(
        {},
        `${this.opts.label}: finalize() did not finish within ${graceMs} ms; stopping the thread`,
      );
      this.onClosed?.();
    }, graceMs);
    await closed;
    clearTimeout(timer);
    await this.worker.terminate();
    await this.exited;
  }
}
