/**
 * Per-model-version statistics, recorded once per stage. The statistics
 * extension serialises these numbers and the Prometheus metrics read the very
 * same ones (through `observer`), so the two never disagree.
 */
import type { ModelStatistics, StatDuration } from './api.js';
import { LatencyWindow } from './latency-window.js';

/** Why a request failed, as Prometheus' `reason` label spells it. */
export type FailureReason = 'REJECTED' | 'CANCELED' | 'BACKEND' | 'OTHER';

class Duration {
  count = 0;
  ns = 0;
  add(ns: number): void {
    this.count += 1;
    this.ns += ns;
  }
  toJSON(): StatDuration {
    return { count: this.count, ns: this.ns };
  }
}

class BatchStats {
  readonly computeInput = new Duration();
  readonly computeInfer = new Duration();
  readonly computeOutput = new Duration();
  constructor(readonly batchSize: number) {}
}

/** Receives every recorded event; the metrics module implements it. */
export interface StatisticsObserver {
  requestSucceeded(
    requestNs: number,
    queueNs: number,
    computeInputNs: number,
    computeInferNs: number,
    computeOutputNs: number,
  ): void;
  requestFailed(reason: FailureReason, requestNs: number): void;
  executed(batchSize: number, requestCount: number): void;
  /** A request answered from the response cache: success without execution. */
  cacheHit?(requestNs: number, queueNs: number, lookupNs: number): void;
  /** A cache miss's lookup and insertion time (the request itself is recorded by requestSucceeded). */
  cacheMissed?(missNs: number): void;
}

export class ModelVersionStatistics {
  readonly success = new Duration();
  readonly fail = new Duration();
  readonly queue = new Duration();
  readonly computeInput = new Duration();
  readonly computeInfer = new Duration();
  readonly computeOutput = new Duration();
  readonly cacheHit = new Duration();
  readonly cacheMiss = new Duration();
  inferenceCount = 0;
  executionCount = 0;
  /** ms since epoch of the last inference (0: never). */
  lastInference = 0;
  readonly failures: Record<FailureReason, number> = { REJECTED: 0, CANCELED: 0, BACKEND: 0, OTHER: 0 };
  /** Request latencies (successes, cache hits included) since the dashboard last looked. */
  readonly recentRequests = new LatencyWindow();
  /** Time to first token of streamed OpenAI responses since the dashboard last looked. */
  readonly recentFirstTokens = new LatencyWindow();
  private readonly batches = new Map<number, BatchStats>();
  private currentObserver: StatisticsObserver | undefined;
  /** Events kept for an observer attached later (warm-up runs before metrics attach). */
  private held: Array<(o: StatisticsObserver) => void> | undefined;
  private holding = false;

  constructor(
    readonly modelName: string,
    readonly version: string,
  ) {}

  get observer(): StatisticsObserver | undefined {
    return this.currentObserver;
  }

  /** Attaching an observer first hands it the events held for it. */
  set observer(next: StatisticsObserver | undefined) {
    this.currentObserver = next;
    if (next && this.held) {
      const held = this.held;
      this.held = undefined;
      for (const replay of held) replay(next);
    }
  }

  /** Keeps the events recorded from now on until an observer attaches, or until releaseEvents(). */
  holdEvents(): void {
    this.holding = true;
    this.held ??= [];
  }

  /** Stops keeping new events; those kept so far still go to the next observer. */
  releaseEvents(): void {
    this.holding = false;
  }

  private notify(event: (o: StatisticsObserver) => void): void {
    const o = this.currentObserver;
    if (o) event(o);
    else if (this.holding) this.held!.push(event);
  }

  /** One successful request: its end-to-end time, time queued and its batch's compute times. */
  recordSuccess(
    requestNs: number,
    queueNs: number,
    computeInputNs: number,
    computeInferNs: number,
    computeOutputNs: number,
  ): void {
    this.success.add(requestNs);
    this.recentRequests.add(requestNs);
    this.queue.add(queueNs);
    this.computeInput.add(computeInputNs);
    this.computeInfer.add(computeInferNs);
    this.computeOutput.add(computeOutputNs);
    if (this.currentObserver)
      this.currentObserver.requestSucceeded(requestNs, queueNs, computeInputNs, computeInferNs, computeOutputNs);
    else if (this.holding)
      this.notify((o) => o.requestSucceeded(requestNs, queueNs, computeInputNs, computeInferNs, computeOutputNs));
  }

  /**
   * A request answered from the response cache, as Triton counts it: a
   * success with its duration and queue time (until the lookup) and a
   * cache hit with the lookup time; no execution, no compute times.
   */
  recordCacheHit(requestNs: number, queueNs: number, lookupNs: number): void {
    this.success.add(requestNs);
    this.recentRequests.add(requestNs);
    this.queue.add(queueNs);
    this.cacheHit.add(lookupNs);
    this.observer?.cacheHit?.(requestNs, queueNs, lookupNs);
  }

  /** A cache miss: lookup plus insertion time, which also lengthens the request's duration. */
  recordCacheMiss(missNs: number): void {
    this.cacheMiss.add(missNs);
    this.success.ns += missNs;
    this.observer?.cacheMissed?.(missNs);
  }

  recordFailure(reason: FailureReason, requestNs: number): void {
    this.fail.add(requestNs);
    this.failures[reason] += 1;
    this.notify((o) => o.requestFailed(reason, requestNs));
  }

  /** One model execution of `batchSize` batch elements made of `requestCount` requests. */
  recordExecution(
    batchSize: number,
    requestCount: number,
    computeInputNs: number,
    computeInferNs: number,
    computeOutputNs: number,
  ): void {
    this.executionCount += 1;
    this.inferenceCount += batchSize;
    this.lastInference = Date.now();
    let b = this.batches.get(batchSize);
    if (!b) {
      b = new BatchStats(batchSize);
      this.batches.set(batchSize, b);
    }
    b.computeInput.add(computeInputNs);
    b.computeInfer.add(computeInferNs);
    b.computeOutput.add(computeOutputNs);
    if (this.currentObserver) this.currentObserver.executed(batchSize, requestCount);
    else if (this.holding) this.notify((o) => o.executed(batchSize, requestCount));
  }

  toJSON(): ModelStatistics {
    const batch_stats = [...this.batches.values()]
      .sort((a, b) => a.batchSize - b.batchSize)
      .map((b) => ({
        batch_size: b.batchSize,
        compute_input: b.computeInput.toJSON(),
        compute_infer: b.computeInfer.toJSON(),
        compute_output: b.computeOutput.toJSON(),
      }));
    return {
      name: this.modelName,
      version: this.version,
      last_inference: this.lastInference,
      inference_count: this.inferenceCount,
      execution_count: this.executionCount,
      inference_stats: {
        success: this.success.toJSON(),
        fail: this.fail.toJSON(),
        queue: this.queue.toJSON(),
        compute_input: this.computeInput.toJSON(),
        compute_infer: this.computeInfer.toJSON(),
        compute_output: this.computeOutput.toJSON(),
        cache_hit: this.cacheHit.toJSON(),
        cache_miss: this.cacheMiss.toJSON(),
      },
      response_stats: {},
      batch_stats,
      memory_usage: [],
    };
  }
}
