/**
 * The real DynamicBatcher driven in simulated time: a clock the test moves,
 * instances that take a set time per batch, closed-loop clients and
 * open-loop arrivals. Every event at one instant is one event-loop turn
 * (arrivals coalesce as in the server). Decisions are read from the batches
 * the instances received: their members, the instant they left, and why.
 */
import { create } from '@bufbuild/protobuf';
import type { BackendInstance, BackendRequest, BackendResponse } from '../../src/backends/backend.js';
import { ModelDynamicBatchingSchema, type ModelDynamicBatching } from '../../src/gen/model_config_pb.js';
import type { BatcherClock, Wake } from '../../src/scheduler/clock.js';
import { DynamicBatcher } from '../../src/scheduler/dynamic-batcher.js';
import { ScheduledRequest } from '../../src/scheduler/scheduled-request.js';
import { ModelInstance } from '../../src/scheduler/scheduler.js';
import { DISPATCH_REASONS, type DispatchReason } from '../../src/types/batching.js';
import { ModelVersionStatistics } from '../../src/types/statistics.js';
import type { BatchingPolicy } from '../../src/scheduler/batching-policy.js';
import { request } from './batching-fixtures.js';

export const US = 1000n;
/** Where simulated time starts (any instant works; not zero, as real hrtime is not). */
const ORIGIN = 5_000_000_000n;

class SimWake implements Wake {
  atNs = 0n;
  constructor(readonly fire: () => void) {}
  arm(atNs: bigint): void {
    if (this.atNs !== 0n && this.atNs <= atNs) return;
    this.atNs = atNs;
  }
  cancel(): void {
    this.atNs = 0n;
  }
}

export class SimClock implements BatcherClock {
  t = ORIGIN;
  private readonly wakes: SimWake[] = [];
  now(): bigint {
    return this.t;
  }
  wake(fire: () => void): Wake {
    const w = new SimWake(fire);
    this.wakes.push(w);
    return w;
  }
  /** The earliest armed wake-up, or undefined. */
  nextWake(): bigint | undefined {
    let next: bigint | undefined;
    for (const w of this.wakes) if (w.atNs !== 0n && (next === undefined || w.atNs < next)) next = w.atNs;
    return next;
  }
  fireDue(): void {
    for (const w of this.wakes) {
      if (w.atNs !== 0n && w.atNs <= this.t) {
        w.atNs = 0n;
        w.fire();
      }
    }
  }
}

export interface SimBatch {
  readonly ids: string[];
  /** µs after the simulation's start. */
  readonly atUs: number;
  readonly reason: DispatchReason;
}

interface SimEvent {
  readonly at: bigint;
  readonly seq: number;
  readonly run: () => void;
}

/**
 * One instance that runs one batch at a time, each for cost(n) µs (inline: at once, within the turn; with
 * `loopUs`, the event loop is busy for cost(n) meanwhile).
 */
class SimInstance implements BackendInstance {
  constructor(private readonly sim: Simulation) {}
  execute(requests: readonly BackendRequest[]): Promise<BackendResponse[]> {
    this.sim.recordBatch(requests.map((r) => r.id));
    if (this.sim.inline) {
      if (this.sim.loopUs !== undefined) this.sim.busy(this.sim.costUs(requests.length));
      return Promise.resolve(requests.map(() => ({ outputs: [] })));
    }
    return new Promise((resolve) => {
      this.sim.after(this.sim.costUs(requests.length), () => resolve(requests.map(() => ({ outputs: [] }))));
    });
  }
  async close(): Promise<void> {}
}

export interface SimOptions {
  policy: BatchingPolicy;
  delayUs: number;
  maxBatchSize?: number;
  preferred?: number[];
  priorityLevels?: number;
  /** Run time of a batch of n, µs. Default 20 + 2n. */
  costUs?: (n: number) => number;
  instances?: number;
  targetP99Ms?: number;
  logger?: { warn(obj: object, msg: string): void };
  /**
   * Batches run on the event loop (as small models' inline runs do): answered
   * before the next event of the same instant, which each is one socket's
   * callback of one turn (microtasks run between them).
   */
  inline?: boolean;
  /**
   * With `inline`: the event loop's own time per request (reading, decoding, answering), µs. The loop is then
   * one busy thread: a request's arrival and an inline run advance the clock, and arrivals due meanwhile wait
   * in their sockets until the loop is free, then are read in one turn.
   */
  loopUs?: number;
}

export class Simulation {
  readonly clock = new SimClock();
  readonly batches: SimBatch[] = [];
  readonly batcher: DynamicBatcher;
  /** Arrival and completion instants per request id, µs. */
  readonly arrivedUs = new Map<string, number>();
  readonly doneUs = new Map<string, number>();
  readonly costUs: (n: number) => number;
  readonly inline: boolean;
  readonly loopUs: number | undefined;
  private readonly events: SimEvent[] = [];
  private seq = 0;
  private lastCounts = [0, 0, 0, 0];
  private readonly stats = new ModelVersionStatistics('m', '1');

