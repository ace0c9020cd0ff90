/**
 * Gives memory back after a burst of large request bodies.
 *
 * A refused gzip bomb or a megabyte of deeply nested JSON leaves its buffers
 * as garbage, and V8 collects garbage when the program allocates, not when it
 * idles: a server that goes quiet after a storm of hostile requests can keep
 * hundreds of MiB resident for as long as it stays quiet. The frontends note
 * the bytes of each body they read or inflate; once enough have passed since
 * the last collection, no new body has come for a moment and the event loop
 * has been mostly idle meanwhile, one full collection runs. Under steady traffic the quiet moment never comes and V8's
 * own schedule applies; the collection only ever runs on an idle server.
 */
import { type EventLoopUtilization, performance } from 'node:perf_hooks';
import { type Collect, fullCollection, memoryReducingCollection } from '../core/garbage-collection.js';

export { type Collect, fullCollection, memoryReducingCollection } from '../core/garbage-collection.js';

const MiB = 1024 * 1024;

export interface MemoryReclaimerOptions {
  /** Body bytes since the last collection that make the next quiet moment collect (default 16 MiB). */
  readonly thresholdBytes?: number;
  /** How long no body may arrive before the collection runs (default 1 s). */
  readonly quietMs?: number;
  /** The collection itself (default: V8's full collection, looked up when first needed). */
  readonly collect?: Collect;
  /** The second collection (default: `collect` when given, else a memory-reducing one). */
  readonly settleCollect?: Collect;
  /**
   * Whether the event loop was busy during the quiet time (default: its utilisation
   * over that time above a tenth): bodies read just before may still be parsing.
   */
  readonly busy?: (since: EventLoopUtilization) => boolean;
  /**
   * How long after the first collection, with no body in between, the second one runs
   * (default 6 s: V8 reads the allocation rate over the last 5 s); 0: no second collection.
   */
  readonly settleMs?: number;
}

const BUSY_UTILIZATION = 0.1;

function loopWasBusy(since: EventLoopUtilization): boolean {
  return performance.eventLoopUtilization(since).utilization > BUSY_UTILIZATION;
}

export class MemoryReclaimer {
  private readonly thresholdBytes: number;
  private readonly quietMs: number;
  private readonly collect: Collect | undefined;
  private readonly settleCollect: Collect | undefined;
  private readonly busy: (since: EventLoopUtilization) => boolean;
  private readonly settleMs: number;
  private pending = 0;
  private armedAt: EventLoopUtilization | undefined;
  private lastNote = 0;
  private timer: NodeJS.Timeout | undefined;
  private settleTimer: NodeJS.Timeout | undefined;
  /** Collections run so far. */
  collections = 0;

  constructor(options: MemoryReclaimerOptions = {}) {
    this.thresholdBytes = options.thresholdBytes ?? 16 * MiB;
    this.quietMs = options.quietMs ?? 1000;
    this.collect = options.collect;
    this.settleCollect = options.settleCollect ?? options.collect;
    this.busy = options.busy ?? loopWasBusy;
    this.settleMs = options.settleMs ?? 6000;
  }

  /** Notes `bytes` of body buffers (read, inflated or refused part way) that are garbage once the request ends. */
  note(bytes: number): void {
    if (bytes <= 0) return;
    this.pending += bytes;
    this.lastNote = Date.now();
    if (this.pending >= this.thresholdBytes && this.timer === undefined) this.arm(this.quietMs);
  }

  /** Cancels a collection that is waiting. */
  stop(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    if (this.settleTimer !== undefined) clearTimeout(this.settleTimer);
    this.timer = undefined;
    this.settleTimer = undefined;
    this.pending = 0;
  }

  private arm(ms: number): void {
    this.armedAt = performance.eventLoopUtilization();
    this.timer = setTimeout(() => this.run(), ms);
    this.timer.unref();
  }

  private run(): void {
    this.timer = undefined;
    // A body came during the wait: the burst is not over, wait for the quiet again.
    const sinceLast = Date.now() - this.lastNote;
    if (sinceLast < this.quietMs) {
      this.arm(this.quietMs - sinceLast);
      return;
    }
    // Quiet, but still working through what came: its garbage is not all made yet.
    if (this.armedAt !== undefined && this.busy(this.armedAt)) {
      this.arm(this.quietMs);
      return;
    }
    this.pending = 0;
    this.collections++;
    (this.collect ?? fullCollection())?.();
    if (this.settleMs > 0) this.armSettle();
  }

  private armSettle(): void {
    if (this.settleTimer !== undefined) clearTimeout(this.settleTimer);
    const since = performance.eventLoopUtilization();
    this.settleTimer = setTimeout(() => {
      this.settleTimer = undefined;
      // Traffic came back (a body, or a busy loop): the allocation rate is not low, V8's own schedule applies.
      if (Date.now() - this.lastNote < this.settleMs || this.busy(since)) return;
      this.collections++;
      (this.settleCollect ?? memoryReducingCollection())?.();
    }, this.settleMs);
    this.settleTimer.unref();
  }
}

/** The process's one reclaimer: garbage collection is process-wide, so every frontend notes into it. */
export const processReclaimer = new MemoryReclaimer();
