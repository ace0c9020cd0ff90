/**
 * Triton's ensemble scheduler: a request to an ensemble runs its steps as a
 * data-flow graph. A step starts as soon as every tensor it reads exists, so
 * independent steps run at the same time. Each step is an ordinary request
 * to its model through the server's in-process path, so it passes that
 * model's own scheduler (and its dynamic batcher, which then batches step
 * requests of many ensemble requests together). Tensors move from step to
 * step by reference: only the name changes, never the bytes.
 */
import type { InferenceCaller } from '../backends/backend.js';
import { Cancellation } from '../types/cancellation.js';
import type { ModelVersionStatistics } from '../types/statistics.js';
import type { InferRequest, InferResponse, RequestedOutput, StepTimingsSink } from '../types/api.js';
import { Errors, NereidError, asNereidError } from '../errors.js';
import type { ModelConfig } from '../gen/model_config_pb.js';
import { type Tensor, retagTensor } from '../tensor/tensor.js';
import type { ScheduledRequest } from './scheduled-request.js';
import type { Scheduler } from './scheduler.js';

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
  readonly steps: StepPlan[] = [];
  readonly slotOf = new Map<string, number>();
  /** Slot -> steps that read it. */
  readonly readers: number[][] = [];
  /** Slots of the ensemble's own inputs. */
  readonly inputSlots: number[] = [];
  readonly waits: Int32Array;

  constructor(config: ModelConfig) {
    const scheduling = config.schedulingChoice;
    if (scheduling.case !== 'ensembleScheduling') throw Errors.internal(`model '${config.name}' is not an ensemble`);
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
  }
}

function renamed(t: Tensor, name: string): Tensor {
  return t.name === name ? t : retagTensor(t, name, t.shape);
}

/** One ensemble request on its way through the graph. */
class EnsembleRun implements StepTimingsSink {
  /** Tensor per slot: undefined = not yet, null = an optional input left out. */
  readonly tensors: Array<Tensor | null | undefined>;
  readonly waits: Int32Array;
  readonly cancellation = new Cancellation();
  pendingSteps: number;
  inFlight = 0;
  finished = false;
  settled = false;
  computeInputNs = 0;
  computeInferNs = 0;
  computeOutputNs = 0;
  readonly startNs = process.hrtime.bigint();

  constructor(
    readonly scheduler: EnsembleScheduler,
    readonly item: ScheduledRequest,
    plan: EnsemblePlan,
  ) {
    this.tensors = new Array(plan.slotOf.size);
    this.waits = plan.waits.slice();
    this.pendingSteps = plan.steps.length;
  }

  stepSucceeded(_queueNs: number, computeInputNs: number, computeInferNs: number, computeOutputNs: number): void {
    this.computeInputNs += computeInputNs;
    this.computeInferNs += computeInferNs;
    this.computeOutputNs += computeOutputNs;
  }

  /** The ensemble request was cancelled: cancel the steps still waiting. */
  handleEvent(): void {
    this.cancellation.abort();
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
    if (item.done) return;
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
    const step = this.plan.steps[index]!;
    const inputs: Tensor[] = [];
    for (const input of step.inputs) {
      const t = run.tensors[input.slot];
      if (t) inputs.push(renamed(t, input.name));
    }
    const request = run.item.request;
    const stepRequest: InferRequest = {
      model: step.modelName,
      version: step.version,
      id: request.id,
      inputs,
      outputs: step.requested,
      parameters: request.parameters,
      signal: run.cancellation,
      stepTimings: run,
    };
    run.inFlight += 1;
    let pending: Promise<InferResponse>;
    try {
      pending = this.server.infer(stepRequest);
    } catch (err) {
      pending = Promise.reject(err);
    }
    pending.then(
      (response) => this.stepDone(run, index, response),
      (err: unknown) => this.stepFailed(run, index, err),
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
      const step = this.plan.steps[index]!;
      const e = asNereidError(err);
      // The step's own error, said to come from the step's model when it does not say so itself.
      const error = e.message.includes(`'${step.modelName}'`)
        ? e
        : new NereidError(e.code, e.errorClass, `in ensemble '${this.modelName}', step model '${step.modelName}' failed: ${e.message}`);
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
            `in ensemble '${this.modelName}', [request id: ${item.request.id || '<id_unknown>'}] unexpected deadlock, at least one output is not set while no more ensemble steps can be made`,
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
    this.running -= 1;
    if (this.running === 0 && this.drainWaiters.length > 0) {
      const waiters = this.drainWaiters;
      this.drainWaiters = [];
      for (const w of waiters) w();
    }
  }
}
