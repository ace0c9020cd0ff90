/**
 * The dynamic batcher's queue: one FIFO per priority level (lower level
 * served first), each with its queue policy (size limit, queue timeout and
 * what to do when it expires). Requests keep their arrival order within a
 * level; requests whose timeout expired under a DELAY policy move behind the
 * unexpired ones of their level.
 */
import {
  ModelQueuePolicy_TimeoutAction,
  type ModelDynamicBatching,
  type ModelQueuePolicy,
} from '../gen/model_config_pb.js';
import { Errors, type NereidError } from '../errors.js';
import { Fifo } from './fifo.js';
import type { ScheduledRequest } from './scheduled-request.js';

/** A level's queue policy with plain numbers. */
export interface QueuePolicy {
  /** true: expired requests wait behind the others; false: they are rejected. */
  readonly delayOnTimeout: boolean;
  /** 0: requests never expire (unless overridden). */
  readonly defaultTimeoutUs: number;
  readonly allowTimeoutOverride: boolean;
  /** 0: unbounded. */
  readonly maxQueueSize: number;
}

export const UNBOUNDED_POLICY: QueuePolicy = {
  delayOnTimeout: false,
  defaultTimeoutUs: 0,
  allowTimeoutOverride: false,
  maxQueueSize: 0,
};

export function toQueuePolicy(p: ModelQueuePolicy | undefined): QueuePolicy {
  if (!p) return UNBOUNDED_POLICY;
  return {
    delayOnTimeout: p.timeoutAction === ModelQueuePolicy_TimeoutAction.DELAY,
    defaultTimeoutUs: Number(p.defaultTimeoutMicroseconds),
    allowTimeoutOverride: p.allowTimeoutOverride,
    maxQueueSize: p.maxQueueSize,
  };
}

/**
 * The queue timeout a request gets: the level's default, shortened by the
 * request's own timeout only when overriding is allowed (so a zero default
 * can never be overridden).
 */
export function effectiveTimeoutUs(policy: QueuePolicy, requestTimeoutUs: number): number {
  let timeout = policy.defaultTimeoutUs;
  if (policy.allowTimeoutOverride && requestTimeoutUs !== 0 && requestTimeoutUs < timeout) timeout = requestTimeoutUs;
  return timeout;
}

/** One queued request. It is also the request's abort listener, so no closure is made per request. */
export class QueueEntry {
  /** Cancelled (or completed elsewhere) while queued; skipped and dropped lazily. */
  dead = false;
  constructor(
    readonly item: ScheduledRequest,
    readonly level: LevelQueue,
    /** hrtime ns after which the entry expires; 0n: never. */
    readonly deadlineNs: bigint,
    private readonly owner: PriorityQueue,
  ) {}

  handleEvent(): void {
    this.owner.cancel(this);
  }
}

export class LevelQueue {
  /** Unexpired entries in arrival order (may hold dead ones). */
  readonly waiting = new Fifo<QueueEntry>(16);
  /** Entries whose timeout expired under a DELAY policy, in expiry order. */
  readonly delayed = new Fifo<QueueEntry>(4);
  /** Entries that are neither dead nor taken. */
  live = 0;
  dead = 0;
  constructor(
    readonly level: number,
    readonly policy: QueuePolicy,
    /** Levels with a configured policy stay; the others are dropped when empty. */
    readonly permanent: boolean,
  ) {}
}

const isDeadEntry = (e: QueueEntry): boolean => e.dead;

/** Collects a prefix of the queue for batch formation. */
export interface CandidateSink {
  /** Return false to stop the walk. */
  offer(item: ScheduledRequest): boolean;
}

/** Called when an entry leaves the queue without being taken (cancelled, rejected). */
export interface QueueListener {
  removed(): void;
}

export class PriorityQueue {
  /** Active levels, sorted by level number. */
  private levels: LevelQueue[] = [];
  private readonly maxLevel: number;
  private readonly defaultLevel: number;
  private readonly defaultPolicy: QueuePolicy;
  private readonly levelPolicies = new Map<number, QueuePolicy>();
  private liveCount = 0;
  /**
   * Requests taken from a level into a batch that waits inside a busy
   * instance, not yet started, by level number. They still count against
   * their level's max_queue_size (their statistics count that wait as queue
   * time too): a bounded queue bounds everything accepted and not running.
   */
  private readonly held = new Map<number, number>();
  /** Some level has a max_queue_size. */
  readonly bounded: boolean;
  /** Earliest deadline among waiting entries (may be stale-early); 0n: none. */
  nextDeadlineNs = 0n;
  listener: QueueListener | undefined;

