/**
 * Triton's dynamic batcher. Requests queue per priority level; whenever an
 * instance is free a batch is formed from the front of the queue:
 * - the largest reachable preferred batch size goes at once;
 * - otherwise, with max_queue_delay_microseconds > 0, the batch waits until
 *   its oldest request has been queued that long (arrivals may complete it
 *   sooner), then goes with whatever fits in max_batch_size; under the
 *   adaptive policy it goes sooner when waiting cannot make it larger
 *   (AdaptiveDispatch, docs/batching.md);
 * - requests whose inputs differ in non-batch shape (ragged inputs aside) or
 *   in the set of inputs are never merged.
 * Batches run through executeBatch; slicing outputs per request is the
 * backend's job.
 */
import type { BackendRequest, BackendResponse } from '../backends/backend.js';
import type { ModelDynamicBatching } from '../gen/model_config_pb.js';
import type { FailureReason, ModelVersionStatistics } from '../types/statistics.js';
import { Errors, type NereidError } from '../errors.js';
import { Fifo } from './fifo.js';
import { type CandidateSink, PriorityQueue } from './priority-queue.js';
import { ScheduledRequest, traceQueued } from './scheduled-request.js';
import { type ModelInstance, type Scheduler, executeBatch } from './scheduler.js';
import { type BatcherClock, type Wake, eventLoopTurn, hrtimeClock } from './clock.js';
import { AdaptiveDispatch } from './adaptive-dispatch.js';
import { type BatchingPolicy, DelayTuner } from './batching-policy.js';
import type { BatchingReport, DispatchReason } from '../types/batching.js';

export interface DynamicBatcherOptions {
  maxBatchSize: number;
  /** Normalised: preferred sizes filled in. */
  batching: ModelDynamicBatching;
  /** Inputs with allow_ragged_batch: their shapes may differ within a batch. */
  raggedInputs: ReadonlySet<string>;
  /**
   * Form batches at the end of the event-loop turn in which requests arrive
   * (the server sets this) rather than on each arrival. Default false.
   */
  coalesceArrivals?: boolean;
  /** adaptive or fixed (Triton's rule). Default fixed; the server passes the model's policy. */
  policy?: BatchingPolicy;
  /** target_p99_ms: the delay is tuned to meet it (DelayTuner). */
  targetP99Ms?: number;
  /** Default hrtime; tests pass a simulated clock. */
  clock?: BatcherClock;
  logger?: { warn(obj: object, msg: string): void };
}

/** How long batches that left on their queue delay actually waited. */
export interface ObtainedDelay {
  /** Batches sent because their oldest request reached the delay. */
  count: number;
  /** Sum and maximum of (send time − oldest request's enqueue time), ns. */
  totalNs: number;
  maxNs: number;
}

const noop = (): void => {};
const REASON_INDEX: Readonly<Record<DispatchReason, number>> = { full: 0, preferred: 1, adaptive: 2, delay: 3 };
/**
 * A queue spread over free slots gives each at least this many requests;
 * below twice this a batch is never split.
 */
export const SPREAD_MIN_REQUESTS = 8;
/**
 * Stands in for a request inside a batch when preserve_ordering is on: it
 * holds the outcome until every earlier request has been answered.
 */
class OrderedRequest extends ScheduledRequest {
  private response: BackendResponse | undefined;
  private error: NereidError | undefined;
  private reason: FailureReason = 'OTHER';
  private queueNs = 0;
  private inputNs = 0;
  private inferNs = 0;
  private outputNs = 0;

  constructor(
    readonly original: ScheduledRequest,
    private readonly batcher: DynamicBatcher,
  ) {
    super(original.request, original.priority, original.timeoutUs, original.stats, noop, undefined);
    this.enqueueNs = original.enqueueNs;
  }

  override succeed(
    response: BackendResponse,
    queueNs: number,
    computeInputNs: number,
    computeInferNs: number,
    computeOutputNs: number,
  ): void {
    if (this.done) return;
    this.done = true;
    this.response = response;
    this.queueNs = queueNs;
    this.inputNs = computeInputNs;
    this.inferNs = computeInferNs;
    this.outputNs = computeOutputNs;
    this.batcher.releaseInOrder();
  }

