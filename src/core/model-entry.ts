/** What the model repository manager knows about one model name. */
import type { ModelConfig } from '../gen/model_config_pb.js';
import type { ModelDependency } from './model-dependencies.js';
import type { OverrideFolder } from './model-overrides.js';
import type { ModelVersion } from './model-version.js';

export class ModelEntry {
  /** The versions serving (or failed, or unloaded) now, by number. */
  versions = new Map<number, ModelVersion>();
  config: ModelConfig | undefined;
  /** Why the model as a whole is not served ('' when it is). */
  error = '';
  /** Fingerprint of the folder as last loaded (or last failed). */
  fingerprint = '';
  /** Poll mode: the fingerprint seen on the previous poll, for a change not loaded yet. */
  settlingFingerprint = '';
  everLoaded = false;
  /** Loaded on request (or in none/poll mode), not only as another model's dependency. */
  explicit = false;
  /** Models this one needs, from its last configuration. */
  dependencies: ModelDependency[] = [];
  /** Set while the versions are down because a dependency went away; '' otherwise. */
  dependencyLoss = '';
  /** Names of the models this one is waiting on while it loads (cycle detection). */
  waitingOn = new Set<string>();
  /** The temporary folder of file overrides the versions were loaded from, if any. */
  override: OverrideFolder | undefined;
  /** The dependencies of a load in progress (kept loaded until it ends); empty otherwise. */
  loadingDependencies: readonly ModelDependency[] = [];
  /** Unloaded to make room under the memory budget: a request loads it again. */
  evicted = false;
  /**
   * Loaded on demand (or unloaded for room) at least once since the last explicit load: not counted by strict
   * readiness.
   */
  paged = false;
  /** The on-demand load in progress, which every waiting request shares. */
  pagingIn: Promise<void> | undefined;
  /** Set while a load or unload of this model is in progress. */
  busy: Promise<void> | undefined;

  /** The repository (as configured) the folder is in. */
  repository: string | undefined;
  /** Listed in a cloud repository but not copied yet (explicit mode copies a model when it loads). */
  notCopied = false;

  /** Whether a repository holds the model (copied or not). */
  get inRepository(): boolean {
    return this.dir !== undefined || this.notCopied;
  }

  constructor(
    readonly name: string,
    public dir: string | undefined,
  ) {}

  /** Whether any version is READY. */
  get serving(): boolean {
    for (const v of this.versions.values()) if (v.state === 'READY') return true;
    return false;
  }

  dependsOn(model: string): boolean {
    return this.dependencies.some((d) => d.model === model);
  }
}