  constructor(
    batching: Pick<
      ModelDynamicBatching,
      'priorityLevels' | 'defaultPriorityLevel' | 'defaultQueuePolicy' | 'priorityQueuePolicy'
    >,
  ) {
    this.maxLevel = Number(batching.priorityLevels);
    this.defaultLevel = this.maxLevel === 0 ? 0 : Number(batching.defaultPriorityLevel);
    this.defaultPolicy = toQueuePolicy(batching.defaultQueuePolicy);
    let bounded = this.defaultPolicy.maxQueueSize !== 0;
    if (this.maxLevel === 0) {
      this.levels.push(new LevelQueue(0, this.defaultPolicy, true));
    } else {
      for (const [key, policy] of Object.entries(batching.priorityQueuePolicy)) {
        const level = Number(key);
        const p = toQueuePolicy(policy);
        if (p.maxQueueSize !== 0) bounded = true;
        this.levelPolicies.set(level, p);
        this.levelFor(level);
      }
    }
    this.bounded = bounded;
  }

  /**
   * Counts `items` (taken from this queue) against their levels' bounds while
   * they wait inside an instance (delta 1), or no longer (delta -1).
   */
  hold(items: readonly ScheduledRequest[], delta: 1 | -1): void {
    for (let i = 0; i < items.length; i++) {
      const level = this.levelOf(items[i]!.priority);
      const n = (this.held.get(level) ?? 0) + delta;
      if (n === 0) this.held.delete(level);
      else this.held.set(level, n);
    }
  }

  /** Requests queued and not cancelled, across levels. */
  get size(): number {
    return this.liveCount;
  }

  /** The level a request priority maps to: 0 or out of range means the default level. */
  levelOf(priority: number): number {
    if (this.maxLevel === 0) return 0;
    return priority === 0 || priority > this.maxLevel ? this.defaultLevel : priority;
  }

  /**
   * true when a request would be refused whatever its priority: every level it
   * could map to is bounded and full. Frontends ask this before reading a
   * request's body, so shedding costs no decode. With many priority levels it
   * answers false (the request is then refused by push() as usual).
   */
  isFull(): boolean {
    if (this.maxLevel === 0) return this.levelFull(0, this.defaultPolicy);
    if (this.maxLevel > 16) return false;
    for (let l = 1; l <= this.maxLevel; l++) {
      if (!this.levelFull(l, this.levelPolicies.get(l) ?? this.defaultPolicy)) return false;
    }
    return true;
  }

  private levelFull(level: number, policy: QueuePolicy): boolean {
    if (policy.maxQueueSize === 0) return false;
    let live = 0;
    for (const q of this.levels) if (q.level === level) live = q.live;
    return live + (this.held.get(level) ?? 0) >= policy.maxQueueSize;
  }

  /** Queues `item`, or returns the error to fail it with when its level is full. */
  push(item: ScheduledRequest, nowNs: bigint): NereidError | undefined {
    const level = this.levelFor(this.levelOf(item.priority));
    const policy = level.policy;
    if (policy.maxQueueSize !== 0 && level.live + (this.held.get(level.level) ?? 0) >= policy.maxQueueSize) {
      return Errors.maxQueueSizeExceeded(item.request.id);
    }
    const timeoutUs = effectiveTimeoutUs(policy, item.timeoutUs);
    const deadlineNs = timeoutUs === 0 ? 0n : nowNs + BigInt(timeoutUs) * 1000n;
    item.deadlineNs = deadlineNs;
    const entry = new QueueEntry(item, level, deadlineNs, this);
    level.waiting.push(entry);
    level.live += 1;
    this.liveCount += 1;
    if (deadlineNs !== 0n && (this.nextDeadlineNs === 0n || deadlineNs < this.nextDeadlineNs))
      this.nextDeadlineNs = deadlineNs;
    if (item.signal) item.signal.addEventListener('abort', entry);
    return undefined;
  }