  override fail(error: NereidError, reason: FailureReason): void {
    if (this.done) return;
    this.done = true;
    this.error = error;
    this.reason = reason;
    this.batcher.releaseInOrder();
  }

  /** Completes the original request with the held outcome. */
  release(): void {
    if (this.error) this.original.fail(this.error, this.reason);
    else this.original.succeed(this.response!, this.queueNs, this.inputNs, this.inferNs, this.outputNs);
  }
}

/** One batch on one instance. */
class Execution {
  /** Set while the batch waits behind the instance's running one and its requests count against the queue bound. */
  held: ScheduledRequest[] | undefined = undefined;
  /** Sent from the end of an event-loop turn (not within an arrival or a completion). */
  atTurnEnd = false;
  /** When it left for an idle instance (adaptive policy), else 0n. */
  idleStartNs = 0n;
  constructor(
    readonly batcher: DynamicBatcher,
    readonly instance: ModelInstance,
    readonly items: readonly ScheduledRequest[],
  ) {}
  get requestCount(): number {
    return this.items.length;
  }
  finished(): void {
    this.batcher.executionFinished(this);
  }
}

/**
 * Walks the queue front to back deciding how far the next batch reaches.
 * One per batcher, reset before each walk.
 */
class BatchFormation implements CandidateSink {
  /** Requests accepted into the pending batch, and their total batch size. */
  count = 0;
  size = 0;
  /**
   * The last point where the pending batch was worth sending now (preferred size, or the largest within the preferred
   * sizes).
   */
  markCount = 0;
  markSize = 0;
  /** The next request cannot join (too large or different shapes). */
  blocked = false;
  oldestNs = 0n;
  private first: BackendRequest | undefined;

  constructor(
    private readonly maxBatchSize: number,
    private readonly maxPreferred: number,
    private readonly preferred: ReadonlySet<number>,
    private readonly ragged: ReadonlySet<string>,
    private readonly batchDim: boolean,
  ) {}

  reset(): void {
    this.count = 0;
    this.size = 0;
    this.markCount = 0;
    this.markSize = 0;
    this.blocked = false;
    this.oldestNs = 0n;
    this.first = undefined;
  }

  offer(item: ScheduledRequest): boolean {
    const request = item.request;
    const bs = Math.max(1, request.batchSize);
    if (this.count === 0) {
      this.first = request;
    } else {
      const grown = this.size + bs;
      if (grown > this.maxPreferred && this.markCount === 0) {
        this.markCount = this.count;
        this.markSize = this.size;
      }
      if (grown > this.maxBatchSize || !this.mergeable(this.first!, request)) {
        this.blocked = true;
        return false;
      }
    }
    this.count += 1;
    this.size += bs;
    if (this.oldestNs === 0n || item.enqueueNs < this.oldestNs) this.oldestNs = item.enqueueNs;
    if (this.preferred.has(this.size)) {
      this.markCount = this.count;
      this.markSize = this.size;
    }
    return this.size < this.maxBatchSize;
  }

  /** Same set of inputs, same shapes apart from the batch dimension (ragged inputs excepted). */
  private mergeable(a: BackendRequest, b: BackendRequest): boolean {
    const ai = a.inputs;
    const bi = b.inputs;
    if (ai.length !== bi.length) return false;
    const from = this.batchDim ? 1 : 0;
    for (let i = 0; i < bi.length; i++) {
      const x = bi[i]!;
      let y = ai[i]!;
      if (y.name !== x.name) {
        const found = ai.find((t) => t.name === x.name);
        if (!found) return false;
        y = found;
      }
      if (this.ragged.has(x.name)) continue;
      const xs = x.shape;
      const ys = y.shape;
      if (xs.length !== ys.length) return false;
      for (let d = from; d < xs.length; d++) if (xs[d] !== ys[d]) return false;
    }
    return true;
  }
}

