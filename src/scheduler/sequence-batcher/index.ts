/**
 * Triton's sequence batcher. Every request belongs to a sequence (its
 * correlation id); a sequence is pinned to one slot of one instance from its
 * START request until its END request has run, or until it has been idle
 * for max_sequence_idle_microseconds. When every slot is taken, new
 * sequences wait in a backlog, oldest first, for a slot to free up; a
 * backlogged sequence expires at the earliest timeout of its requests (the
 * request `timeout` parameter), and its requests are then refused, as
 * Triton's reaper does. Once in a slot, a sequence's timeouts no longer
 * apply.
 *
 * A batch holds at most one request per sequence, and a sequence's next
 * request is not batched until the one before has finished, so the requests
 * of a sequence run in order and each sees the implicit state the one
 * before it left. An instance whose backend takes more than one execution
 * gets a second batch (of other sequences) behind the running one.
 *
 * - direct: an instance has max(1, max_batch_size) slots; a batch takes the
 *   next request of every slot that has one (waiting up to
 *   max_queue_delay_microseconds for the other active slots).
 * - oldest: an instance has max_candidate_sequences slots; a batch takes up
 *   to max_batch_size sequences whose next request is oldest (waiting up to
 *   max_queue_delay_microseconds for a full or preferred batch size; under
 *   the adaptive batching_policy it goes sooner when waiting cannot make it
 *   larger, as the dynamic batcher's, docs/batching.md).
 *
 * direct, as Triton: a sequence keeps its slot's index in every batch. A
 * batch spans slots 0 to the highest slot with a request to run; a slot
 * below it with nothing to run (no request, or its sequence still running
 * in the batch before) gets a padding request: the first real request's
 * inputs as zeros, READY (and START, END) false, CORRID 0, the initial
 * state, no outputs. Padding counts in the batch size of the execution
 * statistics (as a backend reports it), not as an inference request.
 */
import type { BackendRequest, BackendResponse } from '../../backends/backend.js';
import type { ModelSequenceBatching } from '../../gen/model_config_pb.js';
import type { ModelVersionStatistics } from '../../types/statistics.js';
import { Errors, type NereidError } from '../../errors.js';
import { type Tensor, tensorByteLength } from '../../tensor/tensor.js';
import { elementCount } from '../../tensor/datatype.js';
import { type ScheduledRequest, traceQueued } from '../scheduled-request.js';
import { type BatchItem, type ModelInstance, type Scheduler, executeBatch } from '../scheduler.js';
import { HrtimeWake, type Wake } from '../clock.js';
import { AdaptiveDispatch } from '../adaptive-dispatch.js';
import type { BatchingPolicy } from '../batching-policy.js';
import type { BatchingReport, DispatchReason } from '../../types/batching.js';
import {
  type CorrelationId,
  SequenceControls,
  type StateSpec,
  correlationIdText,
  paddingControls,
} from './controls.js';

export { loadStateSpecs, SequenceControls, type StateSpec } from './controls.js';

const FLAG_START = 1;
const FLAG_END = 2;

export interface SequenceBatcherOptions {
  readonly maxBatchSize: number;
  readonly batching: ModelSequenceBatching;
  readonly states: readonly StateSpec[];
  readonly logger?: { warn(obj: object, msg: string): void };
  /** The oldest strategy's policy (the direct strategy waits as Triton). Default fixed. */
  readonly policy?: BatchingPolicy;
}

const REASON_INDEX: Readonly<Record<DispatchReason, number>> = { full: 0, preferred: 1, adaptive: 2, delay: 3 };

class Sequence {
  readonly queue: ScheduledRequest[] = [];
  /** state input name -> the value the next request gets */
  readonly state = new Map<string, Tensor>();
  slot: Slot | undefined;
  /** END was received: the id no longer maps to this sequence. */
  ended = false;
  /** A request of this sequence is executing. */
  running = false;
  lastActiveNs: bigint;
  /** In the backlog: when its requests are refused for waiting too long (the earliest request timeout); 0n: never. */
  expiresNs = 0n;
  constructor(readonly id: CorrelationId) {
    this.lastActiveNs = process.hrtime.bigint();
  }