  /**
   * Applies the timeout policies at `nowNs`: expired entries are rejected
   * (REJECT) or moved behind their level's unexpired ones (DELAY). O(queued).
   */
  expire(nowNs: bigint): void {
    let next = 0n;
    let rejected = false;
    for (const level of this.levels) {
      const waiting = level.waiting;
      const n = waiting.length;
      for (let i = 0; i < n; i++) {
        const entry = waiting.shift()!;
        if (this.isDead(entry)) {
          level.dead -= 1;
          continue;
        }
        if (entry.deadlineNs !== 0n && nowNs > entry.deadlineNs) {
          if (level.policy.delayOnTimeout) {
            level.delayed.push(entry);
          } else {
            this.detach(entry);
            level.live -= 1;
            this.liveCount -= 1;
            entry.item.fail(Errors.requestTimeout(), 'REJECTED');
            rejected = true;
          }
          continue;
        }
        waiting.push(entry);
        if (entry.deadlineNs !== 0n && (next === 0n || entry.deadlineNs < next)) next = entry.deadlineNs;
      }
    }
    this.nextDeadlineNs = next;
    this.dropEmptyLevels();
    if (rejected) this.listener?.removed();
  }

  /**
   * Offers live entries in service order (level by level; within a level the
   * unexpired ones, then the delayed ones) until the sink says stop.
   */
  walk(sink: CandidateSink): void {
    for (const level of this.levels) {
      if (level.live === 0) continue;
      if (!this.walkFifo(level.waiting, sink)) return;
      if (!this.walkFifo(level.delayed, sink)) return;
    }
  }

  /** Removes the first `count` live entries in service order and returns their requests. */
  take(count: number): ScheduledRequest[] {
    const out: ScheduledRequest[] = [];
    for (const level of this.levels) {
      while (out.length < count && level.live > 0) {
        const entry = level.waiting.length > 0 ? level.waiting.shift()! : level.delayed.shift()!;
        if (this.isDead(entry)) {
          level.dead -= 1;
          continue;
        }
        this.detach(entry);
        level.live -= 1;
        this.liveCount -= 1;
        out.push(entry.item);
      }
      if (out.length === count) break;
    }
    this.dropEmptyLevels();
    return out;
  }

  /** Fails a queued entry whose request was aborted. */
  cancel(entry: QueueEntry): void {
    if (entry.dead) return;
    const item = entry.item;
    if (!item.done) item.fail(Errors.cancelled('inference request'), 'CANCELED');
    this.markDead(entry);
    // Keep memory bounded when many queued requests are cancelled.
    const level = entry.level;
    if (level.dead > 64 && level.dead > level.live) {
      level.waiting.removeWhere(isDeadEntry);
      level.delayed.removeWhere(isDeadEntry);
      level.dead = 0;
    }
    this.listener?.removed();
  }

  private walkFifo(fifo: Fifo<QueueEntry>, sink: CandidateSink): boolean {
    for (let i = 0; i < fifo.length; i++) {
      const entry = fifo.at(i)!;
      if (this.isDead(entry)) continue;
      if (!sink.offer(entry.item)) return false;
    }
    return true;
  }

  /** Dead: cancelled here, or completed by someone else while queued. */
  private isDead(entry: QueueEntry): boolean {
    if (!entry.dead && entry.item.done) this.markDead(entry);
    return entry.dead;
  }

  private markDead(entry: QueueEntry): void {
    entry.dead = true;
    this.detach(entry);
    const level = entry.level;
    level.live -= 1;
    level.dead += 1;
    this.liveCount -= 1;
  }

  private detach(entry: QueueEntry): void {
    entry.item.signal?.removeEventListener('abort', entry);
  }

  private levelFor(levelNumber: number): LevelQueue {
    const levels = this.levels;
    let lo = 0;
    let hi = levels.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (levels[mid]!.level < levelNumber) lo = mid + 1;
      else hi = mid;
    }
    const found = levels[lo];
    if (found && found.level === levelNumber) return found;
    const configured = this.levelPolicies.get(levelNumber);
    const level = new LevelQueue(
      levelNumber,
      configured ?? this.defaultPolicy,
      configured !== undefined || this.maxLevel === 0,
    );
    levels.splice(lo, 0, level);
    return level;
  }

  private dropEmptyLevels(): void {
    let j = 0;
    const levels = this.levels;
    for (let i = 0; i < levels.length; i++) {
      const level = levels[i]!;
      if (!level.permanent && level.live === 0) continue; // dead entries go with it
      levels[j++] = level;
    }
    levels.length = j;
  }
}