export class DynamicBatcher implements Scheduler {
  private readonly queue: PriorityQueue;
  private readonly free: ModelInstance[];
  private readonly formation: BatchFormation;
  private readonly maxBatchSize: number;
  private readonly maxPreferred: number;
  /** Preferred sizes the configuration asked for (max_batch_size, filled in when none is given, is not one). */
  private readonly chosenSizes: ReadonlySet<number>;
  /** The delay in effect: max_queue_delay_microseconds, or what the tuner chose. */
  private delayNs: bigint;
  private readonly clock: BatcherClock;
  /** Under the adaptive policy. */
  private readonly adaptive: AdaptiveDispatch | undefined;
  /** With target_p99_ms. */
  private readonly tuner: DelayTuner | undefined;
  /** Batches sent, by reason (as DISPATCH_REASONS). */
  private readonly dispatched = [0, 0, 0, 0];
  private readonly preserveOrdering: boolean;
  private readonly ordered = new Fifo<OrderedRequest>();
  private readonly waker: Wake;
  private readonly coalesce: boolean;
  private readonly scheduleSoon: () => void;
  private soon: NodeJS.Immediate | undefined;
  /**
   * Under the adaptive policy: requests answered in the event-loop turn
   * `answeredTurn` (eventLoopTurn) before its end (AdaptiveDispatch.arrived),
   * and whether the turn's end is running. A batch sent from the turn's end
   * and run inline is answered in its microtasks, after the turn's arrivals,
   * and one collected at the turn's end is answered after them too: neither
   * is counted, or the next turn's arrivals would count its clients twice.
   * The count lapses when the loop's turn changes; an immediate per answer
   * ended it before, at about 1.5 µs of every request at concurrency 1.
   */
  private answered = 0;
  private answeredTurn = -1;
  private turnEnding = false;
  private executing = 0;
  private drainWaiters: Array<() => void> = [];
  private scheduling = false;
  private rescheduled = false;
  private readonly obtained: ObtainedDelay = { count: 0, totalNs: 0, maxNs: 0 };
  /** Per instance, the batch waiting behind its running one while a bounded queue counts it. */
  private readonly waitingBatch = new Map<ModelInstance, Execution>();

  constructor(
    private readonly modelName: string,
    private readonly instances: readonly ModelInstance[],
    private readonly stats: ModelVersionStatistics,
    options: DynamicBatcherOptions,
  ) {
    const batching = options.batching;
    this.maxBatchSize = Math.max(1, options.maxBatchSize);
    const preferred = new Set(batching.preferredBatchSize.filter((s) => s > 0 && s <= this.maxBatchSize));
    let maxPreferred = 0;
    for (const s of preferred) maxPreferred = Math.max(maxPreferred, s);
    // No preferred size: grow towards max_batch_size.
    this.maxPreferred = maxPreferred === 0 ? this.maxBatchSize : maxPreferred;
    this.chosenSizes = new Set([...preferred].filter((s) => s !== this.maxBatchSize));
    this.delayNs = batching.maxQueueDelayMicroseconds * 1000n;
    this.preserveOrdering = batching.preserveOrdering;
    this.formation = new BatchFormation(
      this.maxBatchSize,
      this.maxPreferred,
      preferred,
      options.raggedInputs,
      options.maxBatchSize > 0,
    );
    // One slot per instance for the batch it runs, and one more for a batch
    // waiting inside it where its backend takes one (SchedulingHooks.maxInFlight):
    // that batch starts the moment the running one ends. Until it starts, its
    // requests still count against max_queue_size: they are waiting to run (and
    // their statistics count the wait as queue time), and a full queue would
    // otherwise hold a whole batch more than its bound, each accepted request
    // waiting that much longer. Free slots are taken from the end: every
    // instance's first slot before any second one.
    // An instance that merges waiting batches into one run (batchSlots > 2)
    // gets more slots, unless the queue is bounded (which counts one
    // waiting batch per instance).
    this.queue = new PriorityQueue(batching);
    this.queue.listener = { removed: () => this.schedule() };
    this.free = [];
    let levels = 1;
    const slotsOf = (i: ModelInstance): number => (this.queue.bounded ? Math.min(2, i.batchSlots) : i.batchSlots);
    for (const i of instances) levels = Math.max(levels, slotsOf(i));
    for (let level = levels - 1; level >= 0; level--) {
      for (let k = instances.length - 1; k >= 0; k--) if (slotsOf(instances[k]!) > level) this.free.push(instances[k]!);
    }
    this.clock = options.clock ?? hrtimeClock;
    // The waker fires at a turn's end (an immediate) or its start (a timer): not within an arrival.
    this.waker = this.clock.wake(() => this.turnEnd());
    if (options.policy === 'adaptive') this.adaptive = new AdaptiveDispatch(this.clock.now());
    if (options.targetP99Ms !== undefined) {
      const logger = options.logger;
      this.tuner = new DelayTuner(Number(this.delayNs), options.targetP99Ms * 1e6, (p99Ns) =>
        logger?.warn(
          { model: modelName, target_p99_ms: options.targetP99Ms, p99_ms: p99Ns / 1e6 },
          'target_p99_ms cannot be met at this load even without a queue delay; ' +
          'batches wait max_queue_delay_microseconds as configured',
        ),
      );
    }
    this.coalesce = options.coalesceArrivals === true;
    this.scheduleSoon = () => {
      this.soon = undefined;
      this.turnEnd();
    };
  }

