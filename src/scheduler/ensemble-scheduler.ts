/**
 * Triton's ensemble scheduler: a request to an ensemble runs its steps as a
 * data-flow graph. A step starts as soon as every tensor it reads exists, so
 * independent steps run at the same time. Each step is an ordinary request
 * to its model through the server's in-process path, so it passes that
 * model's own scheduler (and its dynamic batcher, which then batches step
 * requests of many ensemble requests together). Tensors move from step to
 * step by reference: only the name changes, never the bytes.
 */
import type { BackendRequest, InferenceCaller } from '../backends/backend.js';
import { Cancellation } from '../types/cancellation.js';
import type { ModelVersionStatistics } from '../types/statistics.js';
import type {
  InferRequest,
  InferResponse,
  RequestTrace,
  RequestedOutput,
  StepTimingsSink,
  StreamResponse,
} from '../types/api.js';
import { Errors, NereidError, asNereidError } from '../errors.js';
import type { ModelConfig } from '../gen/model_config_pb.js';
import { type Tensor, retagTensor } from '../tensor/tensor.js';
import { type ScheduledRequest, traceQueued } from './scheduled-request.js';
import type { Scheduler } from './scheduler.js';
import { StepLimiter } from './step-limiter.js';

/** One step, with its tensors resolved to slots of a run's tensor table. */
interface StepPlan {
  readonly modelName: string;
  /** undefined: the latest READY version. */
  readonly version: string | undefined;
  /** Step input name and the slot it reads. */
  readonly inputs: ReadonlyArray<{ readonly name: string; readonly slot: number }>;
  /** Step output name and the slot it fills, in the order the step is asked for them. */
  readonly outputs: ReadonlyArray<{ readonly name: string; readonly slot: number }>;
  readonly requested: readonly RequestedOutput[];
  /** How many distinct slots the step waits for. */
  readonly waitsFor: number;
}

/** The graph of an ensemble, computed once at load. */
class EnsemblePlan {
  /** Some step is decoupled (the load-time check marked the ensemble so): responses stream. */
  readonly decoupled: boolean;
  readonly steps: StepPlan[] = [];
  readonly slotOf = new Map<string, number>();
  /** Slot -> steps that read it. */
  readonly readers: number[][] = [];
  /** Slots of the ensemble's own inputs. */
  readonly inputSlots: number[] = [];
  readonly waits: Int32Array;
  /** One per step when max_inflight_requests bounds the steps in flight, shared by every request; else empty. */
  readonly limiters: StepLimiter[];

  constructor(config: ModelConfig) {
    const scheduling = config.schedulingChoice;
    if (scheduling.case !== 'ensembleScheduling') throw Errors.internal(`model '${config.name}' is not an ensemble`);
    this.decoupled = config.modelTransactionPolicy?.decoupled === true;
    const bound = scheduling.value.maxInflightRequests;
    const slot = (name: string): number => {
      let s = this.slotOf.get(name);
      if (s === undefined) {
        s = this.slotOf.size;
        this.slotOf.set(name, s);
        this.readers.push([]);
      }
      return s;
    };
    for (const input of config.input) this.inputSlots.push(slot(input.name));
    scheduling.value.step.forEach((step, index) => {
      const inputs = Object.entries(step.inputMap).map(([name, tensor]) => ({ name, slot: slot(tensor) }));
      const outputs = Object.entries(step.outputMap).map(([name, tensor]) => ({ name, slot: slot(tensor) }));
      const distinct = new Set(inputs.map((i) => i.slot));
      for (const s of distinct) this.readers[s]!.push(index);
      this.steps.push({
        modelName: step.modelName,
        version: step.modelVersion < 0n ? undefined : String(step.modelVersion),
        inputs,
        outputs,
        requested: outputs.map((o) => ({ name: o.name })),
        waitsFor: distinct.size,
      });
    });
    this.waits = Int32Array.from(this.steps, (s) => s.waitsFor);
    this.limiters = bound > 0 ? this.steps.map(() => new StepLimiter(bound)) : [];
  }
}

function renamed(t: Tensor, name: string): Tensor {
  return t.name === name ? t : retagTensor(t, name, t.shape);
}

/**
 * What both kinds of ensemble run keep alike: the cancellation their steps
 * follow (the client's abort reaches it through handleEvent), and the steps'
 * compute times summed into the ensemble's own statistics.
 */
abstract class EnsembleRunBase implements StepTimingsSink {
  readonly cancellation = new Cancellation();
  computeInputNs = 0;
  computeInferNs = 0;
  computeOutputNs = 0;
  readonly startNs = process.hrtime.bigint();