  constructor(opts: SimOptions) {
    this.costUs = opts.costUs ?? ((n) => 20 + 2 * n);
    this.inline = opts.inline === true;
    this.loopUs = opts.loopUs;
    const maxBatchSize = opts.maxBatchSize ?? 64;
    const batching: ModelDynamicBatching = create(ModelDynamicBatchingSchema, {
      maxQueueDelayMicroseconds: BigInt(opts.delayUs),
      preferredBatchSize: opts.preferred ?? [maxBatchSize],
      priorityLevels: BigInt(opts.priorityLevels ?? 0),
      defaultPriorityLevel: BigInt(opts.priorityLevels ?? 0),
    });
    const instances = Array.from({ length: opts.instances ?? 1 }, (_, i) => {
      return new ModelInstance(`m_0_${i}`, new SimInstance(this));
    });
    this.batcher = new DynamicBatcher('m', instances, this.stats, {
      maxBatchSize,
      batching,
      raggedInputs: new Set(),
      coalesceArrivals: true,
      policy: opts.policy,
      clock: this.clock,
      ...(opts.targetP99Ms === undefined ? {} : { targetP99Ms: opts.targetP99Ms }),
      ...(opts.logger === undefined ? {} : { logger: opts.logger }),
    });
  }

  /** µs since the start. */
  get nowUs(): number {
    return Number(this.clock.t - ORIGIN) / 1000;
  }

  /** Runs `fn` at `atUs` after the start. */
  at(atUs: number, fn: () => void): void {
    const at = ORIGIN + BigInt(Math.round(atUs * 1000));
    this.events.push({ at, seq: this.seq++, run: fn });
  }

  after(us: number, fn: () => void): void {
    this.at(this.nowUs + us, fn);
  }

  /** @internal The event loop works for `us` (loopUs): the clock moves on. */
  busy(us: number): void {
    this.clock.t += BigInt(Math.round(us * 1000));
  }

  /** Sends request `id` now; `onDone` hears its completion. */
  send(id: string, opts: { priority?: number; onDone?: () => void } = {}): void {
    if (this.loopUs !== undefined) this.busy(this.loopUs);
    this.arrivedUs.set(id, this.nowUs);
    const item = new ScheduledRequest(
      request(id),
      opts.priority ?? 0,
      0,
      this.stats,
      () => {
        this.doneUs.set(id, this.nowUs);
        opts.onDone?.();
      },
      undefined,
    );
    this.batcher.enqueue(item);
  }

  /**
   * `clients` closed loops: each sends, waits for its answer, then sends again after its own round trip;
   * from `fromUs` (plus the round trip) and, with `untilUs`, no new request after it.
   */
  closedLoop(clients: number, rttUs: (client: number) => number, prefix = 'c', fromUs = 0, untilUs = Infinity): void {
    for (let c = 0; c < clients; c++) {
      let n = 0;
      const next = (): void => {
        if (this.nowUs >= untilUs) return;
        this.send(`${prefix}${c}-${n++}`, { onDone: () => this.after(rttUs(c), next) });
      };
      this.at(fromUs + rttUs(c), next);
    }
  }

  /** Poisson arrivals at `perSecond` from `fromUs` to `toUs`. */
  poisson(perSecond: number, fromUs: number, toUs: number, random: () => number, prefix = 'p'): void {
    let t = fromUs;
    let n = 0;
    for (;;) {
      t += (-Math.log(1 - random()) / perSecond) * 1e6;
      if (t >= toUs) break;
      const id = `${prefix}${n++}`;
      this.at(t, () => this.send(id));
    }
  }

  /** @internal the instance received a batch now. */
  recordBatch(ids: string[]): void {
    const counts = this.batcher.batching.dispatched;
    let reason: DispatchReason | undefined;
    for (let i = 0; i < counts.length; i++) if (counts[i] !== this.lastCounts[i]) reason = DISPATCH_REASONS[i];
    this.lastCounts = [...counts];
    this.batches.push({ ids, atUs: this.nowUs, reason: reason! });
  }

  /** Processes events (each instant one turn) until `untilUs`. */
  async run(untilUs: number): Promise<void> {
    const end = ORIGIN + BigInt(Math.round(untilUs * 1000));
    for (;;) {
      let next: bigint | undefined = this.clock.nextWake();
      for (const e of this.events) if (next === undefined || e.at < next) next = e.at;
      if (next === undefined || next > end) break;
      // A busy loop (loopUs) reads what became due while it worked in one turn.
      if (next > this.clock.t) this.clock.t = next;
      const now = this.clock.t;
      const due = this.events
        .filter((e) => e.at <= now)
        .sort((a, b) => (a.at === b.at ? a.seq - b.seq : a.at < b.at ? -1 : 1));
      for (const e of due) this.events.splice(this.events.indexOf(e), 1);
      for (const e of due) {
        e.run();
        if (this.inline) for (let k = 0; k < 20; k++) await Promise.resolve();
      }
      this.clock.fireDue();
      // The turn ends: microtasks, then the batcher's end-of-turn formation. Inline, as in Node: an immediate
      // that the turn's end queues (from an inline run's answer) runs after the next instant's events.
      await new Promise((r) => setImmediate(r));
      if (!this.inline) await new Promise((r) => setImmediate(r));
    }
  }

  /** Batches whose first request arrived at or after `fromUs`. */
  batchesAfter(fromUs: number): SimBatch[] {
    return this.batches.filter((b) => this.arrivedUs.get(b.ids[0]!)! >= fromUs);
  }

  /** How long the batch's last-arrived member waited before it left, µs. */
  lastWaitUs(b: SimBatch): number {
    let last = 0;
    for (const id of b.ids) last = Math.max(last, this.arrivedUs.get(id)!);
    return b.atUs - last;
  }

  /** How long its oldest member waited, µs. */
  oldestWaitUs(b: SimBatch): number {
    let first = Infinity;
    for (const id of b.ids) first = Math.min(first, this.arrivedUs.get(id)!);
    return b.atUs - first;
  }
}
