/**
 * The Server: the embeddable, in-process API of Nereid and the only door the
 * frontends use. It routes each request to the scheduler of the right model
 * version; the model lifecycle lives in the model repository manager.
 */
import { EventEmitter } from 'node:events';
import { existsSync, readdirSync } from 'node:fs';
import type { Logger } from 'pino';
import type { BackendResponse } from '../backends/backend.js';
import type { ModelConfig } from '../gen/model_config_pb.js';
import { modelConfigToJson } from '../config/index.js';
import { Errors, type NereidError, asNereidError } from '../errors.js';
import { ScheduledRequest } from '../scheduler/scheduled-request.js';
import { silentLogger } from '../logger.js';
import { classify } from './classification.js';
import { ModelRepositoryManager, type VersionStateChange } from './model-repository-manager.js';
import {
  type ResolvedBudget,
  checkPagingFlags,
  formatBytes,
  parseMemoryBudget,
  resolveMemoryBudget,
} from './memory-budget.js';
import type { PagingOptions } from './model-pager.js';
import type { ModelVersion } from './model-version.js';
import { prepareRequest } from './request.js';
import { ResponseStream } from './response-stream.js';
import { SharedMemoryRegistry } from './shared-memory.js';
import { type ResponseCache, cacheKey, createResponseCache } from '../cache/response-cache.js';
import type { LoadModelOptions, ServerApi, UnloadModelOptions } from './server-api.js';
import type {
  CacheHitTicket,
  InferRequest,
  InferResponse,
  ModelControlMode,
  ModelMetadata,
  ModelStatistics,
  RepositoryIndexEntry,
  RequestTrace,
  ServerMetadata,
  ServerOptions,
  StreamResponse,
} from '../types/api.js';
import { datatypeFromConfigEnum } from '../tensor/datatype.js';
import type { Tensor } from '../tensor/tensor.js';
import type { ModelVersionStatistics } from '../types/statistics.js';

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

function countGpus(): number {
  try {
    return existsSync('/proc/driver/nvidia/gpus') ? readdirSync('/proc/driver/nvidia/gpus').length : 0;
  } catch {
    return 0;
  }
}

let queueFullWithoutId: NereidError | undefined;

/**
 * Under a memory budget each onnxruntime session gets a thread of its own
 * (session_threads=0) unless the user chose: memory a closed session freed
 * on a thread shared with running sessions stayed with that thread's
 * allocator, and an evicted model gave nothing back (docs/paging.md).
 */
function ownSessionThreads(config: Record<string, Record<string, string>>): Record<string, Record<string, string>> {
  const chosen = config['onnxruntime']?.['session_threads'] ?? config['']?.['session_threads'];
  if (chosen !== undefined) return config;
  return { ...config, onnxruntime: { ...config['onnxruntime'], session_threads: '0' } };
}

/** The paging settings of ServerOptions (undefined without a budget); checkPagingFlags says what is refused. */
function pagingOptions(options: ServerOptions): PagingOptions | undefined {
  checkPagingFlags(options);
  const budget = options.modelMemoryBudget;
  if (budget === undefined) return undefined;
  let resolved: ResolvedBudget;
  if (typeof budget === 'number') {
    if (!Number.isSafeInteger(budget) || budget <= 0) {
      throw Errors.config(`--model-memory-budget must be a whole number of bytes above 0, got ${budget}`);
    }
    resolved = { bytes: budget, source: 'given in bytes' };
  } else {
    resolved = resolveMemoryBudget(parseMemoryBudget(budget));
  }
  options.logger?.info(
    { budget: resolved.bytes, source: resolved.source },
    `model memory budget ${formatBytes(resolved.bytes)}`,
  );
  return {
    budgetBytes: resolved.bytes,
    pins: options.modelPins,
    loadWaitMs: options.modelLoadWaitMs,
    historyFile: options.modelMemoryHistory,
  };
}

/** The output called `name`; backends mostly produce them in the requested order, so position `hint` is tried first. */
function outputNamed(produced: readonly Tensor[], name: string, hint: number): Tensor | undefined {
  const at = produced[hint];
  if (at !== undefined && at.name === name) return at;
  for (let i = 0; i < produced.length; i++) if (produced[i]!.name === name) return produced[i];
  return undefined;
}