  stepSucceeded(_queueNs: number, computeInputNs: number, computeInferNs: number, computeOutputNs: number): void {
    this.computeInputNs += computeInputNs;
    this.computeInferNs += computeInferNs;
    this.computeOutputNs += computeOutputNs;
  }

  /**
   * The client went away: the steps still waiting or running see it (a decoupled step's model through is_cancelled()).
   */
  handleEvent(): void {
    this.cancellation.abort();
  }
}

/** Ends a step's trace once the step settled, passing its outcome on. */
function endTraceAfter(pending: Promise<InferResponse>, trace: RequestTrace): Promise<InferResponse> {
  return pending.finally(() => trace.end());
}

/** One ensemble request on its way through the graph. */
class EnsembleRun extends EnsembleRunBase {
  /** Tensor per slot: undefined = not yet, null = an optional input left out. */
  readonly tensors: Array<Tensor | null | undefined>;
  readonly waits: Int32Array;
  pendingSteps: number;
  inFlight = 0;
  finished = false;
  settled = false;

  constructor(
    readonly scheduler: EnsembleScheduler,
    readonly item: ScheduledRequest,
    plan: EnsemblePlan,
  ) {
    super();
    this.tensors = new Array(plan.slotOf.size);
    this.waits = plan.waits.slice();
    this.pendingSteps = plan.steps.length;
  }

}

export class EnsembleScheduler implements Scheduler {
  private readonly plan: EnsemblePlan;
  private running = 0;
  private drainWaiters: Array<() => void> = [];

  constructor(
    private readonly modelName: string,
    config: ModelConfig,
    private readonly stats: ModelVersionStatistics,
    private readonly server: InferenceCaller,
  ) {
    this.plan = new EnsemblePlan(config);
  }

  get pendingCount(): number {
    return 0;
  }

  get executingCount(): number {
    return this.running;
  }

  drain(): Promise<void> {
    if (this.running === 0) return Promise.resolve();
    return new Promise((resolve) => this.drainWaiters.push(resolve));
  }

  enqueue(item: ScheduledRequest): void {
    item.enqueueNs = process.hrtime.bigint();
    if (item.request.trace !== undefined) traceQueued(item.request.trace, item.request, item.enqueueNs);
    if (item.done) return;
    if (this.plan.decoupled) {
      this.running += 1;
      new EnsembleStreamRun(this.modelName, this.plan, item, this.server, this.stats, () => this.settled()).start();
      return;
    }
    const run = new EnsembleRun(this, item, this.plan);
    this.running += 1;
    item.signal?.addEventListener('abort', run);
    const plan = this.plan;
    const given = item.request.inputs;
    for (let i = 0; i < given.length; i++) {
      const t = given[i]!;
      run.tensors[plan.slotOf.get(t.name)!] = t;
    }
    for (const slot of plan.inputSlots) {
      if (run.tensors[slot] === undefined) run.tensors[slot] = null; // optional input not given
      this.resolved(run, slot);
    }
    if (run.pendingSteps === 0) this.finish(run);
  }

  /** A slot now holds its tensor (or is known to stay empty): start the steps that were waiting only for it. */
  private resolved(run: EnsembleRun, slot: number): void {
    const readers = this.plan.readers[slot]!;
    for (let i = 0; i < readers.length; i++) {
      const s = readers[i]!;
      if (--run.waits[s]! === 0) this.launch(run, s);
    }
  }

  private launch(run: EnsembleRun, index: number): void {
    if (run.finished || run.item.done) {
      // Failed or cancelled: no new steps.
      run.pendingSteps -= 1;
      this.settle(run);
      return;
    }
    const limiter = this.plan.limiters[index];
    if (limiter === undefined) this.send(run, index);
    else limiter.acquire(run.cancellation, () => this.sendLimited(run, index, limiter));
  }

  /** A step let through by its limiter: sent unless the run ended while it waited; the slot is freed when it ends. */
  private sendLimited(run: EnsembleRun, index: number, limiter: StepLimiter): void {
    if (run.finished || run.item.done) {
      limiter.release();
      run.pendingSteps -= 1;
      this.settle(run);
      return;
    }
    this.send(run, index, limiter);
  }

