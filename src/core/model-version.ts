/** One loaded (or failed) version of a model and the parts serving it. */
import type { BackendModel } from '../backends/backend.js';
import type { ModelConfig } from '../gen/model_config_pb.js';
import type { ModelInstance, Scheduler } from '../scheduler/scheduler.js';
import type { ModelSignature } from './request.js';
import { ModelVersionStatistics } from './statistics.js';
import type { ModelState } from './types.js';

export class ModelVersion {
  state: ModelState = 'LOADING';
  reason = '';
  readonly stats: ModelVersionStatistics;
  scheduler: Scheduler | undefined;
  instances: ModelInstance[] = [];
  backendModel: BackendModel | undefined;
  signature: ModelSignature | undefined;
  /** output name -> labels, for classification. */
  labels = new Map<string, string[]>();
  loadDurationSecs = 0;
  /** Requests accepted by the core and not yet answered. */
  inflight = 0;
  private idleWaiters: Array<() => void> = [];

  constructor(
    readonly modelName: string,
    readonly version: number,
    readonly config: ModelConfig,
  ) {
    this.stats = new ModelVersionStatistics(modelName, String(version));
  }

  /** Restarts of this version's instance processes (process-based backends). */
  get restartCount(): number {
    let n = 0;
    for (const i of this.instances) n += i.backend.restartCount ?? 0;
    return n;
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
