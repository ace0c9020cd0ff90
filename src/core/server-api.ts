/**
 * The public face of the core: what frontends, the CLI and embedding Node
 * applications call. `Server` (server.ts) implements it.
 */
import type { ModelConfig } from '../gen/model_config_pb.js';
import type { NereidError } from '../errors.js';
import type {
  CacheHitTicket,
  InferRequest,
  InferResponse,
  ModelControlMode,
  ModelMetadata,
  ModelStatistics,
  RepositoryIndexEntry,
  ServerMetadata,
  StreamResponse,
} from '../types/api.js';
import type { SharedMemoryApi } from './shared-memory.js';

export interface LoadModelOptions {
  /** ModelConfig as a JSON string; overrides config.pbtxt and forces a reload. */
  config?: string;
  /** "file:<version>/<path>" overrides (bytes). Require `config`. */
  files?: Record<string, Uint8Array>;
  /** The repository name of `/v2/repository/{repository}/models/{m}/load`: the model must be in it. */
  repository?: string;
}

export interface UnloadModelOptions {
  /** Also unload the models it depends on that were loaded only for it. */
  unloadDependents?: boolean;
  /** The repository name of the repository-name form: only a model in it is unloaded. */
  repository?: string;
}

export interface ServerApi {
  readonly controlMode: ModelControlMode;
  /** Client shared-memory regions (system; CUDA answers that there is no GPU). */
  readonly sharedMemory: SharedMemoryApi;
  /** Loads the repository (per control mode). Resolves when every model has settled (READY or UNAVAILABLE). */
  start(): Promise<void>;
  /** Stops taking requests, waits for in-flight ones (bounded by exitTimeoutSecs), unloads every model. */
  stop(): Promise<void>;
  /** True from start() until stop() has finished draining, so liveness holds during the drain. */
  isLive(): boolean;
  /** With strict readiness: live and every model READY. Otherwise: live. False once stop() has begun. */
  isReady(): boolean;
  metadata(): ServerMetadata;
  /** Throws NereidError NOT_FOUND / UNAVAILABLE as Triton does. */
  modelMetadata(name: string, version?: string): ModelMetadata;
  /** The completed configuration. Throws like modelMetadata. */
  modelConfig(name: string, version?: string): ModelConfig;
  /**
   * The completed configuration in Triton's JSON form (what `GET /v2/models/{m}/config` serves). Throws like
   * modelMetadata.
   */
  modelConfigJson(name: string, version?: string): Record<string, unknown>;
  /**
   * The model version's folder on local disk (where files beside
   * config.pbtxt, such as a tokenizer, are read from). Throws like
   * modelMetadata. Optional for test doubles.
   */
  modelDirectory?(name: string, version?: string): string | undefined;
  /**
   * true: ready. false: lifecycle READY but an instance's readiness check said no.
   * Throws NOT_FOUND (unknown model / no ready version) or UNAVAILABLE (that version not ready).
   */
  modelReady(name: string, version?: string): Promise<boolean>;
  infer(request: InferRequest): Promise<InferResponse>;
  /**
   * UNAVAILABLE "Exceeds maximum queue size" when the model's bounded queue
   * is full now (undefined when the request is admitted), for the caller to
   * answer before it reads or decodes the request. `requestId`, when known,
   * prefixes the message as the scheduler's would. Optional for test doubles.
   */
  admissionError?(model: string, version?: string, requestId?: string): NereidError | undefined;
  /**
   * Counts `count` requests refused for a full queue elsewhere (a frontend thread) as admissionError would have.
   * Optional for test doubles.
   */
  countRefusals?(model: string, version: string | undefined, count: number): void;
  /**
   * Whether the model's bounded queue is full now, with nothing counted (admissionError counts a refusal).
   * Optional for test doubles.
   */
  queueFull?(model: string, version?: string): boolean;
  /**
   * Answers again a request that was answered from the response cache with
   * `ticket` (InferResponse.cacheHit), for a caller that kept the reply:
   * true when `model`/`version` still resolve to the same model version and
   * its cache still holds that entry, and the hit is then counted in the
   * statistics and the cache's counters as infer() counts one; false (nothing
   * counted) when the caller must run the request through infer(). Optional
   * for test doubles.
   */
  replayCacheHit?(ticket: CacheHitTicket, model: string, version?: string): boolean;
  /**
   * Every response of a request, for decoupled models (zero or more, then the
   * final flag) and for any other model (one final response). Never throws:
   * errors arrive as final error items. Optional for test doubles: callers
   * use `streamResponses()` (response-stream.ts), which falls back to infer().
   */
  inferStream?(request: InferRequest): AsyncIterableIterator<StreamResponse>;
  /**
   * Model paging (docs/paging.md): when `model` is in a repository but not
   * loaded (unloaded for room, or never loaded in explicit mode) and a memory
   * budget is set, loads it (once, however many callers wait) and resolves
   * when it serves; rejects UNAVAILABLE with a Retry-After past
   * --model-load-wait-ms. undefined when the model is not one to load so:
   * the caller reports its own error. infer() and inferStream() do this
   * themselves; a frontend that resolves the model first calls it. Optional
   * for test doubles.
   */
  pageIn?(model: string): Promise<void> | undefined;
  /** Statistics of READY versions; name omitted: every model. Throws INVALID_ARG as Triton does. */
  modelStatistics(name?: string, version?: string): ModelStatistics[];
  /** `repository`: only the models of the repository of that name (throws INVALID_ARG for an unknown name). */
  repositoryIndex(readyOnly?: boolean, repository?: string): Promise<RepositoryIndexEntry[]>;
  /** Explicit mode only (else UNAVAILABLE). */
  loadModel(name: string, options?: LoadModelOptions): Promise<void>;
  unloadModel(name: string, options?: UnloadModelOptions): Promise<void>;
}
