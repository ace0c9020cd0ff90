/**
 * A frontend thread's view of the server: model configurations (cached until the main thread says a model
 * changed), infer requests sent to the main thread with their tensors transferred, and the models whose queue is
 * full, refused here.
 */
import { receiveMessageOnPort, type MessagePort } from 'node:worker_threads';
import type { NereidError } from '../../errors.js';
import type { ModelConfig } from '../../gen/model_config_pb.js';
import type { Tensor } from '../../tensor/tensor.js';
import type { InferResponse, ParameterValue, RequestedOutput } from '../../types/api.js';
import type { CancellationSignal } from '../../types/cancellation.js';
import {
  admissionKey,
  Coalescer,
  type BridgeAnswer,
  type BridgeRequest,
  type ConfigAnswer,
  fromWireError,
  SharedSlot,
  transferableTensors,
  type WireLog,
  type WireTrace,
} from '../threads/wire.js';
import { BASE_HR, nowNs } from '../../trace/clock.js';

function wireTrace(t: ThreadTrace | undefined): WireTrace | undefined {
  if (t === undefined) return undefined;
  return {
    pick: t.pick,
    recvStart: t.recvStart,
    recvEnd: t.recvEnd,
    traceparent: t.traceparent,
    tracestate: t.tracestate,
    log: t.log,
  };
}

export interface RemoteInfer {
  readonly model: string;
  readonly version: string | undefined;
  readonly id: string;
  readonly inputs: readonly Tensor[];
  readonly outputs: readonly RequestedOutput[] | undefined;
  readonly parameters: Readonly<Record<string, ParameterValue>> | undefined;
  readonly signal: CancellationSignal;
  /**
   * `--auth-keys`: the client's address when the request carried a key. The main thread refuses the request (429)
   * if the address reached the failure limit after this thread admitted it.
   */
  readonly keyedAddress?: string | undefined;
  /** While requests may be traced (RemoteServer.traceFlags): what the main thread samples and traces it by. */
  readonly trace?: ThreadTrace | undefined;
}

/**
 * A request this thread serves while requests may be traced: its receive stamps and W3C context go with it, and
 * once its answer says it is traced, its send stamps follow (RemoteServer.sent). docs/tracing.md, "Frontend threads".
 */
export class ThreadTrace {
  /** The request's id on the bridge once its answer said it is traced; 0 before, or when it is not. */
  id = 0;
  recvEnd = NaN;
  sendStart = NaN;
  /** Whether the request went to the main thread (with this or whole), which then traces it if at all. */
  crossed = false;
  /** The request log is on: what its line says of the request, then of the reply (when it was written). */
  log: WireLog | undefined = undefined;
  status: number | string | undefined = undefined;
  bytesOut = 0;
  constructor(
    readonly pick: boolean | undefined,
    /** ns on the main thread's trace clock (RemoteServer.now). */
    readonly recvStart: number,
    readonly traceparent: string | undefined,
    readonly tracestate: string | undefined,
  ) {}
}

type InferMessage = Extract<BridgeRequest, { t: 'infer' }>;

interface Waiter {
  resolve(r: InferResponse): void;
  reject(e: NereidError): void;
  trace: ThreadTrace | undefined;
}

export class RemoteServer {
  private nextId = 1;
  private readonly clockShift: number;
  private readonly waiting = new Map<number, Waiter>();
  private readonly configs = new Map<string, ModelConfig>();
  private configGeneration = -1;
  private readonly full = new Map<string, NereidError>();
  private readonly out: Coalescer<BridgeRequest>;
  /** This turn's refusals by model and version: one message each carries the count (a flood is one item, not many). */
  private readonly refusals = new Map<string, Extract<BridgeRequest, { t: 'refused' }>>();

  constructor(
    private readonly port: MessagePort,
    private readonly sync: MessagePort,
    private readonly signal: Int32Array,
    private readonly shared: Int32Array,
    /** The main thread's trace clock base (BridgeEnds.clockBase). */
    clockBase: bigint = BASE_HR,
  ) {
    // hrtime is one monotonic clock for every thread of the process; each thread's clock.ts has its own base.
    this.clockShift = Number(BASE_HR - clockBase);
    port.on('message', (a: BridgeAnswer) => this.onAnswer(a));
    this.out = new Coalescer<BridgeRequest>(port, (items) => ({ t: 'batch', items }), () => this.refusals.clear());
  }

  /** TracingFlag bits: whether requests may be traced now, and how (0: not at all). */
  get traceFlags(): number {
    return Atomics.load(this.shared, SharedSlot.Tracing);
  }

  /** Now on the main thread's trace clock: ns since its BASE_HR. */
  now(): number {
    return nowNs() + this.clockShift;
  }