  private send(run: EnsembleRun, index: number, limiter?: StepLimiter): void {
    const step = this.plan.steps[index]!;
    const inputs: Tensor[] = [];
    for (const input of step.inputs) {
      const t = run.tensors[input.slot];
      if (t) inputs.push(renamed(t, input.name));
    }
    const stepRequest = stepRequestOf(step, run.item.request, inputs, run.cancellation, run);
    run.inFlight += 1;
    let pending: Promise<InferResponse>;
    try {
      pending = this.server.infer(stepRequest);
    } catch (err) {
      pending = Promise.reject(err);
    }
    // Each step is a trace of its own whose parent_id is the ensemble's.
    if (stepRequest.trace !== undefined) pending = endTraceAfter(pending, stepRequest.trace);
    pending.then(
      (response) => {
        limiter?.release();
        this.stepDone(run, index, response);
      },
      (err: unknown) => {
        limiter?.release();
        this.stepFailed(run, index, err);
      },
    );
  }

  private stepDone(run: EnsembleRun, index: number, response: InferResponse): void {
    run.inFlight -= 1;
    run.pendingSteps -= 1;
    const step = this.plan.steps[index]!;
    const outputs = response.outputs;
    for (let i = 0; i < step.outputs.length; i++) run.tensors[step.outputs[i]!.slot] = outputs[i];
    for (let i = 0; i < step.outputs.length; i++) this.resolved(run, step.outputs[i]!.slot);
    if (run.pendingSteps === 0) this.finish(run);
    else this.settle(run);
  }

  private stepFailed(run: EnsembleRun, index: number, err: unknown): void {
    run.inFlight -= 1;
    run.pendingSteps -= 1;
    if (!run.finished) {
      run.finished = true;
      const error = stepError(this.modelName, this.plan.steps[index]!, err);
      run.item.fail(error, run.cancellation.aborted ? 'CANCELED' : 'OTHER');
    }
    // Steps that have not started will not start; launch() counts them down.
    this.abandonWaiting(run);
    this.settle(run);
  }

  /** After a failure, the steps never launched are done too. */
  private abandonWaiting(run: EnsembleRun): void {
    for (let s = 0; s < run.waits.length; s++) {
      if (run.waits[s]! > 0) {
        run.waits[s] = -1;
        run.pendingSteps -= 1;
      }
    }
  }

  private finish(run: EnsembleRun): void {
    if (run.finished || run.item.done) {
      run.finished = true;
      this.settle(run);
      return;
    }
    run.finished = true;
    const item = run.item;
    const names = item.request.requestedOutputs;
    const outputs: Tensor[] = new Array(names.length);
    for (let i = 0; i < names.length; i++) {
      const name = names[i]!;
      const slot = this.plan.slotOf.get(name);
      const t = slot === undefined ? undefined : run.tensors[slot];
      if (!t) {
        item.fail(
          Errors.invalidRequest(
            `in ensemble '${this.modelName}', [request id: ${item.request.id || '<id_unknown>'}] ` +
            `unexpected deadlock, at least one output is not set while no more ensemble steps can be made`,
          ),
          'OTHER',
        );
        this.settle(run);
        return;
      }
      outputs[i] = renamed(t, name);
    }
    const queueNs = Number(run.startNs - item.enqueueNs);
    this.stats.recordExecution(item.request.batchSize, 1, run.computeInputNs, run.computeInferNs, run.computeOutputNs);
    item.succeed({ outputs }, queueNs, run.computeInputNs, run.computeInferNs, run.computeOutputNs);
    this.settle(run);
  }

  /** Ends the run once nothing of it is in flight. */
  private settle(run: EnsembleRun): void {
    if (run.settled || !run.finished || run.inFlight > 0 || run.pendingSteps > 0) return;
    run.settled = true;
    run.item.signal?.removeEventListener('abort', run);
    this.settled();
  }

  private settled(): void {
    this.running -= 1;
    if (this.running === 0 && this.drainWaiters.length > 0) {
      const waiters = this.drainWaiters;
      this.drainWaiters = [];
      for (const w of waiters) w();
    }
  }
}

// ---- ensembles with decoupled steps
//
// An ensemble with decoupled steps, run the way Triton's ensemble scheduler
// runs one: every response of a step is one more set of values for the
// step's output tensors, and each set flows on to the steps that read it.
//
// Values are told apart by an iteration number. The ensemble's inputs are
// iteration 0; the first response of a step launched for iteration i
// carries i on, every later response of it starts a new iteration. A step
// runs once per iteration for which all its inputs exist (the load-time
// check makes sure a step never mixes tensors of two decoupled origins), and
// the ensemble sends a response each time all requested outputs exist for
// one iteration. The final flag goes out when no step is running any more,
// on the last response or alone, and zero responses are fine, as for any
// decoupled model.

/** null: an optional input left out, or an output a response did not carry. */
type Value = Tensor | null;