/**
 * What InferResponse.cacheHit holds: the version's statistics (its identity) and the entry, by key and serial, not
 * held.
 */
class CacheHit implements CacheHitTicket {
  readonly kind = 'cache-hit';
  constructor(
    readonly stats: ModelVersionStatistics,
    /** Shared with the cache while the entry is stored; held alone once it is gone. */
    readonly key: string,
    readonly serial: number,
  ) {}

  get heldBytes(): number {
    return 48 + 2 * this.key.length;
  }
}

/**
 * A traced request to a decoupled model: its responses may all be sent
 * before execute() returns, so REQUEST_END waits for both, and the trace is
 * held open until then (the frontend ends it after its last send).
 */
class DecoupledTrace {
  private parts = 2;
  private readonly release: () => void;
  constructor(
    private readonly trace: RequestTrace,
    v: ModelVersion,
    requestId: string,
  ) {
    trace.setModel(v.modelName, String(v.version), requestId);
    trace.stamp('REQUEST_START');
    this.release = trace.hold();
  }

  /** The stream ended, or the execution finished. */
  part(): void {
    if (--this.parts !== 0) return;
    this.trace.stamp('REQUEST_END');
    this.release();
  }
}

export interface ServerEvents {
  versionReady: [ModelVersion];
  versionUnloaded: [ModelVersion];
  stateChange: [VersionStateChange];
}

export class Server extends EventEmitter<ServerEvents> implements ServerApi {
  /** Triton's local response cache (--cache-config=local,size=...); undefined when not configured. */
  readonly responseCache: ResponseCache | undefined;
  readonly controlMode: ModelControlMode;
  readonly logger: Logger;
  /** The model lifecycle: loading, unloading, polling, dependencies, states. */
  readonly repository: ModelRepositoryManager;
  readonly sharedMemory: SharedMemoryRegistry;
  private readonly options: ServerOptions;
  private live = false;
  private stopping = false;

  constructor(options: ServerOptions) {
    super();
    if (!options.modelRepositories || options.modelRepositories.length === 0) {
      throw Errors.config('at least one model repository is required');
    }
    this.options = options;
    this.controlMode = options.modelControlMode ?? 'none';
    this.logger = options.logger ?? silentLogger;
    this.sharedMemory = new SharedMemoryRegistry(options.allowClientShm ?? false);
    if (options.loadModels && options.loadModels.length > 0 && this.controlMode !== 'explicit') {
      throw Errors.loadModelNotExplicit();
    }
    const paging = pagingOptions(options);
    this.repository = new ModelRepositoryManager({
      repositories: options.modelRepositories,
      paging,
      modelCacheDir: options.modelCacheDir,
      controlMode: this.controlMode,
      logger: this.logger,
      loadThreadCount: options.modelLoadThreadCount,
      pollSecs: options.repositoryPollSecs,
      loader: {
        autoComplete: !options.disableAutoCompleteConfig,
        modelConfigName: options.modelConfigName,
        backendConfig:
          paging === undefined ? (options.backendConfig ?? {}) : ownSessionThreads(options.backendConfig ?? {}),
        gpuCount: countGpus(),
        logger: this.logger,
        server: this,
        retryCount: options.modelLoadRetryCount,
      },
    });
    this.responseCache = createResponseCache(options.cacheConfig);
    this.repository.on('versionReady', (v) => {
      if (v.config.responseCache?.enable && !this.responseCache) {
        this.logger.warn(
          { model: v.modelName },
          'response_cache is enabled for the model but the server has no cache ' +
          '(--cache-config=local,size=<bytes>); responses are not cached',
        );
      }
      this.emit('versionReady', v);
    });
    this.repository.on('versionUnloaded', (v) => {
      this.responseCache?.dropVersion(v.modelName, v.version);
      this.emit('versionUnloaded', v);
    });
    this.repository.on('stateChange', (c) => this.emit('stateChange', c));
  }

  // ---- lifecycle -------------------------------------------------------