  /**
   * The reply of a request that may be traced went out (`end` NaN: it could not be). Crossed, and traced: the main
   * thread stamps it and ends its trace. Refused here before it crossed: the main thread may trace it still (early).
   */
  sent(trace: ThreadTrace, model: string, start: number, end: number): void {
    if (trace.id === 0 && trace.crossed) return;
    const { status, bytesOut } = trace;
    if (trace.id !== 0)
      this.out.send(
        trace.log === undefined
          ? { t: 'sent', id: trace.id, start, end }
          : { t: 'sent', id: trace.id, start, end, status, bytesOut },
      );
    else this.out.send({ t: 'early', model, trace: wireTrace(trace)!, start, end, status, bytesOut });
  }

  /** N > 0 while the threads pick every N-th infer request to trace (SharedSlot.TraceRate), else 0. */
  get traceRate(): number {
    return Atomics.load(this.shared, SharedSlot.TraceRate);
  }

  /** Counts an infer request for `rate` (all threads share the count): whether it is one to trace. */
  pickTrace(rate: number): boolean {
    return ((Atomics.add(this.shared, SharedSlot.TraceSeen, 1) >>> 0) + 1) % rate === 0;
  }

  /** The model's configuration, or undefined when the main thread must answer (unknown model, not ready, paging). */
  modelConfig(model: string, version: string | undefined): ModelConfig | undefined {
    const generation = Atomics.load(this.shared, SharedSlot.ConfigGeneration);
    if (generation !== this.configGeneration) {
      this.configs.clear();
      this.configGeneration = generation;
    }
    const key = admissionKey(model, version);
    const cached = this.configs.get(key);
    if (cached !== undefined) return cached;
    // Asked once per model and version (until a model changes): the thread waits for the main thread's answer.
    Atomics.store(this.signal, 0, 0);
    this.sync.postMessage({ model, version });
    Atomics.wait(this.signal, 0, 0);
    const answer = receiveMessageOnPort(this.sync)?.message as ConfigAnswer | undefined;
    if (answer === undefined || !('config' in answer)) return undefined;
    this.configs.set(key, answer.config);
    return answer.config;
  }

  /** The refusal for a full queue, while the main thread says the model's queue is full. */
  admissionError(model: string, version: string | undefined): NereidError | undefined {
    if (this.full.size === 0) return undefined;
    const key = admissionKey(model, version);
    const refused = this.full.get(key);
    if (refused === undefined) return undefined;
    const counted = this.refusals.get(key);
    if (counted !== undefined) counted.count++;
    else {
      const first: Extract<BridgeRequest, { t: 'refused' }> = { t: 'refused', model, version, count: 1 };
      this.refusals.set(key, first);
      this.out.send(first);
    }
    return refused;
  }

  infer(r: RemoteInfer, owned: ArrayBuffer | undefined): Promise<InferResponse> {
    const id = this.nextId++;
    const { tensors, transfer } = transferableTensors(r.inputs, owned);
    const message: { -readonly [K in keyof InferMessage]: InferMessage[K] } = {
      t: 'infer',
      id,
      model: r.model,
      version: r.version,
      requestId: r.id,
      inputs: tensors,
      outputs: r.outputs,
      parameters: r.parameters,
      keyedAddress: r.keyedAddress,
    };
    const trace = r.trace;
    // Only while requests may be traced does a request carry more (the others' messages keep their shape).
    if (trace !== undefined) {
      trace.crossed = true;
      message.trace = wireTrace(trace);
    }
    return new Promise<InferResponse>((resolve, reject) => {
      this.waiting.set(id, { resolve, reject, trace });
      this.out.send(message, transfer);
      r.signal.addEventListener('abort', () => {
        if (this.waiting.has(id)) this.out.send({ t: 'cancel', id });
      });
    });
  }

  private onAnswer(a: BridgeAnswer): void {
    switch (a.t) {
      case 'batch':
        for (const item of a.items) this.onAnswer(item);
        break;
      case 'answer': {
        const w = this.waiting.get(a.id);
        this.waiting.delete(a.id);
        if (a.traced === true && w?.trace !== undefined) w.trace.id = a.id;
        w?.resolve(a.response as InferResponse);
        break;
      }
      case 'failed': {
        const w = this.waiting.get(a.id);
        this.waiting.delete(a.id);
        if (a.traced === true && w?.trace !== undefined) w.trace.id = a.id;
        w?.reject(fromWireError(a.error));
        break;
      }
      case 'full':
        this.full.set(a.key, fromWireError(a.error));
        break;
      case 'open':
        this.full.delete(a.key);
        break;
    }
  }
}