/** One iteration's value of one tensor, and how many readers (steps, the response) have yet to take it. */
class Entry {
  constructor(
    readonly value: Value,
    public uses: number,
  ) {}
}

export class EnsembleStreamRun extends EnsembleRunBase {
  /** Slot -> iteration -> value. */
  private readonly values: Array<Map<number, Entry>>;
  /** Slots of the requested outputs, in the order the response lists them (-1: not an ensemble tensor). */
  private readonly outputSlots: number[];
  private readonly isOutput: boolean[];
  private nextIteration = 1;
  /** Step launches whose final response has not come yet. */
  private running = 0;
  private failed = false;
  private ended = false;

  constructor(
    private readonly ensembleName: string,
    private readonly plan: EnsemblePlan,
    private readonly item: ScheduledRequest,
    private readonly server: InferenceCaller,
    private readonly stats: ModelVersionStatistics,
    /** Called once, when nothing of the run is left in flight. */
    private readonly onSettled: () => void,
  ) {
    super();
    this.values = Array.from({ length: plan.slotOf.size }, () => new Map<number, Entry>());
    this.outputSlots = item.request.requestedOutputs.map((n) => plan.slotOf.get(n) ?? -1);
    this.isOutput = new Array<boolean>(plan.slotOf.size).fill(false);
    for (const s of this.outputSlots) if (s >= 0) this.isOutput[s] = true;
  }


  start(): void {
    // The core leaves the outcome of a request it handed over to the run.
    this.item.executing = true;
    this.item.signal?.addEventListener('abort', this);
    if (this.item.signal?.aborted) this.cancellation.abort();
    const given = this.item.request.inputs;
    for (const slot of this.plan.inputSlots) this.set(slot, 0, null);
    for (let i = 0; i < given.length; i++) {
      const t = given[i]!;
      this.set(this.plan.slotOf.get(t.name)!, 0, t);
    }
    this.launchReady(this.plan.inputSlots, 0);
    this.afterEvent(undefined);
  }

  private set(slot: number, it: number, value: Value): void {
    const uses = this.plan.readers[slot]!.length + (this.isOutput[slot] ? 1 : 0);
    // A tensor no step reads and the client did not ask for is not kept.
    if (uses > 0) this.values[slot]!.set(it, new Entry(value, uses));
  }

  /** Takes one use of a value; the last use drops it. */
  private take(slot: number, it: number): Value | undefined {
    const m = this.values[slot]!;
    const e = m.get(it);
    if (e === undefined) return undefined;
    if (--e.uses === 0) m.delete(it);
    return e.value;
  }

  /** Launches, once each, the steps reading `slots` whose inputs all exist for iteration `it`. */
  private launchReady(slots: readonly number[], it: number): void {
    const ready = new Set<number>();
    for (const slot of slots) {
      for (const s of this.plan.readers[slot]!) {
        if (ready.has(s)) continue;
        let all = true;
        for (const input of this.plan.steps[s]!.inputs) {
          if (!this.values[input.slot]!.has(it)) {
            all = false;
            break;
          }
        }
        if (all) ready.add(s);
      }
    }
    for (const s of ready) this.launch(s, it);
  }

  private launch(index: number, it: number): void {
    const step = this.plan.steps[index]!;
    const inputs: Tensor[] = [];
    const taken = new Set<number>();
    for (const input of step.inputs) {
      const t = this.values[input.slot]!.get(it)?.value;
      if (t) inputs.push(renamed(t, input.name));
      taken.add(input.slot);
    }
    for (const slot of taken) this.take(slot, it);
    const stepRequest = stepRequestOf(step, this.item.request, inputs, this.cancellation, this);
    this.running += 1;
    const limiter = this.plan.limiters[index];
    if (limiter === undefined) {
      void this.consume(index, it, stepRequest);
      return;
    }
    limiter.acquire(this.cancellation, () => {
      if (this.failed || this.ended) {
        // The run failed while the step waited: it is not sent.
        limiter.release();
        this.running -= 1;
        this.afterEvent(undefined);
        return;
      }
      void this.consume(index, it, stepRequest, limiter);
    });
  }