  async start(): Promise<void> {
    const failures = await this.repository.start(this.options.loadModels ?? []);
    this.live = true;
    if (failures.length > 0 && (this.options.exitOnError ?? true)) {
      const err = Errors.internal(`failed to load all models: ${failures.join('; ')}`);
      await this.stop();
      throw err;
    }
  }

  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    await this.repository.stop((this.options.exitTimeoutSecs ?? 30) * 1000);
    this.sharedMemory.close();
    this.live = false;
  }

  /** Stays true while stop() drains in-flight requests, so a liveness probe does not kill a draining server. */
  isLive(): boolean {
    return this.live;
  }

  /** False from the moment stop() begins, so load balancers stop routing here while the drain runs. */
  isReady(): boolean {
    if (!this.live || this.stopping) return false;
    if (this.options.strictReadiness === false) return true;
    return this.repository.allReady();
  }

  // ---- metadata --------------------------------------------------------

  metadata(): ServerMetadata {
    return { name: this.options.id ?? 'triton', version: NEREID_VERSION, extensions: [...EXTENSIONS] };
  }

  modelMetadata(name: string, version?: string): ModelMetadata {
    const v = this.resolveVersion(name, version);
    const config = v.config;
    const versions =
      version !== undefined && version !== '' && version !== '-1'
        ? [String(v.version)]
        : this.repository.readyVersionsOf(name).map((x) => String(x.version));
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

  modelConfigJson(name: string, version?: string): Record<string, unknown> {
    return modelConfigToJson(this.modelConfig(name, version));
  }

  modelDirectory(name: string, version?: string): string | undefined {
    return this.resolveVersion(name, version).directory;
  }

  async modelReady(name: string, version?: string): Promise<boolean> {
    const v = this.resolveVersion(name, version);
    for (const inst of v.instances) {
      if (inst.backend.isReady) {
        let ok: boolean;
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

  /**
   * The queue-full error (the rejection counted as the scheduler would) when
   * the version's bounded queue would refuse any new request now, else
   * undefined. Frontends ask before reading or decoding a request, so
   * shedding load costs no more than this look-up; it is returned, not
   * thrown, because a throw cost a flood of refusals more than the look-up.
   * Unknown models are left to infer().
   */
  queueFull(model: string, version?: string): boolean {
    try {
      return this.resolveVersion(model, version).scheduler?.full === true;
    } catch {
      return false;
    }
  }

  admissionError(model: string, version?: string, requestId = ''): NereidError | undefined {
    let v: ModelVersion;
    try {
      v = this.resolveVersion(model, version);
    } catch {
      return undefined;
    }
    if (v.scheduler?.full !== true) return undefined;
    v.scheduler.collectFinished?.();
    v.stats.recordFailure('REJECTED', 0);
    // Refusals come in floods: one error serves every request without an id (no stack captured per refusal).
    if (requestId === '') return (queueFullWithoutId ??= Errors.maxQueueSizeExceeded(''));
    return Errors.maxQueueSizeExceeded(requestId);
  }

  countRefusals(model: string, version: string | undefined, count: number): void {
    let v: ModelVersion;
    try {
      v = this.resolveVersion(model, version);
    } catch {
      return; // unloaded meanwhile: its statistics are gone with it
    }
    for (let i = 0; i < count; i++) v.stats.recordFailure('REJECTED', 0);
  }

  async infer(request: InferRequest): Promise<InferResponse> {
    // A step of an ensemble request accepted before stop() is part of the drain, not a new request.
    if (this.stopping && request.stepTimings === undefined) throw Errors.serverStopping();
    let v: ModelVersion;
    try {
      v = this.resolveVersion(request.model, request.version === undefined ? undefined : String(request.version));
    } catch (err) {
      // Model paging: a model unloaded for room (or never loaded, explicit mode) loads first.
      const loading = this.repository.pageIn(request.model);
      if (loading === undefined) throw err;
      await loading;
      return this.infer(request);
    }
    if (v.decoupled) return this.inferDecoupledOnce(request);
    if (request.trace !== undefined) return this.inferTraced(v, request, request.trace);
    const sig = v.signature!;
    const prepared = prepareRequest(sig, request);
    const cache = this.responseCache;
    if (cache !== undefined && v.cached && !prepared.backendRequest.correlationId) {
      return this.inferCached(v, request, prepared, cache);
    }
    const response = await this.schedule(v, request, prepared);
    return this.buildResponse(
      v,
      request,
      prepared.requestedOutputs,
      prepared.backendRequest.requestedOutputs,
      response,
    );
  }

  /**
   * infer() of a traced request: the same steps between REQUEST_START and REQUEST_END (kept apart so untraced requests
   * pay nothing).
   */
  private async inferTraced(v: ModelVersion, request: InferRequest, trace: RequestTrace): Promise<InferResponse> {
    trace.setModel(v.modelName, String(v.version), request.id ?? '');
    trace.stamp('REQUEST_START');
    try {
      const prepared = prepareRequest(v.signature!, request);
      const cache = this.responseCache;
      if (cache !== undefined && v.cached && !prepared.backendRequest.correlationId) {
        return await this.inferCached(v, request, prepared, cache);
      }
      const response = await this.schedule(v, request, prepared);
      return this.buildResponse(
        v,
        request,
        prepared.requestedOutputs,
        prepared.backendRequest.requestedOutputs,
        response,
      );
    } finally {
      trace.stamp('REQUEST_END');
    }
}

  pageIn(model: string): Promise<void> | undefined {
    return this.stopping ? undefined : this.repository.pageIn(model);
  }

  /** Whether the model's responses are cached (response_cache enabled and a server cache configured). */
  isCached(v: ModelVersion): boolean {
    return this.responseCache !== undefined && v.cached;
  }

  /**
   * The response cache in the infer path: a hit is answered here without
   * reaching the scheduler; a miss runs as usual and stores its response.
   * Requests of a sequence bypass the cache.
   */
  private inferCached(
    v: ModelVersion,
    request: InferRequest,
    prepared: ReturnType<typeof prepareRequest>,
    cache: ResponseCache,
  ): InferResponse | Promise<InferResponse> {
    const startNs = process.hrtime.bigint();
    const br = prepared.backendRequest;
    const key = cacheKey(v.modelName, v.version, br.inputs, br.requestedOutputs, v.load);
    const hit = cache.lookupEntry(key);
    const lookupNs = Number(process.hrtime.bigint() - startNs);
    cache.addLookupTime(lookupNs);
    if (hit !== undefined) {
      // Answered synchronously: a hit pays no extra promise.
      const built = this.buildResponse(
        v,
        request,
        prepared.requestedOutputs,
        br.requestedOutputs,
        hit.response as BackendResponse,
      );
      const out: InferResponse = { ...built, cacheHit: new CacheHit(v.stats, key, hit.serial) };
      v.stats.recordCacheHit(Number(process.hrtime.bigint() - startNs), 0, lookupNs);
      return out;
    }
    return this.inferMissed(v, request, prepared, cache, key, lookupNs);
  }

  replayCacheHit(ticket: CacheHitTicket, model: string, version?: string): boolean {
    const cache = this.responseCache;
    if (!(ticket instanceof CacheHit) || cache === undefined || this.stopping) return false;
    let v: ModelVersion;
    try {
      v = this.resolveVersion(model, version);
    } catch {
      return false;
    }
    // Another version now answers the request (a new one loaded, a reload), or the entry went: the caller runs it anew.
    if (v.stats !== ticket.stats) return false;
    const startNs = process.hrtime.bigint();
    if (!cache.lookupKnown(ticket.key, ticket.serial)) return false;
    const lookupNs = Number(process.hrtime.bigint() - startNs);
    cache.addLookupTime(lookupNs);
    v.stats.recordCacheHit(lookupNs, 0, lookupNs);
    return true;
  }

  /** A cache miss: runs the request and stores its response. */
  private async inferMissed(
    v: ModelVersion,
    request: InferRequest,
    prepared: ReturnType<typeof prepareRequest>,
    cache: ResponseCache,
    key: string,
    lookupNs: number,
  ): Promise<InferResponse> {
    const br = prepared.backendRequest;
    const response = await this.schedule(v, request, prepared);
    const insertStart = process.hrtime.bigint();
    if (response.error === undefined) cache.insert(key, response, v.modelName, v.version);
    v.stats.recordCacheMiss(lookupNs + Number(process.hrtime.bigint() - insertStart));
    return this.buildResponse(v, request, prepared.requestedOutputs, br.requestedOutputs, response);
  }

  /** Hands a prepared request to the version's scheduler; resolves with the backend's response. */
  private async schedule(
    v: ModelVersion,
    request: InferRequest,
    prepared: ReturnType<typeof prepareRequest>,
  ): Promise<BackendResponse> {
    const scheduler = v.scheduler!;
    v.inflight += 1;
    v.touch();
    this.repository.pager?.recordUse(v.modelName);
    let response: BackendResponse;
    let onAbort: (() => void) | undefined;
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
        if (request.stepTimings) item.stepTimings = request.stepTimings;
        if (request.signal) {
          if (request.signal.aborted) {
            item.fail(Errors.cancelled('inference request'), 'CANCELED');
            return;
          }
          onAbort = () => item.fail(Errors.cancelled('inference request'), 'CANCELED');
          request.signal.addEventListener('abort', onAbort, { once: true });
        }
        scheduler.enqueue(item);
      });
    } finally {
      // A signal shared by many requests (one gRPC stream) must not keep a listener per finished request.
      if (onAbort) request.signal!.removeEventListener('abort', onAbort);
      v.requestDone();
    }
    return response;
  }

  /**
   * Every response of a request. A decoupled model sends zero or more
   * responses, then the final flag; any other model one final response.
   * Errors (also a request refused up front) arrive as a final error item,
   * so this never throws. Breaking out of the iteration drops what follows;
   * aborting `request.signal` cancels the request in the backend too.
   */
  inferStream(request: InferRequest): AsyncIterableIterator<StreamResponse> {
    let v: ModelVersion;
    try {
      if (this.stopping) throw Errors.serverStopping();
      v = this.resolveVersion(request.model, request.version === undefined ? undefined : String(request.version));
    } catch (err) {
      const loading = this.stopping ? undefined : this.repository.pageIn(request.model);
      if (loading !== undefined) return this.streamAfterLoad(loading, request);
      const failed = new ResponseStream(undefined, undefined);
      failed.fail(asNereidError(err));
      return failed;
    }
    if (!v.decoupled) {
      const single = new ResponseStream(undefined, undefined);
      this.infer(request).then(
        (r) => single.deliver(r),
        (err: unknown) => single.fail(asNereidError(err)),
      );
      return single;
    }
    return this.startDecoupled(v, request);
  }

  /** inferStream() of a request whose model is loading on demand: its responses once the load is done. */
  private async *streamAfterLoad(loading: Promise<void>, request: InferRequest): AsyncIterableIterator<StreamResponse> {
    try {
      await loading;
    } catch (err) {
      yield { response: undefined, error: asNereidError(err), final: true };
      return;
    }
    yield* this.inferStream(request);
  }

  private startDecoupled(v: ModelVersion, request: InferRequest): ResponseStream {
    let prepared: ReturnType<typeof prepareRequest> | undefined;
    let counted = false;
    let onAbort: (() => void) | undefined;
    const signal = request.signal;
    const traced = request.trace === undefined ? undefined : new DecoupledTrace(request.trace, v, request.id ?? '');
    const stream = new ResponseStream(
      (resp) =>
        this.buildResponse(
          v,
          request,
          prepared!.requestedOutputs,
          prepared!.backendRequest.requestedOutputs,
          resp,
          true,
        ),
      () => {
        traced?.part();
        if (counted) v.requestDone();
        // A signal shared by many requests (one gRPC stream) must not keep a listener per finished request.
        if (onAbort) signal!.removeEventListener('abort', onAbort);
      },
    );
    try {
      prepared = prepareRequest(v.signature!, request, stream);
    } catch (err) {
      traced?.part(); // nothing will execute
      stream.fail(asNereidError(err));
      return stream;
    }
    v.inflight += 1;
    v.touch();
    this.repository.pager?.recordUse(v.modelName);
    counted = true;
    const item = new ScheduledRequest(
      prepared.backendRequest,
      prepared.priority,
      prepared.timeoutUs,
      v.stats,
      (_resp, err) => {
        traced?.part();
        if (err) stream.fail(err);
      },
      request.signal,
    );
    if (request.stepTimings) item.stepTimings = request.stepTimings;
    if (signal) {
      const cancelled = (): void => {
        const e = Errors.cancelled('inference request');
        // Cancelled while queued: a CANCELED failure. Once the backend has
        // it, the request counts as execute() reports it (Triton's python
        // backend records success when execute returns); the model sees the
        // cancellation through is_cancelled().
        if (!item.executing) item.fail(e, 'CANCELED');
        stream.fail(e);
      };
      if (signal.aborted) {
        cancelled();
        return stream;
      }
      onAbort = cancelled;
      signal.addEventListener('abort', cancelled, { once: true });
    }
    v.scheduler!.enqueue(item);
    return stream;
  }

  /** infer() on a decoupled model: fine when it sends exactly one response. */
  private async inferDecoupledOnce(request: InferRequest): Promise<InferResponse> {
    let only: InferResponse | undefined;
    let count = 0;
    for await (const item of this.inferStream(request)) {
      if (item.error) throw item.error;
      if (item.response) {
        only = item.response;
        count += 1;
      }
    }
    if (count !== 1 || only === undefined) {
      throw Errors.modelExecution(
        request.model,
        `the decoupled model sent ${count} responses where exactly one was expected; ` +
        `use a streaming API (gRPC ModelStreamInfer or generate_stream) for it`,
      );
    }
    return only;
  }

  private buildResponse(
    v: ModelVersion,
    request: InferRequest,
    requested: InferRequest['outputs'],
    names: readonly string[],
    response: BackendResponse,
    /** Decoupled responses may carry only some of the requested outputs. */
    partial = false,
  ): InferResponse {
    const produced = response.outputs!;
    const batching = v.config.maxBatchSize > 0;
    const outputs: Tensor[] = [];
    for (let i = 0; i < names.length; i++) {
      const name = names[i]!;
      let t = outputNamed(produced, name, i);
      if (!t) {
        if (partial) continue;
        throw Errors.modelExecution(v.modelName, `the backend did not produce requested output '${name}'`);
      }
      const spec = v.signature!.outputs.get(name);
      if (spec?.reshape) {
        // The backend saw the reshaped form; clients see the configured dims.
        const batch = batching ? t.shape[0]! : undefined;
        const count = t.shape.slice(batching ? 1 : 0).reduce((a, b) => a * b, 1);
        const known = spec.dims.reduce((p, d) => (d === -1 ? p : p * d), 1);
        const dims = spec.dims.map((d) => (d === -1 ? count / known : d));
        // The JSON text is flat: it stays valid under the configured dims.
        t = {
          name: t.name,
          datatype: t.datatype,
          shape: batch === undefined ? dims : [batch, ...dims],
          data: t.data,
          jsonData: t.jsonData,
          embeddingText: t.embeddingText,
        };
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
      for (const n of this.repository.modelNames()) {
        for (const v of this.repository.readyVersionsOf(n)) out.push(v.stats.toJSON());
      }
      return out;
    }
    const ready = this.repository.readyVersionsOf(name);
    if (ready.length === 0) throw Errors.statsModelNotAvailable(name);
    if (version !== undefined && version !== '' && version !== '-1') {
      const v = ready.find((x) => String(x.version) === version);
      if (!v) throw Errors.statsVersionNotAvailable(name);
      return [v.stats.toJSON()];
    }
    return ready.map((v) => v.stats.toJSON());
  }

  /** Every READY version, for metrics and dashboards. */
  readyVersions(): ModelVersion[] {
    return this.repository.readyVersions();
  }

  repositoryIndex(readyOnly = false, repository?: string): Promise<RepositoryIndexEntry[]> {
    return this.repository.index(readyOnly, repository);
  }

  async loadModel(name: string, options: LoadModelOptions = {}): Promise<void> {
    if (this.stopping) throw Errors.serverStopping();
    await this.repository.load(name, { config: options.config, files: options.files, repository: options.repository });
  }

  async unloadModel(name: string, options: UnloadModelOptions = {}): Promise<void> {
    await this.repository.unload(name, options);
  }

  /** The version a request addresses, or the error Triton gives. */
  private resolveVersion(name: string, version: string | undefined): ModelVersion {
    return this.repository.resolveVersion(name, version);
  }
}
