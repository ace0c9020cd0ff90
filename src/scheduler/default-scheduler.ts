/**
 * Triton's default scheduler: each request runs alone on the next free
 * instance; while all are busy, requests wait in arrival order.
 *
 * An instance whose backend takes more than one execution at once
 * (SchedulingHooks.maxInFlight, e.g. onnxruntime's session thread) is given
 * the next request while it still runs the previous one, so the request
 * starts as soon as the instance is free instead of after a round trip
 * through the event loop. Requests still start in arrival order, each alone.
 */
import type { ModelVersionStatistics } from '../types/statistics.js';
import { Fifo } from './fifo.js';
import { type ScheduledRequest, traceQueued } from './scheduled-request.js';
import { type ModelInstance, type Scheduler, executeBatch } from './scheduler.js';

export class DefaultScheduler implements Scheduler {
  private readonly queue = new Fifo<ScheduledRequest>();
  private readonly instances: readonly ModelInstance[];
  /** Instances with nothing in flight, the most recently freed last. */
  private readonly idle: ModelInstance[];
  private executing = 0;
  private drainWaiters: Array<() => void> = [];

  constructor(
    private readonly modelName: string,
    instances: readonly ModelInstance[],
    private readonly stats: ModelVersionStatistics,
  ) {
    this.instances = [...instances];
    this.idle = [...instances];
  }

  get pendingCount(): number {
    return this.queue.length;
  }

  get executingCount(): number {
    return this.executing;
  }

  enqueue(item: ScheduledRequest): void {
    item.enqueueNs = process.hrtime.bigint();
    if (item.request.trace !== undefined) traceQueued(item.request.trace, item.request, item.enqueueNs);
    const instance = this.pick();
    if (instance) this.run(instance, item);
    else this.queue.push(item);
  }

  drain(): Promise<void> {
    if (this.queue.length === 0 && this.executing === 0) return Promise.resolve();
    return new Promise((resolve) => this.drainWaiters.push(resolve));
  }

  /**
   * An idle instance (the most recently used, whose thread is likeliest awake), else the least loaded one with room.
   */
  private pick(): ModelInstance | undefined {
    const idle = this.idle.pop();
    if (idle) return idle;
    let best: ModelInstance | undefined;
    for (const i of this.instances) {
      if (i.inFlight < i.depth && (best === undefined || i.inFlight < best.inFlight)) best = i;
    }
    return best;
  }

  private run(instance: ModelInstance, item: ScheduledRequest): void {
    this.executing += 1;
    instance.inFlight += 1;
    instance.busy = true;
    void executeBatch(instance, [item], item.request.batchSize, this.stats, this.modelName).then(() =>
      this.release(instance),
    );
  }

  private release(instance: ModelInstance): void {
    this.executing -= 1;
    instance.inFlight -= 1;
    let next = this.queue.shift();
    while (next && next.done) next = this.queue.shift(); // cancelled while queued
    if (next) {
      this.run(instance, next);
      return;
    }
    if (instance.inFlight > 0) return;
    instance.busy = false;
    this.idle.push(instance);
    if (this.executing === 0 && this.drainWaiters.length > 0) {
      const waiters = this.drainWaiters;
      this.drainWaiters = [];
      for (const w of waiters) w();
    }
  }
}
