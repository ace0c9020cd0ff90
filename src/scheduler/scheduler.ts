/**
 * What every scheduler offers the core, and the one place where a batch is
 * handed to an instance and its execution statistics are recorded.
 */
import type { BackendInstance, BackendRequest, BackendResponse, ExecutionTimer } from '../backends/backend.js';
import { Errors, NereidError, asNereidError } from '../errors.js';
import type { ModelVersionStatistics } from '../types/statistics.js';
import type { RequestTrace } from '../types/api.js';
import type { BatchingReport } from '../types/batching.js';
import type { ScheduledRequest } from './scheduled-request.js';

export interface Scheduler {
  /** Takes a request; completes it (now or later) exactly once. */
  enqueue(item: ScheduledRequest): void;
  /** Requests accepted but not yet executing. */
  readonly pendingCount: number;
  /** true when a new request would be refused for a full queue (schedulers with bounded queues). */
  readonly full?: boolean;
  /**
   * Called while requests are refused for a full queue: takes in executions
   * the instances finished whose notices are still on their way
   * (SchedulingHooks.collectFinished), so that they are answered, and the
   * instances given their next batch, without waiting for the flood to pass.
   */
  collectFinished?(): void;
  /** Requests executing now. */
  readonly executingCount: number;
  /** Batching schedulers: the delay in effect and the batches sent by reason (the metrics read it). */
  readonly batching?: BatchingReport;
  /** Sequences started and not yet ended (sequence batcher): the model must stay loaded meanwhile. */
  readonly openSequences?: number;
  /** Resolves when nothing is queued or executing. New requests may still arrive unless the core stops them. */
  drain(): Promise<void>;
}

/** One execution instance as schedulers see it. */
export class ModelInstance {
  busy = false;
  /** Executions handed to the backend and not yet finished. */
  inFlight = 0;
  /** Most executions the backend takes at once (SchedulingHooks.maxInFlight). */
  readonly depth: number;
  /** Batches the dynamic batcher may hand it at once (SchedulingHooks.batchSlots, within depth). */
  readonly batchSlots: number;
  constructor(
    readonly name: string,
    readonly backend: BackendInstance,
    /** Loaded but never given requests (instance_group passive). */
    readonly passive = false,
  ) {
    this.depth = Math.max(1, Math.floor(backend.scheduling?.maxInFlight ?? 1));
    this.batchSlots = Math.max(1, Math.min(this.depth, Math.floor(backend.scheduling?.batchSlots ?? 2)));
  }
}

class StageTimer implements ExecutionTimer {
  inputEndNs = 0n;
  inferEndNs = 0n;
  waitNs = 0;
  inputDone(atNs?: bigint): void {
    this.inputEndNs = atNs ?? process.hrtime.bigint();
  }
  inferDone(atNs?: bigint): void {
    this.inferEndNs = atNs ?? process.hrtime.bigint();
  }
  waited(ns: number): void {
    if (ns > 0) this.waitNs += ns;
  }
}

/** A traced request's execution, at the times the batch's stages ended (with TENSORS, its outputs). */
function traceCompute(
  trace: RequestTrace,
  start: bigint,
  inputEnd: bigint,
  inferEnd: bigint,
  end: bigint,
  response: BackendResponse | undefined,
): void {
  trace.stamp('COMPUTE_START', start);
  trace.stamp('COMPUTE_INPUT_END', inputEnd);
  trace.stamp('COMPUTE_OUTPUT_START', inferEnd);
  trace.stamp('COMPUTE_END', end);
  if (trace.tensors && response?.outputs !== undefined) {
    for (const t of response.outputs) trace.tensor('TENSOR_BACKEND_OUTPUT', t);
  }
}

/** What executeBatch needs of each request of a batch (a ScheduledRequest, or a stand-in for one). */
export type BatchItem = Pick<ScheduledRequest, 'request' | 'enqueueNs' | 'executing' | 'succeed' | 'fail'>;

/**
 * Executes `items` as one batch on `instance`, records the execution and
 * completes every request. Never rejects.
 */
export async function executeBatch(
  instance: ModelInstance,
  items: readonly BatchItem[],
  batchSize: number,
  stats: ModelVersionStatistics,
  modelName: string,
): Promise<void> {
  const startNs = process.hrtime.bigint();
  const requests: BackendRequest[] = new Array(items.length);
  for (let i = 0; i < items.length; i++) {
    const item = items[i]!;
    item.executing = true;
    requests[i] = item.request;
  }
  const timer = new StageTimer();
  let responses: BackendResponse[] | undefined;
  let failure: NereidError | undefined;
  try {
    responses = await instance.backend.execute(requests, timer);
    if (!Array.isArray(responses) || responses.length !== items.length) {
      failure = Errors.modelExecution(
        modelName,
        `backend returned ${Array.isArray(responses) ? responses.length : 'no'} responses for ${items.length} requests`,
      );
    }
  } catch (err) {
    const e = asNereidError(err);
    failure = e.code === 'NRD_INTERNAL' ? Errors.modelExecution(modelName, e.message) : e;
  }
  const endNs = process.hrtime.bigint();
  const inputEnd = timer.inputEndNs || startNs;
  const inferEnd = timer.inferEndNs || endNs;
  // A wait inside the backend moves from compute_input to queue time.
  const waitNs = Math.min(timer.waitNs, Number(inputEnd - startNs));
  const inputNs = Number(inputEnd - startNs) - waitNs;
  const inferNs = Number(inferEnd - inputEnd);
  const outputNs = Number(endNs - inferEnd);
  if (failure) {
    for (const item of items) {
      const trace = item.request.trace;
      if (trace !== undefined) traceCompute(trace, startNs, inputEnd, inferEnd, endNs, undefined);
      item.fail(failure, 'BACKEND');
    }
    return;
  }
  stats.recordExecution(batchSize, items.length, inputNs, inferNs, outputNs);
  for (let i = 0; i < items.length; i++) {
    const item = items[i]!;
    const response = responses![i]!;
    const trace = item.request.trace;
    if (trace !== undefined) traceCompute(trace, startNs, inputEnd, inferEnd, endNs, response);
    if (response.error) item.fail(response.error, 'BACKEND');
    else item.succeed(response, Number(startNs - item.enqueueNs) + waitNs, inputNs, inferNs, outputNs);
  }
}