  get pendingCount(): number {
    return this.queue.size;
  }

  /** A new request would be refused now (bounded queue full for every priority). */
  get full(): boolean {
    return this.queue.isFull();
  }

  get executingCount(): number {
    return this.executing;
  }

  collectFinished(): void {
    for (const instance of this.instances) if (instance.inFlight > 0) instance.backend.scheduling?.collectFinished?.();
  }

  /** The delay in effect and the batches sent by reason, for the metrics. */
  get batching(): BatchingReport {
    return { delayNs: Number(this.delayNs), dispatched: this.dispatched };
  }

  /** Batches that left because their delay ran out, and how long they actually waited. */
  get obtainedDelay(): Readonly<ObtainedDelay> {
    return this.obtained;
  }

  enqueue(item: ScheduledRequest): void {
    const now = this.clock.now();
    item.enqueueNs = now;
    if (item.request.trace !== undefined) traceQueued(item.request.trace, item.request, now);
    if (item.done) return;
    if (item.signal?.aborted) {
      item.fail(Errors.cancelled('inference request'), 'CANCELED');
      return;
    }
    const rejection = this.queue.push(item, now);
    if (rejection) {
      item.fail(rejection, 'REJECTED');
      return;
    }
    const inSystem = this.queue.size + this.executing;
    if (this.answered !== 0 && eventLoopTurn() !== this.answeredTurn) this.answered = 0;
    this.adaptive?.arrived(now, inSystem, this.answered);
    // Batches form at the end of the current event-loop turn, so requests that
    // arrived together (one poll of the sockets) go together even with no
    // queue delay; dispatching on each arrival would send a batch of 1 to every
    // free instance and leave the rest to wait behind it. A whole batch that is
    // already there goes at once: a turn flooded with requests (most of them
    // refused for a full queue) would otherwise hold it, and the instance, until it ends.
    // So does, under the adaptive policy, a batch that every request of a closed
    // loop has joined, for an idle instance: nobody else can come in this turn,
    // and the turn's end is a few microseconds away at concurrency 1.
    if (
      !this.coalesce ||
      (this.free.length > 0 && (this.queue.size >= this.maxPreferred || this.closedLoopComplete(inSystem)))
    )
      this.schedule();
    else if (this.soon === undefined) this.soon = setImmediate(this.scheduleSoon);
  }

  /** Forms batches at the end of an event-loop turn (its immediates) or at a wake-up. */
  private turnEnd(): void {
    this.answered = 0;
    this.turnEnding = true;
    try {
      this.schedule();
    } finally {
      this.turnEnding = false;
    }
  }