  /** The next request that is still waiting (cancelled ones are dropped). */
  head(): ScheduledRequest | undefined {
    while (this.queue.length > 0 && this.queue[0]!.done) this.queue.shift();
    return this.queue[0];
  }
}

class Slot {
  sequence: Sequence | undefined;
  constructor(
    readonly lane: Lane,
    readonly index: number,
  ) {}
}

/** One instance and its sequence slots. */
class Lane {
  readonly slots: Slot[] = [];
  /** Batches handed to the instance and not finished. */
  inFlight = 0;
  /** One batch running and (when the backend takes more) one waiting behind it, as the dynamic batcher. */
  readonly depth: number;
  /** Wakes the lane when its waiting batch's delay runs out (or the adaptive rule asks again). */
  readonly wake: Wake;
  constructor(
    readonly instance: ModelInstance,
    slotCount: number,
    onWake: (lane: Lane) => void,
  ) {
    for (let i = 0; i < slotCount; i++) this.slots.push(new Slot(this, i));
    this.depth = Math.min(2, instance.depth);
    this.wake = new HrtimeWake(() => onWake(this));
  }
}

/**
 * The request as the backend sees it (control and state inputs added, state
 * outputs requested); completing it keeps the new state and completes the
 * client's request with only the outputs it asked for. A light stand-in for
 * the client's request in the batch (not a ScheduledRequest of its own).
 */
class SequenceStep implements BatchItem {
  readonly enqueueNs: bigint;
  private done = false;

  constructor(
    readonly original: ScheduledRequest,
    readonly request: BackendRequest,
    private readonly sequence: Sequence,
    private readonly batcher: SequenceBatcher,
  ) {
    this.enqueueNs = original.enqueueNs;
  }

  /** Handed to the backend: the client's request is then past cancelling, as any other. */
  get executing(): boolean {
    return this.original.executing;
  }

  set executing(value: boolean) {
    this.original.executing = value;
  }

  succeed(response: BackendResponse, queueNs: number, inputNs: number, inferNs: number, outputNs: number): void {
    if (this.done) return;
    this.done = true;
    if (response.error) {
      this.original.fail(response.error, 'BACKEND');
      return;
    }
    const states = this.batcher.states;
    if (states.length === 0) {
      this.original.succeed(response, queueNs, inputNs, inferNs, outputNs);
      return;
    }
    const outputs = response.outputs;
    const state = this.sequence.state;
    for (let i = 0; i < states.length; i++) {
      const s = states[i]!;
      const t = findByName(outputs, s.outputName);
      if (!t) {
        this.original.fail(Errors.sequenceStateMissing(this.batcher.modelName, s.outputName), 'BACKEND');
        return;
      }
      // A copy: the backend's output may be a view into a buffer it reuses.
      state.set(s.inputName, { name: s.inputName, datatype: t.datatype, shape: t.shape, data: copyBytes(t.data) });
    }
    const wanted = this.original.request.requestedOutputs;
    let kept = outputs;
    if (outputs.length !== wanted.length) {
      const some: Tensor[] = [];
      for (let i = 0; i < outputs.length; i++) if (wanted.includes(outputs[i]!.name)) some.push(outputs[i]!);
      kept = some;
    }
    this.original.succeed(
      kept === outputs ? response : { outputs: kept, parameters: response.parameters },
      queueNs,
      inputNs,
      inferNs,
      outputNs,
    );
  }

  fail(error: NereidError, reason: Parameters<ScheduledRequest['fail']>[1]): void {
    if (this.done) return;
    this.done = true;
    this.original.fail(error, reason);
  }
}

/** Stands in the batch for a direct-strategy slot with nothing to run; its outcome is dropped. */
class PaddingStep implements BatchItem {
  executing = false;
  constructor(
    readonly request: BackendRequest,
    readonly enqueueNs: bigint,
  ) {}