  /** Reads one step launch's responses as they come; its limiter slot (if any) is freed with the final one. */
  private async consume(
    index: number,
    iteration: number,
    stepRequest: InferRequest,
    limiter?: StepLimiter,
  ): Promise<void> {
    let first = true;
    let open = true;
    try {
      const responses =
        this.server.inferStream !== undefined ? this.server.inferStream(stepRequest) : this.single(stepRequest);
      for await (const r of responses) {
        if (r.final) {
          open = false;
          limiter?.release();
          this.running -= 1;
        }
        let outputs: Tensor[] | undefined;
        if (r.error !== undefined) this.fail(index, r.error);
        else if (r.response !== undefined && !this.failed) {
          const it = first ? iteration : this.nextIteration++;
          first = false;
          outputs = this.store(index, it, r.response.outputs);
        }
        this.afterEvent(outputs);
        if (r.final) return;
      }
      throw Errors.internal('the step ended without its final response');
    } catch (err) {
      if (open) {
        limiter?.release();
        this.running -= 1;
      }
      this.fail(index, err);
      this.afterEvent(undefined);
    } finally {
      stepRequest.trace?.end();
    }
  }

  private async *single(request: InferRequest): AsyncIterable<StreamResponse> {
    const response = await this.server.infer(request);
    yield { response, error: undefined, final: true };
  }

  /**
   * One response's outputs become iteration `it` of the step's tensors and
   * the steps this makes ready are launched. Returns the ensemble response
   * it completes, if any.
   */
  private store(index: number, it: number, outputs: readonly Tensor[]): Tensor[] | undefined {
    const step = this.plan.steps[index]!;
    const slots: number[] = [];
    let touchesOutput = false;
    for (const out of step.outputs) {
      let value: Value = null;
      for (const t of outputs) {
        if (t.name === out.name) {
          value = t;
          break;
        }
      }
      this.set(out.slot, it, value);
      slots.push(out.slot);
      if (this.isOutput[out.slot]) touchesOutput = true;
    }
    const response = touchesOutput ? this.collectOutputs(it) : undefined;
    this.launchReady(slots, it);
    return response;
  }

  /** The requested outputs of iteration `it`, if all exist (each is then taken). */
  private collectOutputs(it: number): Tensor[] | undefined {
    for (const slot of this.outputSlots) if (slot < 0 || !this.values[slot]!.has(it)) return undefined;
    const names = this.item.request.requestedOutputs;
    const outputs: Tensor[] = [];
    for (let i = 0; i < this.outputSlots.length; i++) {
      const t = this.take(this.outputSlots[i]!, it);
      if (t) outputs.push(renamed(t, names[i]!));
    }
    return outputs;
  }

  private fail(index: number, err: unknown): void {
    if (this.failed || this.ended) return;
    this.failed = true;
    const error = stepError(this.ensembleName, this.plan.steps[index]!, err);
    // The steps still streaming stop: nobody reads them any more.
    this.cancellation.abort();
    this.item.fail(error, this.item.signal?.aborted ? 'CANCELED' : 'OTHER');
  }

  /** After each step event: sends what became complete, and ends the run once no step runs. */
  private afterEvent(outputs: Tensor[] | undefined): void {
    if (this.ended) return;
    const last = this.running === 0;
    if (!this.failed) {
      const sender = this.item.request.responseSender!;
      if (outputs !== undefined) sender.send({ outputs }, last);
      else if (last) sender.send(undefined, true);
      if (last) {
        const item = this.item;
        const queueNs = Number(this.startNs - item.enqueueNs);
        this.stats.recordExecution(
          item.request.batchSize,
          1,
          this.computeInputNs,
          this.computeInferNs,
          this.computeOutputNs,
        );
        item.succeed({ outputs: [] }, queueNs, this.computeInputNs, this.computeInferNs, this.computeOutputNs);
      }
    }
    if (last) {
      this.ended = true;
      this.item.signal?.removeEventListener('abort', this);
      this.onSettled();
    }
  }
}

/** A step's error as the ensemble's: said to come from the step's model when it does not say so itself. */
function stepError(ensemble: string, step: StepPlan, err: unknown): NereidError {
  const e = asNereidError(err);
  if (e.message.includes(`'${step.modelName}'`)) return e;
  return new NereidError(
    e.code,
    e.errorClass,
    `in ensemble '${ensemble}', step model '${step.modelName}' failed: ${e.message}`,
  );
}

/** The request a step gets: its model, the ensemble request's id and parameters, its own inputs, a child trace. */
function stepRequestOf(
  step: StepPlan,
  request: BackendRequest,
  inputs: Tensor[],
  signal: InferRequest['signal'],
  stepTimings: InferRequest['stepTimings'],
): InferRequest {
  return {
    model: step.modelName,
    version: step.version,
    id: request.id,
    inputs,
    outputs: step.requested,
    parameters: request.parameters,
    signal,
    stepTimings,
    trace: request.trace?.spawn(),
  };
}