  /** Under the adaptive policy: every request of a closed loop is here, and an instance is idle. */
  private closedLoopComplete(inSystem: number): boolean {
    if (this.adaptive === undefined || this.adaptive.out > 0 || !this.adaptive.allHere(inSystem)) return false;
    for (const i of this.free) if (i.inFlight === 0) return true;
    return false;
  }

  drain(): Promise<void> {
    if (this.idle()) return Promise.resolve();
    return new Promise((resolve) => this.drainWaiters.push(resolve));
  }

  /** Forms and sends batches while instances are free; arms the waker for the next deadline. */
  private schedule(): void {
    if (this.scheduling) {
      // Completing a request can re-enter through its callbacks; run once more afterwards.
      this.rescheduled = true;
      return;
    }
    this.scheduling = true;
    try {
      do {
        this.rescheduled = false;
        this.scheduleOnce();
      } while (this.rescheduled);
    } finally {
      this.scheduling = false;
    }
    if (this.idle()) this.resolveDrain();
  }

  private scheduleOnce(): void {
    let now = this.clock.now();
    const queue = this.queue;
    if (queue.nextDeadlineNs !== 0n && now > queue.nextDeadlineNs) queue.expire(now);
    let wakeAt = 0n;
    while (this.free.length > 0 && queue.size > 0) {
      const f = this.formation;
      f.reset();
      queue.walk(f);
      if (f.count === 0) break;
      const waited = now - f.oldestNs;
      const delayExceeded = this.delayNs !== 0n && waited >= this.delayNs;
      let count: number;
      let reason: DispatchReason;
      if (f.markCount !== 0 && !delayExceeded) {
        count = f.markCount;
        reason = f.markSize >= this.maxBatchSize || this.chosenSizes.size === 0 ? 'full' : 'preferred';
      } else if (f.blocked || f.size >= this.maxPreferred || this.delayNs === 0n) {
        count = f.count;
        if (f.blocked || f.size >= this.maxBatchSize) reason = 'full';
        else reason = f.size >= this.maxPreferred ? 'preferred' : 'delay';
      } else if (delayExceeded) {
        count = f.count;
        reason = 'delay';
        this.recordObtainedDelay(Number(waited));
      } else {
        const deadline = f.oldestNs + this.delayNs;
        const again =
          this.adaptive !== undefined && f.count === queue.size ? this.adaptiveCheck(now, deadline) : deadline;
        if (again !== 0n) {
          wakeAt = again;
          break;
        }
        count = f.count;
        reason = 'adaptive';
      }
      if (!this.chosenSizes.has(f.markCount === count ? f.markSize : f.size)) count = this.spread(count);
      this.dispatched[REASON_INDEX[reason]]! += 1;
      this.adaptive?.sent(count);
      this.dispatch(queue.take(count));
      now = this.clock.now();
    }
    const deadline = queue.size > 0 ? queue.nextDeadlineNs : 0n;
    if (deadline !== 0n && (wakeAt === 0n || deadline < wakeAt)) wakeAt = deadline + 1n;
    if (wakeAt === 0n) this.waker.cancel();
    else this.waker.arm(wakeAt);
  }

  /**
   * The adaptive rule for a batch that would wait until `deadline` and takes
   * the whole queue: it goes now (0n) when an instance is idle and
   * AdaptiveDispatch predicts nothing more within the delay; otherwise the
   * instant to look again. The idle instance's slot is moved to where
   * dispatch takes the next one from.
   */
  private adaptiveCheck(now: bigint, deadline: bigint): bigint {
    const free = this.free;
    let idle = free.length - 1;
    while (idle >= 0 && free[idle]!.inFlight !== 0) idle--;
    if (idle < 0) return deadline;
    const again = this.adaptive!.decide(now, deadline, this.queue.size + this.executing);
    if (again === 0n && idle !== free.length - 1) {
      const slot = free[idle]!;
      free[idle] = free[free.length - 1]!;
      free[free.length - 1] = slot;
    }
    return again;
  }

