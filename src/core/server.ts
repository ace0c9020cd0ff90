/**
 * The Server: the embeddable, in-process API of Nereid and the only door the
 * frontends use. It owns the model lifecycle and routes each request to the
 * scheduler of the right model version.
 */
import { EventEmitter } from 'node:events';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { BackendResponse } from '../backends/backend.js';
import type { ModelConfig } from '../gen/model_config_pb.js';
import { Errors, NereidError, asNereidError } from '../errors.js';
import { listModels } from '../repository/index.js';
import { ScheduledRequest } from '../scheduler/scheduled-request.js';
import { silentLogger } from '../logger.js';
import { classify } from './classification.js';
import { type LoaderOptions, describeLoadError, loadModel } from './model-loader.js';
import type { ModelVersion } from './model-version.js';
import { prepareRequest } from './request.js';
import type { LoadModelOptions, ServerApi } from './server-api.js';
import type {
  InferRequest,
  InferResponse,
  ModelControlMode,
  ModelMetadata,
  ModelStatistics,
  RepositoryIndexEntry,
  ServerMetadata,
  ServerOptions,
} from './types.js';
import { datatypeFromConfigEnum } from '../tensor/datatype.js';
import type { Tensor } from '../tensor/tensor.js';

export const NEREID_VERSION = '0.1.0';

/** The extensions this server implements, in Triton's order. */
export const EXTENSIONS = [
  'classification',
  'model_repository',
  'model_repository(unload_dependents)',
  'schedule_policy',
  'model_configuration',
  'system_shared_memory',
  'cuda_shared_memory',
  'binary_tensor_data',
  'parameters',
  'statistics',
  'trace',
  'logging',
];

/** Reason of a version taken down by an explicit unload (Triton's word). */
const UNLOADED = 'unloaded';

/** A model known to the server: its folder and its versions. */
class ModelEntry {
  versions = new Map<number, ModelVersion>();
  config: ModelConfig | undefined;
  /** Why the model as a whole is not served ('' when it is). */
  error = '';
  fingerprint = '';
  everLoaded = false;
  /** Set while a load or unload of this model is in progress. */
  busy: Promise<void> | undefined;
  constructor(
    readonly name: string,
    public dir: string | undefined,
  ) {}
}

function countGpus(): number {
  try {
    return existsSync('/proc/driver/nvidia/gpus') ? readdirSync('/proc/driver/nvidia/gpus').length : 0;
  } catch {
    return 0;
  }
}

async function fingerprintDir(dir: string): Promise<string> {
  const hash = createHash('sha1');
  const walk = async (d: string): Promise<void> => {
    let entries;
    try {
      entries = await readdir(d, { withFileTypes: true });
    } catch {
      return;
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : 1));
    for (const e of entries) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) {
        hash.update(`d:${p}\n`);
        await walk(p);
      } else {
        try {
          const s = await stat(p);
          hash.update(`f:${p}:${s.size}:${s.mtimeMs}\n`);
        } catch {
          // vanished while scanning
        }
      }
    }
  };
  await walk(dir);
  return hash.digest('hex');
}

export interface ServerEvents {
  versionReady: [ModelVersion];
  versionUnloaded: [ModelVersion];
}

export class Server extends EventEmitter<ServerEvents> implements ServerApi {
  readonly controlMode: ModelControlMode;
  readonly logger: Logger;
  private readonly options: ServerOptions;
  private readonly models = new Map<string, ModelEntry>();
  private readonly loaderOptions: LoaderOptions;
  private live = false;
  private stopping = false;
  private pollTimer: NodeJS.Timeout | undefined;
  private polling: Promise<void> | undefined;

