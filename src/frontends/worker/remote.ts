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
} from '../threads/wire.js';

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
}

interface Waiter {
  resolve(r: InferResponse): void;
  reject(e: NereidError): void;
}

export class RemoteServer {
  private nextId = 1;
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
  ) {
    port.on('message', (a: BridgeAnswer) => this.onAnswer(a));
    this.out = new Coalescer<BridgeRequest>(port, (items) => ({ t: 'batch', items }), () => this.refusals.clear());
  }

  /** Whether requests are traced now (they then go to the main thread whole). */
  get tracing(): boolean {
    return Atomics.load(this.shared, SharedSlot.Tracing) !== 0;
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
    const message: BridgeRequest = {
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
    return new Promise<InferResponse>((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
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
        w?.resolve(a.response as InferResponse);
        break;
      }
      case 'failed': {
        const w = this.waiting.get(a.id);
        this.waiting.delete(a.id);
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