  /**
   * With several slots free (an idle instance's running and waiting slots,
   * or several idle instances) and the instance asking for it
   * (SchedulingHooks.spreadBatches), the queue is shared out in two halves
   * instead of going to the first slot as one batch: one is answered while
   * the other runs. Batches of a preferred size the configuration chose go
   * whole, and so do batches under twice SPREAD_MIN_REQUESTS.
   */
  private spread(count: number): number {
    // Halves: with more slots the queue would go in pieces too small to run well
    // (an instance that merges them runs them together again anyway).
    const slots = Math.min(2, this.free.length);
    if (
      slots < 2 ||
      count < 2 * SPREAD_MIN_REQUESTS ||
      this.free[this.free.length - 1]!.backend.scheduling?.spreadBatches?.() !== true
    )
      return count;
    const share = Math.ceil(this.queue.size / slots);
    return share >= count ? count : Math.max(SPREAD_MIN_REQUESTS, share);
  }

  private dispatch(items: ScheduledRequest[]): void {
    const instance = this.free.pop()!;
    let batchSize = 0;
    for (let i = 0; i < items.length; i++) batchSize += Math.max(1, items[i]!.request.batchSize);
    if (this.preserveOrdering) {
      for (let i = 0; i < items.length; i++) {
        const stand = new OrderedRequest(items[i]!, this);
        this.ordered.push(stand);
        items[i] = stand;
      }
    }
    this.executing += items.length;
    const waits = instance.inFlight > 0;
    instance.busy = true;
    instance.inFlight += 1;
    const execution = new Execution(this, instance, items);
    execution.atTurnEnd = this.turnEnding;
    if (!waits && this.adaptive !== undefined) execution.idleStartNs = this.clock.now();
    if (waits && this.queue.bounded) {
      // Not started until the running batch ends: still within max_queue_size.
      this.queue.hold(items, 1);
      execution.held = items;
      this.waitingBatch.set(instance, execution);
    }
    void executeBatch(instance, items, batchSize, this.stats, this.modelName).then(() => execution.finished());
  }

  /** @internal */
  executionFinished(execution: Execution): void {
    this.executing -= execution.requestCount;
    const instance = execution.instance;
    // The batch that waited behind this one starts now (or this was it, ending first).
    const waiting = execution.held !== undefined ? execution : this.waitingBatch.get(instance);
    if (waiting?.held !== undefined) {
      this.queue.hold(waiting.held, -1);
      waiting.held = undefined;
      this.waitingBatch.delete(instance);
    }
    instance.inFlight -= 1;
    instance.busy = instance.inFlight > 0;
    this.free.push(instance);
    const adaptive = this.adaptive;
    if (adaptive !== undefined) {
      const now = this.clock.now();
      adaptive.answered(now, execution.requestCount);
      if (execution.idleStartNs !== 0n) adaptive.ran(execution.requestCount, Number(now - execution.idleStartNs));
    }
    if (this.adaptive !== undefined && !execution.atTurnEnd && !this.turnEnding) {
      // Counted as with us until the turn ends.
      const turn = eventLoopTurn();
      if (turn !== this.answeredTurn) {
        this.answeredTurn = turn;
        this.answered = 0;
      }
      this.answered += execution.requestCount;
    }
    const tuner = this.tuner;
    if (tuner !== undefined) {
      const now = this.clock.now();
      for (const item of execution.items) tuner.observe(Number(now - item.enqueueNs), now);
      this.delayNs = BigInt(tuner.delayNs);
    }
    this.schedule();
  }

  /** @internal Answers ordered requests from the front while they are complete. */
  releaseInOrder(): void {
    const ordered = this.ordered;
    while (ordered.length > 0 && ordered.peek()!.done) ordered.shift()!.release();
  }

  private recordObtainedDelay(ns: number): void {
    const o = this.obtained;
    o.count += 1;
    o.totalNs += ns;
    if (ns > o.maxNs) o.maxNs = ns;
  }

  private idle(): boolean {
    return this.queue.size === 0 && this.executing === 0 && this.ordered.length === 0;
  }

  private resolveDrain(): void {
    if (this.drainWaiters.length === 0) return;
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const w of waiters) w();
  }
}