  succeed(): void {}

  fail(): void {}
}

function byOldestHead(a: Sequence, b: Sequence): number {
  return a.queue[0]!.enqueueNs < b.queue[0]!.enqueueNs ? -1 : 1;
}

/**
 * A copy of `data`. Small copies come from Node's shared buffer pool (a
 * slice of a few kilobytes): a fresh ArrayBuffer per state, per request,
 * cost more than the rest of the step.
 */
function copyBytes(data: Uint8Array): Uint8Array {
  const pooled = Buffer.allocUnsafe(data.byteLength);
  pooled.set(data);
  // A plain Uint8Array view, so slice() copies as it does for any tensor's data.
  return new Uint8Array(pooled.buffer, pooled.byteOffset, pooled.byteLength);
}

function sameNames(a: readonly string[], b: readonly string[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function findByName(tensors: readonly Tensor[], name: string): Tensor | undefined {
  for (let i = 0; i < tensors.length; i++) if (tensors[i]!.name === name) return tensors[i];
  return undefined;
}


export class SequenceBatcher implements Scheduler {
  readonly states: readonly StateSpec[];
  private readonly controls: SequenceControls;
  private readonly lanes: Lane[];
  /** Correlation id -> its sequence, from START until END arrives (a bigint and a string never collide as keys). */
  private readonly active = new Map<CorrelationId, Sequence>();
  /** Sequences waiting for a slot, oldest first. */
  private readonly backlog: Sequence[] = [];
  private readonly oldest: boolean;
  private readonly maxBatch: number;
  private readonly delayNs: bigint;
  private readonly preferred: ReadonlySet<number>;
  private readonly idleNs: bigint;
  private readonly stateOutputs: readonly string[];
  private lastWanted: readonly string[] | undefined;
  private lastWithStates: readonly string[] = [];
  private pending = 0;
  private executing = 0;
  private soon: NodeJS.Immediate | undefined;
  private reaper: NodeJS.Timeout | undefined;
  private backlogTimer: NodeJS.Timeout | undefined;
  private backlogTimerAt = 0n;
  private drainWaiters: Array<() => void> = [];
  /** oldest under the adaptive policy. */
  private readonly adaptive: AdaptiveDispatch | undefined;
  /** Batches sent, by reason (as DISPATCH_REASONS). */
  private readonly dispatched = [0, 0, 0, 0];

  constructor(
    readonly modelName: string,
    instances: readonly ModelInstance[],
    private readonly stats: ModelVersionStatistics,
    private readonly options: SequenceBatcherOptions,
  ) {
    const seq = options.batching;
    if (seq.iterativeSequence) {
      throw Errors.unsupported(
        `model '${modelName}': sequence_batching iterative_sequence is not supported by this version of Nereid`,
      );
    }
    if (seq.strategyChoice.case === 'direct' && seq.strategyChoice.value.minimumSlotUtilization > 0) {
      options.logger?.warn(
        { model: modelName },
        'sequence_batching direct.minimum_slot_utilization has no effect ' +
        'here: a batch waits only for max_queue_delay_microseconds',
      );
    }
    if (seq.strategyChoice.case === 'oldest' && seq.strategyChoice.value.preserveOrdering) {
      options.logger?.warn(
        { model: modelName },
        'sequence_batching oldest.preserve_ordering has no effect here: ' +
        'responses of different sequences complete as their batches do',
      );
    }
    const batching = options.maxBatchSize > 0;
    this.controls = new SequenceControls(seq, batching);
    this.states = options.states;
    this.stateOutputs = options.states.map((s) => s.outputName);
    this.oldest = seq.strategyChoice.case === 'oldest';
    this.maxBatch = Math.max(1, options.maxBatchSize);
    let slots = this.maxBatch;
    let delayUs = 0n;
    let preferred: number[] = [];
    if (seq.strategyChoice.case === 'oldest') {
      const o = seq.strategyChoice.value;
      if (o.maxCandidateSequences > 0) slots = o.maxCandidateSequences;
      delayUs = o.maxQueueDelayMicroseconds;
      preferred = o.preferredBatchSize;
    } else if (seq.strategyChoice.case === 'direct') {
      delayUs = seq.strategyChoice.value.maxQueueDelayMicroseconds;
    }
    this.delayNs = delayUs * 1000n;
    this.preferred = new Set(preferred);
    this.idleNs = (seq.maxSequenceIdleMicroseconds > 0n ? seq.maxSequenceIdleMicroseconds : 1_000_000n) * 1000n;
    this.lanes = instances.map((i) => new Lane(i, slots, (lane) => this.form(lane)));
    if (this.oldest && options.policy === 'adaptive') this.adaptive = new AdaptiveDispatch(process.hrtime.bigint());
  }

  get pendingCount(): number {
    return this.pending;
  }

  /** The delay in effect and the batches sent by reason, for the metrics. */
  get batching(): BatchingReport {
    return { delayNs: Number(this.delayNs), dispatched: this.dispatched };
  }

  get executingCount(): number {
    return this.executing;
  }

  /** Sequences holding a slot or waiting in the backlog. */
  get openSequences(): number {
    return this.active.size + this.backlog.length;
  }

  /** Sequences holding a slot or waiting for one. */
  get sequenceCount(): number {
    let n = this.backlog.length;
    for (const lane of this.lanes) for (const s of lane.slots) if (s.sequence) n += 1;
    return n;
  }

  /** Which instance and slot a correlation id occupies (for tests and logs). */
  slotOf(id: CorrelationId): { instance: string; slot: number } | 'backlog' | undefined {
    const seq = this.active.get(id);
    if (!seq) return undefined;
    if (!seq.slot) return 'backlog';
    return { instance: seq.slot.lane.instance.name, slot: seq.slot.index };
  }

  enqueue(item: ScheduledRequest): void {
    item.enqueueNs = process.hrtime.bigint();
    if (item.request.trace !== undefined) traceQueued(item.request.trace, item.request, item.enqueueNs);
    const r = item.request;
    if (r.batchSize > 1) return item.fail(Errors.sequenceBatchSize(this.modelName), 'REJECTED');
    const id = r.correlationId;
    if (id === 0n || id === '') return item.fail(Errors.sequenceNoCorrelationId(this.modelName), 'REJECTED');
    try {
      this.controls.checkCorrelationId(id, this.modelName, r.id);
    } catch (err) {
      return item.fail(err as NereidError, 'REJECTED');
    }
    if (this.lanes.length === 0)
      return item.fail(Errors.internal(`model '${this.modelName}' has no instance to run sequences`), 'REJECTED');
    const start = (r.flags & FLAG_START) !== 0;
    const end = (r.flags & FLAG_END) !== 0;
    let seq = this.active.get(id);
    if (!seq) {
      if (!start) return item.fail(Errors.sequenceNotStarted(correlationIdText(id), this.modelName), 'REJECTED');
      seq = new Sequence(id);
      this.active.set(id, seq);
      const slot = this.freeSlot();
      if (slot) this.assign(slot, seq);
      else this.backlog.push(seq);
    } else if (start) {
      this.options.logger?.warn(
        { model: this.modelName, sequence: correlationIdText(id) },
        'sequence started again before it ended; the new START continues in the same slot',
      );
    }
    seq.queue.push(item);
    seq.lastActiveNs = item.enqueueNs;
    this.pending += 1;
    this.adaptive?.arrived(item.enqueueNs, this.pending + this.executing);
    if (!seq.slot && item.timeoutUs > 0) {
      // Triton: a sequence waiting for a slot expires at the earliest timeout of its requests.
      const at = item.enqueueNs + BigInt(item.timeoutUs) * 1000n;
      if (seq.expiresNs === 0n || at < seq.expiresNs) seq.expiresNs = at;
      this.armBacklogTimer();
    }
    if (end) {
      // Later requests with this id start a new sequence.
      this.active.delete(id);
      seq.ended = true;
    }
    if (this.soon === undefined) this.soon = setImmediate(this.formSoon);
  }

  drain(): Promise<void> {
    if (this.pending === 0 && this.executing === 0) return Promise.resolve();
    return new Promise((resolve) => this.drainWaiters.push(resolve));
  }

  private readonly formSoon = (): void => {
    this.soon = undefined;
    for (const lane of this.lanes) this.form(lane);
  };

  /** The free slot with the lowest index, on the instance with the fewest sequences. */
  private freeSlot(): Slot | undefined {
    let best: Slot | undefined;
    let bestLoad = 0;
    for (const lane of this.lanes) {
      let load = 0;
      let free: Slot | undefined;
      for (const s of lane.slots) {
        if (s.sequence) load += 1;
        else if (!free) free = s;
      }
      if (free && (!best || free.index < best.index || (free.index === best.index && load < bestLoad))) {
        best = free;
        bestLoad = load;
      }
    }
    return best;
  }

  private assign(slot: Slot, seq: Sequence): void {
    slot.sequence = seq;
    seq.slot = slot;
    seq.expiresNs = 0n; // in a slot the backlog timeout no longer applies
    this.armReaper();
  }

  /** Frees the slot of a sequence that is over, and gives it to the oldest backlogged sequence. */
  private release(seq: Sequence): void {
    const slot = seq.slot;
    if (!slot) return;
    slot.sequence = undefined;
    seq.slot = undefined;
    while (this.backlog.length > 0) {
      const next = this.backlog.shift()!;
      if (next.head() === undefined && next.ended) continue; // every request was cancelled
      this.assign(slot, next);
      break;
    }
  }

  /** Forms and starts a batch on an idle lane, or waits for the queue delay. */
  private form(lane: Lane): void {
    if (lane.inFlight >= lane.depth) return;
    lane.wake.cancel();
    const ready: Sequence[] = [];
    let active = 0;
    for (const slot of lane.slots) {
      const seq = slot.sequence;
      if (!seq) continue;
      active += 1;
      if (seq.running) continue;
      if (seq.head() !== undefined) ready.push(seq);
      else if (seq.ended) this.release(seq); // its last requests were cancelled
    }
    if (ready.length === 0) return;
    // oldest: the sequences whose next requests waited longest, oldest first.
    if (this.oldest && ready.length > 1) ready.sort(byOldestHead);
    const batch = ready.length > this.maxBatch ? ready.slice(0, this.maxBatch) : ready;
    let reason: DispatchReason = 'delay';
    if (batch.length >= this.maxBatch) reason = 'full';
    else if (this.oldest ? this.preferred.has(batch.length) : batch.length >= active)
      reason = this.oldest ? 'preferred' : 'full';
    else if (this.delayNs > 0n) {
      let oldestNs = batch[0]!.queue[0]!.enqueueNs;
      for (const s of batch) if (s.queue[0]!.enqueueNs < oldestNs) oldestNs = s.queue[0]!.enqueueNs;
      const now = process.hrtime.bigint();
      const deadline = oldestNs + this.delayNs;
      if (now < deadline) {
        // Adaptive: the whole of what waits fits this batch, on an idle instance.
        const again =
          this.adaptive !== undefined && batch === ready && lane.inFlight === 0
            ? this.adaptive.decide(now, deadline, this.pending + this.executing)
            : deadline;
        if (again !== 0n) {
          lane.wake.arm(again);
          return;
        }
        reason = 'adaptive';
      }
    }
    this.dispatched[REASON_INDEX[reason]]! += 1;
    this.adaptive?.sent(batch.length);
    this.run(lane, batch);
  }

  private run(lane: Lane, batch: readonly Sequence[]): void {
    const steps: SequenceStep[] = new Array(batch.length);
    for (let i = 0; i < batch.length; i++) {
      const seq = batch[i]!;
      const item = seq.queue.shift()!;
      seq.running = true;
      steps[i] = new SequenceStep(item, this.backendRequest(item.request, seq), seq, this);
    }
    const count = steps.length;
    this.pending -= count;
    this.executing += count;
    lane.inFlight += 1;
    lane.instance.busy = true;
    lane.instance.inFlight += 1;
    const items: readonly BatchItem[] = this.oldest || this.maxBatch === 1 ? steps : this.bySlot(batch, steps);
    void executeBatch(lane.instance, items, items.length, this.stats, this.modelName).then(() =>
      this.finished(lane, batch, count),
    );
  }

  /** direct: each step at its slot's index, padding in the slots below the highest that have nothing to run. */
  private bySlot(batch: readonly Sequence[], steps: readonly SequenceStep[]): BatchItem[] {
    let last = 0;
    for (const seq of batch) if (seq.slot!.index > last) last = seq.slot!.index;
    const items = new Array<BatchItem | undefined>(last + 1);
    for (let i = 0; i < batch.length; i++) items[batch[i]!.slot!.index] = steps[i];
    let padding: BackendRequest | undefined;
    for (let i = 0; i <= last; i++) {
      if (items[i] !== undefined) continue;
      padding ??= this.paddingRequest(steps[0]!.original.request);
      items[i] = new PaddingStep(padding, steps[0]!.enqueueNs);
    }
    return items as BatchItem[];
  }

  /** A request shaped like `like` (the client's inputs as zeros) that the model is told is not ready. */
  private paddingRequest(like: BackendRequest): BackendRequest {
    const inputs: Tensor[] = [];
    for (const t of like.inputs) {
      // Zeros are a valid BYTES tensor too: every element an empty string.
      const bytes = t.datatype === 'BYTES' ? 4 * elementCount(t.shape) : tensorByteLength(t);
      inputs.push({ name: t.name, datatype: t.datatype, shape: t.shape, data: new Uint8Array(bytes) });
    }
    inputs.push(...paddingControls(this.controls));
    for (const s of this.states) inputs.push(s.initial);
    return { id: '', inputs, requestedOutputs: [], parameters: {}, batchSize: 1, correlationId: 0n, flags: 0 };
  }

  private backendRequest(r: BackendRequest, seq: Sequence): BackendRequest {
    const controls = this.controls.tensors(r.flags, r.correlationId);
    const states = this.states;
    if (controls.length === 0 && states.length === 0) return r;
    const own = r.inputs;
    const inputs = new Array<Tensor>(own.length + controls.length + states.length);
    let n = 0;
    for (let i = 0; i < own.length; i++) inputs[n++] = own[i]!;
    for (let i = 0; i < controls.length; i++) inputs[n++] = controls[i]!;
    const start = (r.flags & FLAG_START) !== 0;
    for (let i = 0; i < states.length; i++) {
      const s = states[i]!;
      inputs[n++] = (!start && seq.state.get(s.inputName)) || s.initial;
    }
    const requestedOutputs =
      this.stateOutputs.length > 0 ? this.withStateOutputs(r.requestedOutputs) : r.requestedOutputs;
    return {
      id: r.id,
      inputs,
      requestedOutputs,
      parameters: r.parameters,
      batchSize: r.batchSize,
      correlationId: r.correlationId,
      flags: r.flags,
      trace: r.trace,
    };
  }

  /**
   * The client's outputs and the state outputs. Clients of a sequence ask for
   * the same outputs request after request, so the last answer is kept.
   */
  private withStateOutputs(wanted: readonly string[]): readonly string[] {
    const last = this.lastWanted;
    if (last !== undefined && (last === wanted || sameNames(last, wanted))) return this.lastWithStates;
    const outs = [...wanted];
    for (const name of this.stateOutputs) if (!outs.includes(name)) outs.push(name);
    this.lastWanted = wanted;
    this.lastWithStates = outs;
    return outs;
  }

  private finished(lane: Lane, batch: readonly Sequence[], count: number): void {
    this.executing -= count;
    lane.inFlight -= 1;
    lane.instance.inFlight -= 1;
    lane.instance.busy = lane.instance.inFlight > 0;
    const now = process.hrtime.bigint();
    for (const seq of batch) {
      seq.running = false;
      seq.lastActiveNs = now;
      if (seq.ended && seq.head() === undefined) this.release(seq);
    }
    for (const l of this.lanes) this.form(l);
    if (this.pending === 0 && this.executing === 0 && this.drainWaiters.length > 0) {
      const waiters = this.drainWaiters;
      this.drainWaiters = [];
      for (const w of waiters) w();
    }
  }

  /** Arms the timer for the earliest backlog expiry (if any and none is armed sooner). */
  private armBacklogTimer(): void {
    let next = 0n;
    for (const seq of this.backlog)
      if (seq.expiresNs !== 0n && (next === 0n || seq.expiresNs < next)) next = seq.expiresNs;
    if (next === 0n) {
      if (this.backlogTimer) clearTimeout(this.backlogTimer);
      this.backlogTimer = undefined;
      this.backlogTimerAt = 0n;
      return;
    }
    if (this.backlogTimer && this.backlogTimerAt !== 0n && this.backlogTimerAt <= next) return;
    if (this.backlogTimer) clearTimeout(this.backlogTimer);
    const ms = Math.max(1, Math.ceil(Number(next - process.hrtime.bigint()) / 1e6));
    this.backlogTimerAt = next;
    this.backlogTimer = setTimeout(this.expireBacklog, ms);
  }

  /**
   * Refuses the requests of backlogged sequences whose timeout passed
   * (UNAVAILABLE, counted as rejected, as Triton); their ids then need START
   * again.
   */
  private readonly expireBacklog = (): void => {
    this.backlogTimer = undefined;
    this.backlogTimerAt = 0n;
    const now = process.hrtime.bigint();
    const expired: Sequence[] = [];
    for (let i = 0; i < this.backlog.length; ) {
      const seq = this.backlog[i]!;
      if (seq.expiresNs !== 0n && seq.expiresNs <= now) {
        this.backlog.splice(i, 1);
        expired.push(seq);
      } else i++;
    }
    for (const seq of expired) {
      if (this.active.get(seq.id) === seq) this.active.delete(seq.id);
      seq.ended = true;
      const requests = seq.queue.splice(0);
      this.pending -= requests.length;
      for (const r of requests) r.fail(Errors.sequenceBacklogTimeout(), 'REJECTED');
    }
    this.armBacklogTimer();
    if (expired.length > 0) this.resolveDrainIfIdle();
  };

  private resolveDrainIfIdle(): void {
    if (this.pending === 0 && this.executing === 0 && this.drainWaiters.length > 0) {
      const waiters = this.drainWaiters;
      this.drainWaiters = [];
      for (const w of waiters) w();
    }
  }

  private armReaper(): void {
    if (this.reaper) return;
    this.reaper = setTimeout(this.reap, Math.max(1, Number(this.idleNs / 1_000_000n)));
    this.reaper.unref();
  }

  /** Frees the slots of sequences idle for longer than max_sequence_idle_microseconds. */
  private readonly reap = (): void => {
    this.reaper = undefined;
    const now = process.hrtime.bigint();
    let next: bigint | undefined;
    let freed = false;
    for (const lane of this.lanes) {
      for (const slot of lane.slots) {
        const seq = slot.sequence;
        if (!seq || seq.running || seq.head() !== undefined) continue;
        const idle = now - seq.lastActiveNs;
        if (idle >= this.idleNs) {
          if (this.active.get(seq.id) === seq) this.active.delete(seq.id);
          seq.ended = true;
          this.release(seq);
          freed = true;
        } else {
          const left = this.idleNs - idle;
          if (next === undefined || left < next) next = left;
        }
      }
    }
    if (freed) for (const l of this.lanes) this.form(l);
    if (next !== undefined || this.sequenceCount > 0) {
      const ms = next === undefined ? Number(this.idleNs / 1_000_000n) : Number(next / 1_000_000n) + 1;
      this.reaper = setTimeout(this.reap, Math.max(1, ms));
      this.reaper.unref();
    }
  };
}
