/** Test doubles for the dynamic batcher: an instance that records batches and finishes them on command. */
import { type MessageInitShape, create } from '@bufbuild/protobuf';
import type {
  BackendInstance,
  BackendRequest,
  BackendResponse,
  SchedulingHooks,
} from '../../src/backends/backend.js';
import { ModelVersionStatistics } from '../../src/types/statistics.js';
import type { NereidError } from '../../src/errors.js';
import {
  type ModelDynamicBatching,
  ModelDynamicBatchingSchema,
  ModelQueuePolicySchema,
  ModelQueuePolicy_TimeoutAction,
} from '../../src/gen/model_config_pb.js';
import { DynamicBatcher } from '../../src/scheduler/dynamic-batcher.js';
import { ScheduledRequest } from '../../src/scheduler/scheduled-request.js';
import { ModelInstance } from '../../src/scheduler/scheduler.js';
import type { Tensor } from '../../src/tensor/tensor.js';

/** Holds every batch it receives until the test finishes it. */
export class GatedInstance implements BackendInstance {
  readonly batches: string[][] = [];
  /** Times the scheduler asked for finished executions (collectFinished). */
  collected = 0;
  /** What spreadBatches answers. */
  spread = false;
  /** How often the batcher asked spreadBatches. */
  spreadAsked = 0;
  readonly scheduling: SchedulingHooks;
  /** maxInFlight and batchSlots (undefined: the default) of its SchedulingHooks. */
  constructor(maxInFlight = 1, batchSlots?: number) {
    this.scheduling = {
      maxInFlight,
      ...(batchSlots !== undefined ? { batchSlots } : {}),
      collectFinished: () => {
        this.collected++;
      },
      spreadBatches: () => {
        this.spreadAsked++;
        return this.spread;
      },
    };
  }
  private readonly gates: Array<() => void> = [];
  private arrivals: Array<() => void> = [];

  execute(requests: readonly BackendRequest[]): Promise<BackendResponse[]> {
    this.batches.push(requests.map((r) => r.id));
    const arrivals = this.arrivals;
    this.arrivals = [];
    for (const a of arrivals) a();
    return new Promise((resolve) => {
      this.gates.push(() => resolve(requests.map((r) => ({ outputs: [], parameters: { id: r.id } }))));
    });
  }

  /** Finishes the oldest running batch. */
  finishOne(): void {
    const gate = this.gates.shift();
    if (!gate) throw new Error('no batch is running');
    gate();
  }

  get running(): number {
    return this.gates.length;
  }

  /** Resolves once `n` batches have arrived in total. */
  async untilBatches(n: number): Promise<void> {
    while (this.batches.length < n) await new Promise<void>((r) => this.arrivals.push(r));
  }

  async close(): Promise<void> {}
}

export function tensor(name: string, shape: number[]): Tensor {
  const count = shape.reduce((a, b) => a * b, 1);
  return { name, datatype: 'FP32', shape, data: new Uint8Array(count * 4) };
}

/** A request with input INPUT0 shaped [batch, ...dims] (plus any extra inputs). */
export function request(id: string, batch = 1, dims: number[] = [4], extra: Tensor[] = []): BackendRequest {
  return {
    id,
    inputs: [tensor('INPUT0', [batch, ...dims]), ...extra],
    requestedOutputs: [],
    parameters: {},
    batchSize: batch,
    correlationId: 0n,
    flags: 0,
  };
}

export interface Outcome {
  id: string;
  response?: BackendResponse;
  error?: NereidError;
}

/** A batcher over gated instances, with helpers to submit requests and collect outcomes in completion order. */
export class Harness {
  readonly stats = new ModelVersionStatistics('m', '1');
  readonly instances: GatedInstance[];
  readonly batcher: DynamicBatcher;
  readonly outcomes: Outcome[] = [];
  private readonly waiters = new Map<string, (o: Outcome) => void>();
  private readonly settled = new Map<string, Outcome>();

  constructor(
    batching: MessageInitShape<typeof ModelDynamicBatchingSchema>,
    opts: {
      maxBatchSize?: number;
      instances?: number;
      ragged?: string[];
      coalesce?: boolean;
      depth?: number;
      batchSlots?: number;
      spread?: boolean;
    } = {},
  ) {
    this.instances = Array.from({ length: opts.instances ?? 1 }, () => {
      const i = new GatedInstance(opts.depth, opts.batchSlots);
      i.spread = opts.spread === true;
      return i;
    });
    const maxBatchSize = opts.maxBatchSize ?? 8;
    const config: ModelDynamicBatching = create(ModelDynamicBatchingSchema, batching);
    if (config.preferredBatchSize.length === 0) config.preferredBatchSize = [maxBatchSize];
    this.batcher = new DynamicBatcher(
      'm',
      this.instances.map((b, i) => new ModelInstance(`m_0_${i}`, b)),
      this.stats,
      {
        maxBatchSize,
        batching: config,
        raggedInputs: new Set(opts.ragged ?? []),
        coalesceArrivals: opts.coalesce === true,
      },
    );
  }

  submit(
    req: BackendRequest,
    opts: { priority?: number; timeoutUs?: number; signal?: AbortSignal } = {},
  ): ScheduledRequest {
    const item = new ScheduledRequest(
      req,
      opts.priority ?? 0,
      opts.timeoutUs ?? 0,
      this.stats,
      (response, error) => {
        const o: Outcome = { id: req.id };
        if (response) o.response = response;
        if (error) o.error = error;
        this.outcomes.push(o);
        this.settled.set(req.id, o);
        this.waiters.get(req.id)?.(o);
      },
      opts.signal,
    );
    this.batcher.enqueue(item);
    return item;
  }

  /** Resolves with the outcome of request `id` once it has one. */
  outcome(id: string): Promise<Outcome> {
    const o = this.settled.get(id);
    if (o) return Promise.resolve(o);
    return new Promise((resolve) => this.waiters.set(id, resolve));
  }

  get order(): string[] {
    return this.outcomes.map((o) => o.id);
  }
}

export function policy(p: {
  action?: 'REJECT' | 'DELAY';
  timeoutUs?: number;
  allowOverride?: boolean;
  maxQueueSize?: number;
}) {
  return create(ModelQueuePolicySchema, {
    timeoutAction: p.action === 'DELAY' ? ModelQueuePolicy_TimeoutAction.DELAY : ModelQueuePolicy_TimeoutAction.REJECT,
    defaultTimeoutMicroseconds: BigInt(p.timeoutUs ?? 0),
    allowTimeoutOverride: p.allowOverride ?? false,
    maxQueueSize: p.maxQueueSize ?? 0,
  });
}

export const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

/** Spins the event loop until hrtime passes `ns`. */
export async function until(ns: bigint): Promise<void> {
  while (process.hrtime.bigint() <= ns) await new Promise((r) => setTimeout(r, 1));
}