  constructor(options: ServerOptions) {
    super();
    if (!options.modelRepositories || options.modelRepositories.length === 0) {
      throw Errors.config('at least one model repository is required');
    }
    this.options = options;
    this.controlMode = options.modelControlMode ?? 'none';
    this.logger = options.logger ?? silentLogger;
    if (options.loadModels && options.loadModels.length > 0 && this.controlMode !== 'explicit') {
      throw Errors.config('--load-model requires --model-control-mode=explicit');
    }
    this.loaderOptions = {
      autoComplete: !options.disableAutoCompleteConfig,
      modelConfigName: options.modelConfigName,
      backendConfig: options.backendConfig ?? {},
      gpuCount: countGpus(),
      logger: this.logger,
      server: this,
    };
  }

  // ---- lifecycle -------------------------------------------------------

  async start(): Promise<void> {
    const found = await listModels(this.options.modelRepositories);
    let toLoad: string[];
    if (this.controlMode === 'explicit') {
      const wanted = this.options.loadModels ?? [];
      toLoad = wanted.includes('*') ? [...found.keys()] : wanted;
    } else {
      toLoad = [...found.keys()];
    }
    for (const [name, where] of found) {
      const entry = new ModelEntry(name, 'dir' in where ? where.dir : undefined);
      if ('duplicate' in where) {
        entry.error = `model '${name}' appears in more than one model repository: ${where.duplicate.join(', ')}`;
      }
      this.models.set(name, entry);
    }
    const failures: string[] = [];
    await this.forEachLimited(toLoad, async (name) => {
      const entry = this.models.get(name);
      if (!entry) {
        failures.push(`failed to load '${name}', failed to poll from model repository`);
        return;
      }
      await this.loadEntry(entry, undefined);
      const reason = this.entryFailure(entry);
      if (reason) failures.push(reason);
    });
    this.live = true;
    if (failures.length > 0 && (this.options.exitOnError ?? true)) {
      const err = Errors.internal(`failed to load all models: ${failures.join('; ')}`);
      await this.stop();
      throw err;
    }
    if (this.controlMode === 'poll') {
      const secs = this.options.repositoryPollSecs ?? 15;
      if (secs > 0) {
        this.pollTimer = setInterval(() => {
          if (!this.polling) this.polling = this.pollRepository().finally(() => (this.polling = undefined));
        }, secs * 1000);
        this.pollTimer.unref();
      }
    }
  }

  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    if (this.pollTimer) clearInterval(this.pollTimer);
    if (this.polling) await this.polling;
    const timeoutMs = (this.options.exitTimeoutSecs ?? 30) * 1000;
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
    this.live = false;
  }

  isLive(): boolean {
    return this.live && !this.stopping;
  }

  isReady(): boolean {
    if (!this.isLive()) return false;
    if (this.options.strictReadiness === false) return true;
    for (const entry of this.models.values()) {
      if (!entry.everLoaded && !entry.busy) continue;
      if (entry.error) return false;
      // A version that is down because it was unloaded on purpose does not count against readiness.
      for (const v of entry.versions.values()) if (v.state !== 'READY' && v.reason !== UNLOADED) return false;
    }
    return true;
  }

  // ---- metadata --------------------------------------------------------

  metadata(): ServerMetadata {
    return { name: this.options.id ?? 'triton', version: NEREID_VERSION, extensions: [...EXTENSIONS] };
  }

  modelMetadata(name: string, version?: string): ModelMetadata {
    const entry = this.models.get(name);
    if (!entry) throw Errors.modelNotFound(name);
    const v = this.resolveVersion(name, version);
    const config = v.config;
    const versions =
      version !== undefined && version !== '' && version !== '-1'
        ? [String(v.version)]
        : [...entry.versions.values()].filter((x) => x.state === 'READY').map((x) => String(x.version)).sort((a, b) => Number(a) - Number(b));
    const batch = config.maxBatchSize > 0;
    const tensor = (t: { name: string; dataType: number; dims: bigint[] }) => ({
      name: t.name,
      datatype: datatypeFromConfigEnum(t.dataType) ?? 'BYTES',
      shape: batch ? [-1, ...t.dims.map(Number)] : t.dims.map(Number),
    });
    return {
      name,
      versions,
      platform: config.platform || config.backend,
      inputs: config.input.map(tensor),
      outputs: config.output.map(tensor),
    };
  }

  modelConfig(name: string, version?: string): ModelConfig {
    return this.resolveVersion(name, version).config;
  }

  async modelReady(name: string, version?: string): Promise<boolean> {
    const v = this.resolveVersion(name, version);
    for (const inst of v.instances) {
      if (inst.backend.isReady) {
        let ok = false;
        try {
          ok = await Promise.race([
            inst.backend.isReady(),
            new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 5000).unref()),
          ]);
        } catch {
          ok = false;
        }
        if (!ok) return false;
      }
    }
    return true;
  }

  // ---- inference -------------------------------------------------------

  async infer(request: InferRequest): Promise<InferResponse> {
    if (this.stopping) throw Errors.serverStopping();
    const v = this.resolveVersion(request.model, request.version === undefined ? undefined : String(request.version));
    const sig = v.signature!;
    const prepared = prepareRequest(sig, request);
    const scheduler = v.scheduler!;
    v.inflight += 1;
    let response: BackendResponse;
    try {
      response = await new Promise<BackendResponse>((resolve, reject) => {
        const item = new ScheduledRequest(
          prepared.backendRequest,
          prepared.priority,
          prepared.timeoutUs,
          v.stats,
          (resp, err) => (err ? reject(err) : resolve(resp!)),
          request.signal,
        );
        if (request.signal) {
          if (request.signal.aborted) {
            item.fail(Errors.cancelled('inference request'), 'CANCELED');
            return;
          }
          request.signal.addEventListener('abort', () => item.fail(Errors.cancelled('inference request'), 'CANCELED'), { once: true });
        }
        scheduler.enqueue(item);
      });
    } finally {
      v.requestDone();
    }
    return this.buildResponse(v, request, prepared.requestedOutputs, prepared.backendRequest.requestedOutputs, response);
  }

  private buildResponse(
    v: ModelVersion,
    request: InferRequest,
    requested: InferRequest['outputs'],
    names: readonly string[],
    response: BackendResponse,
  ): InferResponse {
    const produced = response.outputs!;
    const byName = new Map<string, Tensor>();
    for (const t of produced) byName.set(t.name, t);
    const batching = v.config.maxBatchSize > 0;
    const outputs: Tensor[] = [];
    for (let i = 0; i < names.length; i++) {
      const name = names[i]!;
      let t = byName.get(name);
      if (!t) {
        throw Errors.modelExecution(v.modelName, `the backend did not produce requested output '${name}'`);
      }
      const spec = v.signature!.outputs.get(name);
      if (spec?.reshape) {
        // The backend saw the reshaped form; clients see the configured dims.
        const batch = batching ? t.shape[0]! : undefined;
        const count = t.shape.slice(batching ? 1 : 0).reduce((a, b) => a * b, 1);
        const known = spec.dims.reduce((p, d) => (d === -1 ? p : p * d), 1);
        const dims = spec.dims.map((d) => (d === -1 ? count / known : d));
        t = { name: t.name, datatype: t.datatype, shape: batch === undefined ? dims : [batch, ...dims], data: t.data };
      }
      const k = requested?.[i]?.classification;
      if (k !== undefined && k > 0) t = classify(t, k, batching, v.labels.get(name), v.modelName);
      outputs.push(t);
    }
    return {
      modelName: v.modelName,
      modelVersion: String(v.version),
      id: request.id ?? '',
      parameters: response.error ? undefined : response.parameters,
      outputs,
    };
  }

  // ---- statistics and repository --------------------------------------

  modelStatistics(name?: string, version?: string): ModelStatistics[] {
    if (name === undefined || name === '') {
      const out: ModelStatistics[] = [];
      const names = [...this.models.keys()].sort();
      for (const n of names) {
        for (const v of [...this.models.get(n)!.versions.values()].sort((a, b) => a.version - b.version)) {
          if (v.state === 'READY') out.push(v.stats.toJSON());
        }
      }
      return out;
    }
    const entry = this.models.get(name);
    const ready = entry ? [...entry.versions.values()].filter((v) => v.state === 'READY') : [];
    if (!entry || ready.length === 0) throw Errors.statsModelNotAvailable(name);
    if (version !== undefined && version !== '' && version !== '-1') {
      const v = ready.find((x) => String(x.version) === version);
      if (!v) throw Errors.statsVersionNotAvailable(name);
      return [v.stats.toJSON()];
    }
    return ready.sort((a, b) => a.version - b.version).map((v) => v.stats.toJSON());
  }

  /** Every READY version, for metrics and dashboards. */
  readyVersions(): ModelVersion[] {
    const out: ModelVersion[] = [];
    for (const e of this.models.values()) for (const v of e.versions.values()) if (v.state === 'READY') out.push(v);
    return out;
  }

  async repositoryIndex(readyOnly = false): Promise<RepositoryIndexEntry[]> {
    if (this.controlMode !== 'none') await this.refreshIndex();
    const out: RepositoryIndexEntry[] = [];
    for (const name of [...this.models.keys()].sort()) {
      const entry = this.models.get(name)!;
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
        const restarts = v.state === 'READY' ? v.restartCount : 0;
        if (v.reason) e.reason = v.reason;
        else if (restarts > 0) e.reason = `instance processes restarted ${restarts} time${restarts === 1 ? '' : 's'} after dying`;
        out.push(e);
      }
    }
    return out;
  }

  async loadModel(name: string, options: LoadModelOptions = {}): Promise<void> {
    if (this.controlMode !== 'explicit') throw Errors.controlModeDisallows();
    if (this.stopping) throw Errors.serverStopping();
    if (options.files && Object.keys(options.files).length > 0 && options.config === undefined) {
      throw Errors.invalidRequest(`failed to load '${name}': file overrides require a 'config' parameter`);
    }
    if (options.files && Object.keys(options.files).length > 0) {
      throw Errors.unsupported(`failed to load '${name}': file overrides are not supported`);
    }
    await this.refreshIndex();
    const entry = this.models.get(name);
    if (!entry || !entry.dir) throw Errors.internal(`failed to load '${name}', failed to poll from model repository`);
    if (entry.error && !entry.everLoaded && entry.versions.size === 0 && entry.error.includes('more than one model repository')) {
      throw Errors.loadFailed(name, entry.error);
    }
    await this.loadEntry(entry, options.config);
    const failure = this.entryFailure(entry);
    if (failure) throw Errors.loadFailed(name, failure);
  }

  async unloadModel(name: string, _options: { unloadDependents?: boolean } = {}): Promise<void> {
    if (this.controlMode !== 'explicit') throw Errors.controlModeDisallows();
    const entry = this.models.get(name);
    if (!entry) return;
    await this.serialize(entry, async () => {
      const old = [...entry.versions.values()];
      for (const v of old) v.state = 'UNLOADING';
      await Promise.all(old.map((v) => this.retireVersion(v)));
      for (const v of old) {
        v.state = 'UNAVAILABLE';
        v.reason = UNLOADED;
      }
      entry.fingerprint = '';
    });
  }

  // ---- internals -------------------------------------------------------

  private entryFailure(entry: ModelEntry): string | undefined {
    if (entry.error) return `load failed for model '${entry.name}': ${entry.error}`;
    for (const v of entry.versions.values()) {
      if (v.state !== 'READY') return `load failed for model '${entry.name}' version ${v.version}: ${v.reason}`;
    }
    return undefined;
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
   * (Re)loads a model. The new versions are built beside the old ones, then
   * swapped in, and only then the old ones are drained and closed: requests
   * never see a gap. A failed reload of a model that was serving keeps the
   * old versions serving.
   */
  private async loadEntry(entry: ModelEntry, configOverride: string | undefined): Promise<void> {
    await this.serialize(entry, async () => {
      if (!entry.dir) return;
      // Only poll and explicit modes ever compare fingerprints; none mode loads once.
      const fingerprint = this.controlMode === 'none' ? '' : await fingerprintDir(entry.dir);
      const serving = [...entry.versions.values()].some((v) => v.state === 'READY');
      if (configOverride === undefined && serving && fingerprint === entry.fingerprint && !entry.error) return;
      entry.everLoaded = true;
      const old = [...entry.versions.values()];
      let loaded;
      try {
        loaded = await loadModel(entry.name, entry.dir, this.loaderOptions, configOverride);
      } catch (err) {
        const reason = describeLoadError(err);
        this.logger.error({ model: entry.name, reason }, 'model failed to load');
        if (serving) throw Errors.loadFailed(entry.name, reason);
        entry.error = reason;
        entry.fingerprint = fingerprint;
        return;
      }
      const anyReady = [...loaded.versions.values()].some((v) => v.state === 'READY');
      if (serving && !anyReady) {
        const reason = [...loaded.versions.values()].map((v) => v.reason).join('; ');
        await Promise.all([...loaded.versions.values()].map((v) => v.close()));
        throw Errors.loadFailed(entry.name, reason);
      }
      entry.versions = loaded.versions;
      entry.config = loaded.config;
      entry.error = '';
      entry.fingerprint = fingerprint;
      for (const v of loaded.versions.values()) if (v.state === 'READY') this.emit('versionReady', v);
      await Promise.all(old.map((v) => this.retireVersion(v)));
    }).catch((err) => {
      if (err instanceof NereidError) throw err;
      throw asNereidError(err);
    });
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
  }

  /** Picks up models added to or removed from the repositories (explicit and poll modes). */
  private async refreshIndex(): Promise<void> {
    const found = await listModels(this.options.modelRepositories);
    for (const [name, where] of found) {
      let entry = this.models.get(name);
      if (!entry) {
        entry = new ModelEntry(name, undefined);
        this.models.set(name, entry);
      }
      if ('dir' in where) {
        entry.dir = where.dir;
        if (entry.error.includes('more than one model repository')) entry.error = '';
      } else {
        entry.dir = undefined;
        entry.error = `model '${name}' appears in more than one model repository: ${where.duplicate.join(', ')}`;
      }
    }
    for (const [name, entry] of this.models) {
      if (!found.has(name) && entry.versions.size === 0) this.models.delete(name);
    }
  }

  /** Poll mode: load new models, reload changed ones, unload removed ones. */
  private async pollRepository(): Promise<void> {
    try {
      const found = await listModels(this.options.modelRepositories);
      await this.refreshIndex();
      for (const [name, entry] of this.models) {
        if (this.stopping) return;
        if (!found.has(name)) {
          const old = [...entry.versions.values()];
          entry.versions = new Map();
          await Promise.all(old.map((v) => this.retireVersion(v)));
          this.models.delete(name);
          continue;
        }
        if (!entry.dir) continue;
        const fp = await fingerprintDir(entry.dir);
        if (fp !== entry.fingerprint) {
          await this.loadEntry(entry, undefined).catch((err) =>
            this.logger.warn({ model: name, reason: describeLoadError(err) }, 'reload failed; the previous version keeps serving'),
          );
        }
      }
    } catch (err) {
      this.logger.error({ err }, 'repository poll failed');
    }
  }

  private async forEachLimited(items: string[], fn: (item: string) => Promise<void>, limit = 4): Promise<void> {
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < items.length) {
        const item = items[next++]!;
        await fn(item);
      }
    };
    await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  }

  /** The version a request addresses, or the error Triton gives. */
  private resolveVersion(name: string, version: string | undefined): ModelVersion {
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
    if (!/^\d+$/.test(version)) throw Errors.invalidModelVersion(name, version);
    const v = entry.versions.get(Number(version));
    if (!v) throw Errors.modelVersionNotFound(name, version);
    if (v.state !== 'READY') throw Errors.modelVersionNotReady(name, version);
    return v;
  }
}
