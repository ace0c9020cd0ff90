/**
 * Triton's default scheduler: each request runs alone on the next free
 * instance; while all are busy, requests wait in arrival order.
 */
import type { ModelVersionStatistics } from '../core/statistics.js';
import { Fifo } from './fifo.js';
import type { ScheduledRequest } from './scheduled-request.js';
import { type ModelInstance, type Scheduler, executeBatch } from './scheduler.js';

export class DefaultScheduler implements Scheduler {
  private readonly queue = new Fifo<ScheduledRequest>();
  private readonly free: ModelInstance[];
  private executing = 0;
  private drainWaiters: Array<() => void> = [];

  constructor(
    private readonly modelName: string,
    instances: readonly ModelInstance[],
    private readonly stats: ModelVersionStatistics,
  ) {
    this.free = [...instances];
  }

  get pendingCount(): number {
    return this.queue.length;
  }

  get executingCount(): number {
    return this.executing;
  }

  enqueue(item: ScheduledRequest): void {
    item.enqueueNs = process.hrtime.bigint();
    const instance = this.free.pop();
    if (instance) this.run(instance, item);
    else this.queue.push(item);
  }

  drain(): Promise<void> {
    if (this.queue.length === 0 && this.executing === 0) return Promise.resolve();
    return new Promise((resolve) => this.drainWaiters.push(resolve));
  }

  private run(instance: ModelInstance, item: ScheduledRequest): void {
    this.executing += 1;
    instance.busy = true;
    void executeBatch(instance, [item], item.request.batchSize, this.stats, this.modelName).then(() => this.release(instance));
  }

  private release(instance: ModelInstance): void {
    this.executing -= 1;
    instance.busy = false;
    let next = this.queue.shift();
    while (next && next.done) next = this.queue.shift(); // cancelled while queued
    if (next) {
      this.run(instance, next);
      return;
    }
    this.free.push(instance);
    if (this.executing === 0 && this.drainWaiters.length > 0) {
      const waiters = this.drainWaiters;
      this.drainWaiters = [];
      for (const w of waiters) w();
    }
  }
}
