/**
 * The model repository manager: which models exist, which versions serve,
 * and every change to that. It loads and unloads models (per control mode),
 * polls the repositories, loads a model's dependencies before the model,
 * swaps reloaded versions in without a gap, and tells listeners about every
 * state change. `Server` is the public facade over it.
 *
 * Invariants:
 * - Loads and unloads of one model are serialised; different models load
 *   concurrently, at most `loadThreadCount` at a time.
 * - A (re)load builds the new versions beside the old ones, swaps them in,
 *   and only then drains and closes the old ones. A reload that fails leaves
 *   the old versions serving.
 * - A model with dependencies serves only while its dependencies serve.
 */
import { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import { Errors, NereidError, asNereidError } from '../errors.js';
import {
  ModelSources,
  fingerprintDir,
  isDuplicate,
  isNotCopied,
  listModels,
  type RepositoryEntry,
  type RepositoryListing,
} from '../repository/index.js';
import { Limiter } from './limiter.js';
import {
  DependencyErrors,
  type DependencyResolver,
  type ModelDependency,
  UNLOADED,
  dependencyProblem,
  ensembleDependencies,
  versionFailures,
} from './model-dependencies.js';
import { ModelEntry } from './model-entry.js';
import { checkEnsembleSteps } from './ensembles.js';
import {
  type LoadedModel,
  type LoaderOptions,
  type PreparedModel,
  describeLoadError,
  loadPreparedVersions,
  prepareModel,
} from './model-loader.js';
import { type OverrideFolder, checkConfigOverride, validateModelName, writeOverrideFolder } from './model-overrides.js';
import type { ModelVersion } from './model-version.js';
import { MEMORY_BUDGET_REASON, ModelPager, type PagingOptions, pinnedByConfig } from './model-pager.js';
import type { ModelControlMode, ModelState, RepositoryIndexEntry } from '../types/api.js';

/** Reason of a version taken down by an explicit unload (Triton's word). */
export { UNLOADED } from './model-dependencies.js';

/** Fingerprint recorded after a load with overrides: never equal to a folder's. */
const OVERRIDDEN = 'overridden';

/** Triton's default for --model-load-thread-count. */
export const DEFAULT_LOAD_THREAD_COUNT = 4;

export interface ModelRepositoryManagerOptions {
  repositories: readonly string[];
  /** Folder for local copies of s3://, gs:// and as:// models (`--model-cache-dir`). */
  modelCacheDir?: string;
  controlMode: ModelControlMode;
  loader: LoaderOptions;
  logger: Logger;
  /** Models loading at once (--model-load-thread-count). Default 4. */
  loadThreadCount?: number;
  /** Poll mode: seconds between polls; 0 or less polls only when asked (pollNow). */
  pollSecs?: number;
  /** Finds a configuration's dependencies. Default: an ensemble's composing models. */
  dependencies?: DependencyResolver;
  /** Model paging under a memory budget (`--model-memory-budget`); none when unset. */
  paging?: PagingOptions;
}

/** One change of a version's state, as listeners hear it. */
export interface VersionStateChange {
  model: string;
  version: number;
  state: ModelState;
  previous: ModelState;
  reason: string;
  /** The version itself (possibly not reachable by requests yet). */
  source: ModelVersion;
}

export interface ModelRepositoryManagerEvents {
  /** A version became READY and is reachable by requests. */
  versionReady: [ModelVersion];
  /** A version is being closed (after its requests drained). */
  versionUnloaded: [ModelVersion];
  /** Any state change of any version, including versions still being built. */
  stateChange: [VersionStateChange];
}

export interface LoadRequest {
  /** The repository the model must come from (the repository-name form of the API). */
  repository?: string;
  /** ModelConfig JSON replacing config.pbtxt; forces a reload. */
  config?: string;
  /** `file:<path>` contents making up the model folder (needs `config`); forces a reload. */
  files?: Readonly<Record<string, Uint8Array>>;
  /** A folder to load from instead of the model's own; forces a reload. */
  dir?: string;
  /** Set when the user (or none/poll mode) asked for this model, not only a dependent of it. */
  explicit?: boolean;
  /** The temporary folder of file overrides (owned by the entry once loaded from). */
  override?: OverrideFolder;
  /** Fingerprint already taken by the caller (poll mode). */
  fingerprint?: string;
  /** A load a request asked for (model paging), not the user or the control mode. */
  onDemand?: boolean;
  /** The models whose loads led here, for cycle detection. */
  chain?: readonly string[];
}

/** Triton's per-version load failure text: "version N is at STATE state: reason;" for each. */

export class ModelRepositoryManager extends EventEmitter<ModelRepositoryManagerEvents> {
  readonly controlMode: ModelControlMode;
  private readonly options: ModelRepositoryManagerOptions;
  private readonly logger: Logger;
  private readonly models = new Map<string, ModelEntry>();
  private readonly slots: Limiter;
  /** Cloud models copied at once as they load (each copy runs its transfers in parallel too). */
  private readonly copies = new Limiter(16);
  private readonly dependenciesOf: DependencyResolver;
  private readonly loader: LoaderOptions;
  private stopping = false;
  private pollTimer: NodeJS.Timeout | undefined;
  private polling: Promise<void> | undefined;
  /** The repositories' sources, kept across polls (clients, last good listings). */
  private readonly sources: ModelSources;
  /** Model paging under a memory budget; undefined without one. */
  readonly pager: ModelPager | undefined;

  constructor(options: ModelRepositoryManagerOptions) {
    super();
    this.options = options;
    this.controlMode = options.controlMode;
    this.logger = options.logger;
    this.sources = new ModelSources({ cacheDir: options.modelCacheDir, logger: options.logger });
    const threads = options.loadThreadCount ?? DEFAULT_LOAD_THREAD_COUNT;
    if (!Number.isInteger(threads) || threads < 1) {
      throw Errors.config(`--model-load-thread-count must be at least 1, got ${threads}`);
    }
    this.slots = new Limiter(threads);
    const retries = options.loader.retryCount ?? 0;
    if (!Number.isInteger(retries) || retries < 0) {
      throw Errors.config(`--model-load-retry-count must be 0 or more, got ${retries}`);
    }
    this.dependenciesOf = options.dependencies ?? ensembleDependencies;
    this.loader = { ...options.loader, onVersionState: (v, previous) => this.versionStateChanged(v, previous) };
    this.pager =
      options.paging === undefined
        ? undefined
        : new ModelPager(options.paging, {
            entries: () => this.models.values(),
            evict: (e) => this.evictEntry(e),
            logger: this.logger,
          });
    if (this.pager) {
      const pager = this.pager;
      this.loader.onMemoryGrew = (v, bytes) => pager.grew(v, bytes);
    }
  }

  // ---- start and stop ----------------------------------------------------

  /**
   * Lists the repositories and loads the start-up models: every model in
   * none and poll modes, `startupModels` ('*' for all) in explicit mode.
   * Resolves with the failure reasons (empty when everything loaded).
   */
  async start(startupModels: readonly string[] = []): Promise<string[]> {
    await this.pager?.history?.open();
    // Cloud models are copied as each loads, so that downloads overlap with loading the models copied first.
    const found = await this.listRepositories(false);
    let toLoad: string[];
    if (this.controlMode === 'explicit') toLoad = startupModels.includes('*') ? [...found.keys()] : [...startupModels];
    else toLoad = [...found.keys()];
    this.applyListing(found);
    const failures: string[] = found.failures.map((f) => f.message);
    for (const pin of this.pager?.pins ?? []) {
      if (!found.has(pin)) failures.push(`--model-pin=${pin}: no model repository holds a model named '${pin}'`);
    }
    const load = async (name: string) => {
      const entry = this.models.get(name);
      if (!entry) {
        failures.push(`failed to load '${name}', failed to poll from model repository`);
        return;
      }
      // A dependency may have been loaded (or be loading) for a model listed earlier.
      if (entry.busy) await entry.busy.catch(() => undefined);
      if (!entry.everLoaded) await this.loadEntry(entry, { explicit: true }).catch(() => undefined);
      else entry.explicit = true;
      const reason = this.failureOf(entry);
      if (reason) failures.push(Errors.loadFailed(name, reason).message);
    };
    // With scores kept from before a restart (docs/paging.md#after-a-restart), the models never requested load
    // together first, then the others one at a time, least requested first: a load that needs room unloads the
    // coldest loaded model, so the ones that stay are the most requested.
    const score = (name: string) => this.pager?.policy.score(name) ?? 0;
    const scored = toLoad.filter((name) => score(name) > 0).sort((a, b) => score(a) - score(b));
    await Promise.all(toLoad.filter((name) => score(name) === 0).map(load));
    for (const name of scored) await load(name);
    if (this.controlMode === 'poll') this.startPolling();
    return failures;
  }

  /** Stops polling, waits for in-flight requests (at most `timeoutMs`), then closes every version. */
  async stop(timeoutMs: number): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    if (this.pollTimer) clearInterval(this.pollTimer);
    if (this.polling) await this.polling;
    // A load still building would swap its versions in after this closed everything: let it finish first.
    for (const e of this.models.values()) while (e.busy) await e.busy.catch(() => undefined);
    const all = [...this.models.values()].flatMap((e) => [...e.versions.values()]);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), timeoutMs);
    });
    const result = await Promise.race([Promise.all(all.map((v) => v.idle())).then(() => 'idle' as const), timedOut]);
    clearTimeout(timer);
    if (result === 'timeout') {
      this.logger.warn({ timeoutSecs: timeoutMs / 1000 }, 'exit timeout reached with requests still in flight');
    }
    await Promise.all(all.map((v) => this.closeVersion(v)));
    await Promise.all([...this.models.values()].map((e) => e.override?.remove()));
    await this.sources.close();
    await this.pager?.history?.close();
  }

  // ---- reading the state -------------------------------------------------

  /** The entry of a model name, if the repositories have (or had) one. */
  entry(name: string): ModelEntry | undefined {
    return this.models.get(name);
  }

  /** Every known model name, sorted. */
  modelNames(): string[] {
    return [...this.models.keys()].sort();
  }

  /** The version a request addresses, or the error Triton gives. */
  resolveVersion(name: string, version: string | undefined): ModelVersion {
    const entry = this.models.get(name);
    if (!entry) throw Errors.modelNotFound(name);
    if (version === undefined || version === '' || version === '-1') {
      let best: ModelVersion | undefined;
      for (const v of entry.versions.values()) {
        if (v.state === 'READY' && (!best || v.version > best.version)) best = v;
      }
      if (!best) throw Errors.modelNoAvailableVersions(name);
      return best;
    }
    if (!/^\d+$/.test(version))
      throw Errors.invalidModelVersion(version, /^-?\d+$/.test(version) ? 'non-positive' : 'not-integer');
    const v = entry.versions.get(Number(version));
    if (!v) throw Errors.modelVersionNotFound(name, version);
    if (v.state !== 'READY') throw Errors.modelVersionNotReady(name, version);
    return v;
  }

  /** READY versions of one model, ascending. */
  readyVersionsOf(name: string): ModelVersion[] {
    const entry = this.models.get(name);
    if (!entry) return [];
    return [...entry.versions.values()].filter((v) => v.state === 'READY').sort((a, b) => a.version - b.version);
  }

  /** Every READY version, for metrics and dashboards. */
  readyVersions(): ModelVersion[] {
    const out: ModelVersion[] = [];
    for (const e of this.models.values()) for (const v of e.versions.values()) if (v.state === 'READY') out.push(v);
    return out;
  }

  /**
   * Strict readiness: every model that was asked to load serves every version
   * (unloaded ones aside); a model on its first load (or warm-up) is not ready yet.
   */
  allReady(): boolean {
    for (const entry of this.models.values()) {
      if (!entry.everLoaded && !entry.busy) continue;
      // Paging is not a failure: a model unloaded for room, or loaded by a request, does not count.
      if (entry.paged) continue;
      if (entry.error) return false;
      if (entry.busy && entry.versions.size === 0) return false;
      for (const v of entry.versions.values()) if (v.state !== 'READY' && v.reason !== UNLOADED) return false;
    }
    return true;
  }

  /** Models that name `model` as a dependency. */
  dependentsOf(model: string): ModelEntry[] {
    return [...this.models.values()].filter((e) => e.dependsOn(model));
  }

  /**
   * The configured repository a repository name designates: the repository
   * as given on the command line, or its last path component. Throws when
   * none matches (or more than one does).
   */
  repositoryNamed(repository: string): string {
    const matches = this.options.repositories.filter(
      (r) => r === repository || r.replace(/[/\\]+$/, '').split(/[/\\]/).pop() === repository,
    );
    if (matches.length !== 1) {
      const known = this.options.repositories.map((r) => r.replace(/[/\\]+$/, '').split(/[/\\]/).pop()).join(', ');
      throw Errors.unknownRepository(
        matches.length === 0
          ? `no model repository named '${repository}' (the server's repositories: ${known})`
          : `model repository name '${repository}' is ambiguous: ${matches.join(', ')}`,
      );
    }
    return matches[0]!;
  }

  async index(readyOnly = false, repository?: string): Promise<RepositoryIndexEntry[]> {
    const scope = repository === undefined || repository === '' ? undefined : this.repositoryNamed(repository);
    if (this.controlMode !== 'none') await this.refreshIndex();
    const out: RepositoryIndexEntry[] = [];
    for (const name of [...this.models.keys()].sort()) {
      const entry = this.models.get(name)!;
      if (scope !== undefined && entry.repository !== scope) continue;
      const versions = [...entry.versions.values()].sort((a, b) => a.version - b.version);
      if (entry.error && versions.length === 0) {
        if (!readyOnly) out.push({ name, state: 'UNAVAILABLE', reason: entry.error });
        continue;
      }
      if (versions.length === 0) {
        if (!readyOnly) out.push({ name });
        continue;
      }
      for (const v of versions) {
        if (readyOnly && v.state !== 'READY') continue;
        const e: RepositoryIndexEntry = { name, version: String(v.version), state: v.state };
        const bytes = this.pager?.memoryOf(v);
        if (bytes !== undefined) e.memoryBytes = bytes;
        const restarts = v.state === 'READY' ? v.restartCount : 0;
        if (v.reason) e.reason = v.reason;
        else if (restarts > 0)
          e.reason = `instance processes restarted ${restarts} time${restarts === 1 ? '' : 's'} after dying`;
        out.push(e);
      }
    }
    return out;
  }

  // ---- explicit control --------------------------------------------------

  /**
   * Explicit mode: loads (or reloads) a model and the models it depends on.
   * Throws Triton's errors: INTERNAL "failed to load '<m>', ..." when the
   * repository has no such model, INVALID_ARG "load failed for model ..."
   * when it does not load.
   */
  async load(name: string, request: LoadRequest = {}): Promise<void> {
    if (this.controlMode !== 'explicit') throw Errors.controlModeDisallows();
    if (this.stopping) throw Errors.serverStopping();
    validateModelName(name);
    const scope = request.repository ? this.repositoryNamed(request.repository) : undefined;
    const files = request.files && Object.keys(request.files).length > 0 ? request.files : undefined;
    if (files && request.config === undefined) {
      throw Errors.pollFailed(name, "Load parameter 'config' must be specified for model file override");
    }
    if (request.config !== undefined) this.checkOverride(name, request.config);
    await this.refreshIndex();
    let entry = this.models.get(name);
    let override: OverrideFolder | undefined;
    if (files) {
      // The override folder is the whole model: the repository need not hold it.
      override = await this.recordPollFailure(name, () => writeOverrideFolder(name, files));
      if (!entry) {
        entry = new ModelEntry(name, undefined);
        this.models.set(name, entry);
      }
    } else if (!entry || !entry.inRepository || (scope !== undefined && entry.repository !== scope)) {
      if (entry?.error && scope === undefined) throw Errors.loadFailed(name, entry.error);
      throw Errors.internal(`failed to load '${name}', failed to poll from model repository`);
    }
    await this.loadEntry(entry, { config: request.config, dir: override?.dir, override, explicit: true });
    const failure = this.failureOf(entry);
    if (failure) throw Errors.loadFailed(name, failure);
  }

  /** A bad config override fails the request; a model not serving records the reason. */
  private checkOverride(name: string, config: string): void {
    try {
      checkConfigOverride(name, config);
    } catch (err) {
      this.notePollFailure(name, err);
      throw err;
    }
  }

  private async recordPollFailure<T>(name: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      this.notePollFailure(name, err);
      throw err;
    }
  }

  /** A model that is not serving shows why the last load request could not even start. */
  private notePollFailure(name: string, err: unknown): void {
    const entry = this.models.get(name);
    if (entry && !entry.serving && !entry.busy) entry.error = describeLoadError(err);
  }

  /**
   * Explicit mode: unloads a model (a no-op for an unknown name, as Triton).
   * Models depending on it stop serving. With `unloadDependents`, the models
   * it depends on that were loaded only for it (and serve nothing else) are
   * unloaded too.
   */
  async unload(name: string, options: { unloadDependents?: boolean; repository?: string } = {}): Promise<void> {
    if (this.controlMode !== 'explicit') throw Errors.controlModeDisallows();
    const scope = options.repository ? this.repositoryNamed(options.repository) : undefined;
    const entry = this.models.get(name);
    if (!entry || (scope !== undefined && entry.repository !== scope)) return;
    await this.unloadEntry(entry, UNLOADED);
    await this.dependencyGone(name, true);
    if (!options.unloadDependents) return;
    for (const dep of entry.dependencies) {
      const d = this.models.get(dep.model);
      if (!d || d.explicit || !d.serving) continue;
      if (this.dependentsOf(dep.model).some((e) => e.serving)) continue;
      await this.unload(dep.model, { unloadDependents: true });
    }
  }

  // ---- polling -----------------------------------------------------------

  /** Poll mode: one pass now (also what the timer runs). Resolves when it is done. */
  pollNow(): Promise<void> {
    if (!this.polling) this.polling = this.pollRepository().finally(() => (this.polling = undefined));
    return this.polling;
  }

  private startPolling(): void {
    const secs = this.options.pollSecs ?? 15;
    if (secs <= 0) return;
    this.pollTimer = setInterval(() => void this.pollNow(), secs * 1000);
    this.pollTimer.unref();
  }

  /**
   * Poll mode: loads added models, reloads changed ones, unloads removed ones.
   * A new or changed folder loads only once its fingerprint is the same on two
   * polls in a row, so files still being copied are not loaded half-written.
   * A failed load is not retried until the folder changes again; polling goes on.
   */
  private async pollRepository(): Promise<void> {
    try {
      const found = await this.listRepositories();
      this.applyListing(found);
      for (const [name, entry] of [...this.models]) {
        if (this.stopping) return;
        if (!found.has(name)) {
          if (entry.busy) await entry.busy.catch(() => undefined);
          await this.unloadEntry(entry, UNLOADED);
          this.models.delete(name);
          await this.dependencyGone(name, false);
          continue;
        }
        // Loaded again on demand, from the folder as it is then.
        if (!entry.dir || entry.evicted) continue;
        const fp = await fingerprintDir(entry.dir);
        if (fp === entry.fingerprint) {
          entry.settlingFingerprint = '';
          continue;
        }
        if (fp !== entry.settlingFingerprint) {
          entry.settlingFingerprint = fp;
          this.logger.debug(
            { model: name },
            'model folder changed; loading it once it stays unchanged for a poll period',
          );
          continue;
        }
        entry.settlingFingerprint = '';
        await this.loadEntry(entry, { explicit: true, fingerprint: fp }).catch((err) =>
          this.logger.warn(
            { model: name, reason: describeLoadError(err) },
            'reload failed; the previous version keeps serving',
          ),
        );
      }
    } catch (err) {
      this.logger.error({ err }, 'repository poll failed');
    }
  }

  // ---- internals ---------------------------------------------------------

  private versionStateChanged(v: ModelVersion, previous: ModelState): void {
    if (this.listenerCount('stateChange') === 0) return;
    this.emit('stateChange', {
      model: v.modelName,
      version: v.version,
      state: v.state,
      previous,
      reason: v.reason,
      source: v,
    });
  }

  /** Why a model did not load, in Triton's words; undefined when it serves every version. */
  private failureOf(entry: ModelEntry): string | undefined {
    if (entry.error) return entry.error;
    const bad = [...entry.versions.values()].filter((v) => v.state !== 'READY');
    return bad.length === 0 ? undefined : versionFailures(bad);
  }

  /** Runs `fn` once any earlier load/unload of the same model has finished. */
  private async serialize(entry: ModelEntry, fn: () => Promise<void>): Promise<void> {
    while (entry.busy) await entry.busy.catch(() => undefined);
    const p = fn();
    entry.busy = p;
    try {
      await p;
    } finally {
      if (entry.busy === p) entry.busy = undefined;
    }
  }

  /**
   * (Re)loads a model: resolves its configuration, loads its dependencies,
   * builds the new versions beside the old ones, swaps them in, then drains
   * and closes the old ones. A failed reload of a serving model throws and
   * keeps the old versions serving; a failed first load records the reason.
   */
  private async loadEntry(entry: ModelEntry, request: LoadRequest): Promise<void> {
    let adopted = false;
    await this.serialize(entry, async () => {
      let dir = request.dir ?? entry.dir;
      // Asked for even without a folder (a name in two repositories): readiness counts it as not loaded.
      entry.everLoaded = true;
      if (request.explicit) entry.explicit = true;
      if (!dir && entry.notCopied) dir = await this.copyModel(entry, entry.serving);
      if (!dir) return;
      // Only poll and explicit modes ever compare fingerprints; none mode loads once.
      const fingerprint =
        request.fingerprint ?? (this.controlMode === 'none' || !entry.dir ? '' : await fingerprintDir(entry.dir));
      const serving = entry.serving;
      const forced = request.config !== undefined || request.dir !== undefined;
      if (!forced && serving && fingerprint === entry.fingerprint && !entry.error && !entry.dependencyLoss) return;
      // After an override, the next plain load reloads from the repository (undoing it), as Triton.
      const recorded = forced ? OVERRIDDEN : fingerprint;
      const old = [...entry.versions.values()];
      let prepared;
      let dependencies: ModelDependency[];
      try {
        prepared = await this.slots.run(() => prepareModel(entry.name, dir, this.loader, request.config));
        dependencies = this.dependenciesOf(prepared.config);
        if (this.pager) pinnedByConfig(prepared.config, entry.name);
        // Kept loaded while this load goes on (a step loaded first is not unloaded for the next one's room).
        entry.loadingDependencies = dependencies;
        await this.ensureDependencies(entry, dependencies, request.chain ?? []);
        checkEnsembleSteps(prepared.config, this.models, prepared.where);
      } catch (err) {
        entry.loadingDependencies = [];
        const reason = describeLoadError(err);
        this.logger.error({ model: entry.name, reason }, 'model failed to load');
        entry.fingerprint = recorded;
        if (serving) throw Errors.loadFailed(entry.name, reason);
        entry.error = reason;
        return;
      }
      let loaded;
      try {
        loaded = await this.slots.run(() => this.loadVersions(entry, prepared, dependencies));
      } catch (err) {
        const reason = describeLoadError(err);
        this.logger.error({ model: entry.name, reason }, 'model failed to load');
        if (serving) throw Errors.loadFailed(entry.name, reason);
        entry.error = reason;
        return;
      } finally {
        entry.loadingDependencies = [];
      }
      const fresh = [...loaded.versions.values()];
      if (serving && !fresh.some((v) => v.state === 'READY')) {
        entry.fingerprint = recorded;
        await Promise.all(fresh.map((v) => v.close()));
        throw Errors.loadFailed(entry.name, versionFailures(fresh));
      }
      const oldOverride = entry.override;
      // Failed versions hold nothing open: an override folder none of them serves from goes now.
      entry.override = fresh.some((v) => v.state === 'READY') ? request.override : undefined;
      adopted = entry.override !== undefined;
      entry.versions = loaded.versions;
      entry.config = loaded.config;
      entry.dependencies = dependencies;
      entry.error = '';
      entry.dependencyLoss = '';
      entry.fingerprint = recorded;
      if (fresh.some((v) => v.state === 'READY')) entry.evicted = false;
      if (request.onDemand) entry.paged = true;
      else if (request.explicit) entry.paged = false;
      for (const v of fresh) if (v.state === 'READY') this.emit('versionReady', v);
      await Promise.all(old.map((v) => this.retireVersion(v)));
      if (oldOverride) await oldOverride.remove();
    })
      .catch((err) => {
        if (err instanceof NereidError) throw err;
        throw asNereidError(err);
      })
      .finally(async () => {
        // An override folder nothing was loaded from is not kept.
        if (!adopted && request.override) await request.override.remove();
      });
    if (entry.serving) await this.restoreDependents(entry.name);
  }

  /**
   * Loads (when needed) every dependency of `entry` and checks each serves
   * what is required. Throws Triton's dependency errors.
   */
  private async ensureDependencies(
    entry: ModelEntry,
    deps: readonly ModelDependency[],
    chain: readonly string[],
  ): Promise<void> {
    if (deps.length === 0) return;
    await this.refreshIndex();
    const missing = [...new Set(deps.map((d) => d.model))].filter((m) => !this.models.get(m)?.inRepository);
    if (missing.length > 0) throw Errors.config(DependencyErrors.missing(entry.name, missing));
    const path = [...chain, entry.name];
    for (const d of deps) {
      const at = path.indexOf(d.model);
      if (at !== -1) throw Errors.config(DependencyErrors.circular([...path.slice(at), d.model]));
      const loop = this.waitCycle(d.model, entry.name);
      if (loop) throw Errors.config(DependencyErrors.circular([entry.name, ...loop]));
    }
    for (const d of deps) entry.waitingOn.add(d.model);
    try {
      await Promise.all(
        [...new Set(deps.map((d) => d.model))].map(async (name) => {
          const dep = this.models.get(name)!;
          // None and poll modes load every model anyway: wait for it rather than load it twice.
          if (this.controlMode !== 'explicit' && dep.everLoaded) {
            while (dep.busy) await dep.busy.catch(() => undefined);
            // A step unloaded for room comes back with its ensemble.
            if (!dep.evicted) return;
          }
          await this.loadEntry(dep, { chain: path }).catch(() => undefined);
        }),
      );
    } finally {
      entry.waitingOn.clear();
    }
    const problem = dependencyProblem(entry.name, deps, (name) => {
      const dep = this.models.get(name)!;
      return { error: dep.error, versions: dep.versions.values() };
    });
    if (problem !== undefined) throw Errors.config(problem);
  }

  /** The path from `from` back to `target` through models waiting on each other, if there is one. */
  private waitCycle(from: string, target: string, seen = new Set<string>()): string[] | undefined {
    if (seen.has(from)) return undefined;
    seen.add(from);
    const e = this.models.get(from);
    if (!e) return undefined;
    for (const next of e.waitingOn) {
      if (next === target) return [from, target];
      const rest = this.waitCycle(next, target, seen);
      if (rest) return [from, ...rest];
    }
    return undefined;
  }

  /** Takes every version of a model down with `reason` (after in-flight requests finish). */
  private async unloadEntry(entry: ModelEntry, reason: string): Promise<void> {
    await this.serialize(entry, async () => {
      const old = [...entry.versions.values()];
      for (const v of old) if (v.state === 'READY') v.state = 'UNLOADING';
      await Promise.all(old.map((v) => this.retireVersion(v)));
      for (const v of old) v.setState('UNAVAILABLE', reason);
      entry.fingerprint = '';
      entry.explicit = false;
      entry.evicted = false;
      entry.paged = false;
      const override = entry.override;
      entry.override = undefined;
      if (override) await override.remove();
    });
  }

  /**
   * A model stopped serving: models depending on it stop too (and models
   * depending on those). When it was unloaded on purpose they read
   * 'unloaded', as in Triton; otherwise the reason names the dependency.
   */
  private async dependencyGone(name: string, onPurpose: boolean): Promise<void> {
    for (const dependent of this.dependentsOf(name)) {
      if (!dependent.serving) continue;
      const reason = onPurpose ? UNLOADED : DependencyErrors.noLoadedVersion(dependent.name, name);
      await this.serialize(dependent, async () => {
        const old = [...dependent.versions.values()];
        for (const v of old) if (v.state === 'READY') v.state = 'UNLOADING';
        await Promise.all(old.map((v) => this.retireVersion(v)));
        for (const v of old) v.setState('UNAVAILABLE', reason);
        dependent.dependencyLoss = reason;
      });
      this.logger.warn(
        { model: dependent.name, dependency: name },
        'model stopped serving: a model it depends on is gone',
      );
      await this.dependencyGone(dependent.name, onPurpose);
    }
  }

  /** A model serves again: reload the models that stopped because it was gone. */
  private async restoreDependents(name: string): Promise<void> {
    for (const dependent of this.dependentsOf(name)) {
      // A dependent being loaded or unloaded right now settles by itself (and may be waiting on `name`).
      if (dependent.dependencyLoss === '' || dependent.busy || this.stopping) continue;
      await this.loadEntry(dependent, {}).catch((err) =>
        this.logger.warn(
          { model: dependent.name, reason: describeLoadError(err) },
          'a dependent model did not come back',
        ),
      );
    }
  }

  /** Waits for a version's in-flight requests, then closes it. */
  private async retireVersion(v: ModelVersion): Promise<void> {
    if (v.state === 'READY') v.state = 'UNLOADING';
    await v.idle();
    await this.closeVersion(v);
  }

  private async closeVersion(v: ModelVersion): Promise<void> {
    this.emit('versionUnloaded', v);
    try {
      await v.close();
    } catch (err) {
      this.logger.warn({ model: v.modelName, version: v.version, err }, 'error while closing a model version');
    }
    this.pager?.released(v);
  }

  // ---- model paging (--model-memory-budget) --------------------------------

  /** The second phase of a load; under a memory budget, measured and given room (docs/paging.md). */
  private loadVersions(
    entry: ModelEntry,
    prepared: PreparedModel,
    dependencies: readonly ModelDependency[],
  ): Promise<LoadedModel> {
    if (!this.pager) return loadPreparedVersions(prepared, this.loader);
    const protect = new Set([entry.name, ...this.dependencyClosure(dependencies)]);
    return this.pager.load(entry, prepared, protect, () => loadPreparedVersions(prepared, this.loader));
  }

  /** The models `deps` name and, transitively, theirs. */
  private dependencyClosure(deps: readonly ModelDependency[], out = new Set<string>()): Set<string> {
    for (const d of deps) {
      if (out.has(d.model)) continue;
      out.add(d.model);
      const e = this.models.get(d.model);
      if (e) this.dependencyClosure(e.dependencies, out);
    }
    return out;
  }

  /** Unloads an idle model to make room: it reads UNAVAILABLE 'unloaded: memory budget' and loads again on demand. */
  private async evictEntry(entry: ModelEntry): Promise<void> {
    entry.evicted = true;
    entry.paged = true;
    await this.serialize(entry, async () => {
      const old = [...entry.versions.values()];
      for (const v of old) if (v.state === 'READY') v.state = 'UNLOADING';
      // Anything admitted before the state changed finishes first.
      await Promise.all(old.map((v) => this.retireVersion(v)));
      for (const v of old) v.setState('UNAVAILABLE', MEMORY_BUDGET_REASON);
    });
  }

  /**
   * Under a memory budget, loads a model a request names that is in a
   * repository but not loaded (unloaded for room, or never loaded in
   * explicit mode), once however many requests wait; each waits at most
   * --model-load-wait-ms. undefined when the model is not one to load so
   * (the caller answers with its own error).
   */
  pageIn(name: string): Promise<void> | undefined {
    const pager = this.pager;
    if (pager === undefined || this.stopping) return undefined;
    const entry = this.models.get(name);
    if (entry === undefined || !entry.inRepository || entry.serving) return undefined;
    let loading = entry.pagingIn;
    if (loading === undefined) {
      if (!entry.evicted && (this.controlMode !== 'explicit' || entry.everLoaded)) return undefined;
      entry.paged = true;
      loading = this.loadEntry(entry, { explicit: true, onDemand: true }).then(() => {
        if (entry.serving) return;
        const reason = this.failureOf(entry) ?? 'no version loaded';
        // A model that cannot load is not tried again by every request; one that found no room is.
        if (!reason.includes('memory budget')) {
          entry.evicted = false;
          throw Errors.loadFailed(name, reason);
        }
        throw Errors.memoryBudget(`load failed for model '${name}': ${reason}`);
      });
      const shared = loading.finally(() => {
        if (entry.pagingIn === shared) entry.pagingIn = undefined;
      });
      entry.pagingIn = shared;
      shared.catch(() => undefined);
      loading = shared;
    }
    return pager.wait(name, loading);
  }

  /** Picks up models added to or removed from the repositories (explicit and poll modes). */
  private async refreshIndex(): Promise<void> {
    this.applyListing(await this.listRepositories());
  }

  /**
   * Lists the repositories. In explicit mode (and at start-up) cloud models
   * are only listed (object listings, nothing downloaded): a model is copied
   * when it loads.
   */
  private listRepositories(copy = this.controlMode !== 'explicit'): Promise<RepositoryListing> {
    return listModels(this.options.repositories, this.sources, { copy });
  }

  /** Copies a listed cloud model into the download cache; undefined (with the reason recorded) when it cannot. */
  private async copyModel(entry: ModelEntry, serving: boolean): Promise<string | undefined> {
    const repository = entry.repository!;
    try {
      const local = await this.copies.run(() => this.sources.get(repository).materialize(entry.name));
      entry.dir = local.dir;
      return local.dir;
    } catch (err) {
      const reason = asNereidError(err).message;
      this.logger.error({ repository, model: entry.name, reason }, 'model could not be copied from its repository');
      if (serving) throw Errors.loadFailed(entry.name, reason);
      entry.error = reason;
      return undefined;
    }
  }

  private applyListing(found: Map<string, RepositoryEntry>): void {
    for (const [name, where] of found) {
      let entry = this.models.get(name);
      if (!entry) {
        entry = new ModelEntry(name, undefined);
        this.models.set(name, entry);
      }
      entry.notCopied = false;
      if (isDuplicate(where)) {
        entry.dir = undefined;
        entry.repository = undefined;
        entry.error = `model '${name}' appears in more than one model repository: ${where.duplicate.join(', ')}`;
      } else {
        if (isNotCopied(where)) {
          // Copied again when it next loads (the download cache keeps what did not change).
          entry.dir = undefined;
          entry.notCopied = true;
        } else {
          entry.dir = where.dir;
        }
        entry.repository = where.repository;
        if (entry.error.includes('more than one model repository')) entry.error = '';
      }
    }
    for (const [name, entry] of this.models) {
      if (!found.has(name) && entry.versions.size === 0 && !entry.busy) this.models.delete(name);
    }
  }
}
