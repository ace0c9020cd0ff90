/**
 * A request on its way through a scheduler. It is completed exactly once,
 * and completing it is where its request-level statistics are recorded.
 */
import type { BackendRequest, BackendResponse } from '../backends/backend.js';
import type { NereidError } from '../errors.js';
import type { FailureReason, ModelVersionStatistics } from '../types/statistics.js';
import type { CancellationSignal } from '../types/cancellation.js';
import type { RequestTrace, StepTimingsSink } from '../types/api.js';

/** A traced request entered a scheduler's queue (with TENSORS, its inputs as queued). */
export function traceQueued(trace: RequestTrace, request: BackendRequest, ns: bigint): void {
  trace.stamp('QUEUE_START', ns);
  if (trace.tensors) for (const t of request.inputs) trace.tensor('TENSOR_QUEUE_INPUT', t);
}

export class ScheduledRequest {
  /** hrtime (ns) when the core accepted the request. */
  readonly receivedNs: bigint;
  /** hrtime (ns) when it entered the scheduler queue. */
  enqueueNs: bigint;
  /** hrtime (ns) after which it expires in the queue; 0n: never. */
  deadlineNs: bigint;
  done = false;
  /**
   * Handed to a backend's execute(). From then on the backend owns the
   * request and its statistics are recorded from what execute() reports,
   * even if the client goes away (Triton counts such a request as the
   * backend reports it, not as cancelled).
   */
  executing = false;
  /** Told the durations on success (the ensemble step's parent), if any. */
  stepTimings: StepTimingsSink | undefined = undefined;

  constructor(
    readonly request: BackendRequest,
    /** Priority level (1 = highest); 0 = the model's default. */
    readonly priority: number,
    /** Queue timeout from the request, µs (0: none). Schedulers apply their policy to it. */
    readonly timeoutUs: number,
    readonly stats: ModelVersionStatistics,
    private readonly onDone: (response: BackendResponse | undefined, error: NereidError | undefined) => void,
    readonly signal: CancellationSignal | undefined,
  ) {
    this.receivedNs = process.hrtime.bigint();
    this.enqueueNs = this.receivedNs;
    this.deadlineNs = 0n;
  }

  /** Success: records the request's statistics with its batch's compute times. */
  succeed(
    response: BackendResponse,
    queueNs: number,
    computeInputNs: number,
    computeInferNs: number,
    computeOutputNs: number,
  ): void {
    if (this.done) return;
    this.done = true;
    const requestNs = Number(process.hrtime.bigint() - this.receivedNs);
    this.stats.recordSuccess(requestNs, queueNs, computeInputNs, computeInferNs, computeOutputNs);
    this.stepTimings?.stepSucceeded(queueNs, computeInputNs, computeInferNs, computeOutputNs);
    this.onDone(response, undefined);
  }

  fail(error: NereidError, reason: FailureReason): void {
    if (this.done) return;
    this.done = true;
    this.stats.recordFailure(reason, Number(process.hrtime.bigint() - this.receivedNs));
    this.onDone(undefined, error);
  }
}
