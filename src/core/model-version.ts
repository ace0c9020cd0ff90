/** One loaded (or failed) version of a model and the parts serving it. */
import type { BackendModel } from '../backends/backend.js';
import type { ModelConfig } from '../gen/model_config_pb.js';
import type { ModelInstance, Scheduler } from '../scheduler/scheduler.js';
import type { ModelSignature } from './request.js';
import { ModelVersionStatistics } from '../types/statistics.js';
import type { ModelState } from '../types/api.js';

/** Called after a version's state or reason changed. */
export type VersionStateListener = (v: ModelVersion, previous: ModelState) => void;

let loads = 0;
/** A clock of uses: the model paging's least-recently-used order (a counter costs a request less than a time). */
let uses = 0;

export class ModelVersion {
  /**
   * Numbers each load of a version: a reload keeps the version number, so the
   * response cache keys on this too (what the old load stores while it drains
   * is never an answer of the new one).
   */
  readonly load = ++loads;
  private currentState: ModelState = 'LOADING';
  reason = '';
  /** Set by the model repository manager to hear about state changes. */
  stateListener: VersionStateListener | undefined;
  readonly stats: ModelVersionStatistics;
  scheduler: Scheduler | undefined;
  instances: ModelInstance[] = [];
  backendModel: BackendModel | undefined;
  signature: ModelSignature | undefined;
  /** output name -> labels, for classification. */
  labels = new Map<string, string[]>();
  loadDurationSecs = 0;
  /** model_transaction_policy.decoupled: responses go through a ResponseSender. */
  readonly decoupled: boolean;
  /** Time the warm-up samples took (0: none configured). */
  warmupDurationSecs = 0;
  /** response_cache.enable (decoupled models are never cached): used when the server has a cache. */
  readonly cached: boolean;
  /** The model's folder on local disk (a cloud model's local copy); undefined for a version made without one. */
  directory: string | undefined;
  /** Requests accepted by the core and not yet answered. */
  inflight = 0;
  /** When the version was last used (a request or its load), on the `uses` clock. */
  lastUsed = ++uses;
  private idleWaiters: Array<() => void> = [];

  constructor(
    readonly modelName: string,
    readonly version: number,
    readonly config: ModelConfig,
  ) {
    this.stats = new ModelVersionStatistics(modelName, String(version));
    this.decoupled = config.modelTransactionPolicy?.decoupled === true;
    this.cached = config.responseCache?.enable === true && !this.decoupled;
  }

  get state(): ModelState {
    return this.currentState;
  }

  set state(next: ModelState) {
    const previous = this.currentState;
    if (previous === next) return;
    this.currentState = next;
    this.stateListener?.(this, previous);
  }

  /** Sets the state and its reason together (the listener sees both). */
  setState(next: ModelState, reason: string): void {
    this.reason = reason;
    this.state = next;
  }

  /** Restarts of this version's instance processes (process-based backends). */
  get restartCount(): number {
    let n = 0;
    for (const i of this.instances) n += i.backend.restartCount ?? 0;
    return n;
  }

  /** Marks the version as just used. */
  touch(): void {
    this.lastUsed = ++uses;
  }

  requestDone(): void {
    this.inflight -= 1;
    if (this.inflight === 0 && this.idleWaiters.length > 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }

  /** Resolves once no request is in flight. */
  idle(): Promise<void> {
    if (this.inflight === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Closes instances and the backend model; errors are logged by the caller. */
  async close(): Promise<void> {
    const instances = this.instances;
    this.instances = [];
    await Promise.allSettled(instances.map((i) => i.backend.close()));
    const bm = this.backendModel;
    this.backendModel = undefined;
    if (bm) await bm.close();
  }
}
