/**
 * The types of the in-process API: what `Server` takes and returns. A leaf
 * module: backends, schedulers, the core and the frontends all share these,
 * so it imports none of them.
 */
import type { Tensor } from '../tensor/tensor.js';
import type { Datatype } from '../tensor/datatype.js';
import type { EmbeddingTextHint } from '../tensor/embedding-text.js';
import type { CancellationSignal } from './cancellation.js';

/** A request, response or output parameter's value. */
export type ParameterValue = string | number | boolean | bigint;

export interface RequestedOutput {
  readonly name: string;
  /** Top-K classification: the output comes back as BYTES "value:index[:label]". */
  readonly classification?: number;
  readonly parameters?: Readonly<Record<string, ParameterValue>>;
}

/**
 * Which outputs the caller will write back as JSON text (the HTTP frontend,
 * for outputs not asked for as binary data): a backend that runs off the
 * event loop may then format their JSON `data` text there (Tensor.jsonData).
 */
export interface JsonOutputHint {
  wantsJson(outputName: string): boolean;
}

export interface InferRequest {
  readonly model: string;
  /** Omitted or '' (or -1): the highest READY version. */
  readonly version?: string | number;
  readonly id?: string;
  readonly inputs: readonly Tensor[];
  /** Omitted: every output of the model. */
  readonly outputs?: readonly RequestedOutput[];
  /** Request parameters; `priority`, `timeout`, `sequence_id`, `sequence_start`, `sequence_end` are interpreted. */
  readonly parameters?: Readonly<Record<string, ParameterValue>>;
  /** Aborting cancels the request while it waits in a queue. An AbortSignal or a core `Cancellation`. */
  readonly signal?: CancellationSignal;
  /**
   * Also told the request's durations when it succeeds (an ensemble sums its steps' this way). Set on ensemble steps,
   * which a stopping server still runs.
   */
  readonly stepTimings?: StepTimingsSink;
  /** Outputs the caller will write as JSON (a hint: backends may ignore it). */
  readonly jsonOutputs?: JsonOutputHint | undefined;
  /** An output the caller will write as embeddings items (a hint: backends may ignore it). */
  readonly embeddingText?: EmbeddingTextHint | undefined;
  /** Set when the request is traced (see docs/tracing.md); whoever made the trace ends it. */
  readonly trace?: RequestTrace | undefined;
}

/** Timestamp names as Triton's trace files spell them. */
export type TraceStampName =
  | 'HTTP_RECV_START'
  | 'HTTP_RECV_END'
  | 'HTTP_SEND_START'
  | 'HTTP_SEND_END'
  | 'GRPC_WAITREAD_START'
  | 'GRPC_WAITREAD_END'
  | 'GRPC_SEND_START'
  | 'GRPC_SEND_END'
  | 'REQUEST_START'
  | 'QUEUE_START'
  | 'COMPUTE_START'
  | 'COMPUTE_INPUT_END'
  | 'COMPUTE_OUTPUT_START'
  | 'COMPUTE_END'
  | 'REQUEST_END';

export type TraceTensorActivity = 'TENSOR_QUEUE_INPUT' | 'TENSOR_BACKEND_INPUT' | 'TENSOR_BACKEND_OUTPUT';

/**
 * One traced request (Triton's TRITONSERVER_InferenceTrace): the core and the
 * schedulers record its timestamps where the work happens. Untraced requests
 * carry none, so the cost of tracing off is one check per stage.
 */
export interface RequestTrace {
  /** Unique in the server's life, from 1 (the `id` of the trace file). */
  readonly id: number;
  /** Whether TENSORS level is on: tensors are then recorded too. */
  readonly tensors: boolean;
  /** Names the model the request runs on; recorded before REQUEST_START. */
  setModel(model: string, version: string, requestId: string): void;
  /** Records a timestamp (hrtime ns; now when omitted). */
  stamp(name: TraceStampName, ns?: bigint): void;
  /** Records a tensor (TENSORS level). */
  tensor(activity: TraceTensorActivity, tensor: Tensor): void;
  /** A trace for a request this one makes (an ensemble step, a BLS call): `parent_id` is this trace's id. */
  spawn(): RequestTrace;
  /** The W3C context (`{"traceparent": ...}` JSON) a callee joins, or undefined (Triton mode). */
  context(): string | undefined;
  /** Keeps the trace open past its end() until the returned function is called (work that outlives the reply). */
  hold(): () => void;
  /** Ends this trace; the trace and those it spawned are written once all have ended. */
  end(): void;
}

/** Receives the queue and compute durations (ns) of a request that succeeded. */
export interface StepTimingsSink {
  stepSucceeded(queueNs: number, computeInputNs: number, computeInferNs: number, computeOutputNs: number): void;
}

export interface InferResponse {
  readonly modelName: string;
  readonly modelVersion: string;
  /** The request id ('' when none was given). */
  readonly id: string;
  readonly parameters?: Readonly<Record<string, ParameterValue>>;
  /** In the order requested (or the config's order when none was requested). */
  readonly outputs: readonly Tensor[];
  /** Set when the response came from the response cache: see `CacheHitTicket`. */
  readonly cacheHit?: CacheHitTicket;
}

/**
 * Names the response-cache entry that answered a request. A frontend that
 * kept the reply it encoded for that request may answer the same request
 * again with `Server.replayCacheHit(ticket)`, which counts the hit as a
 * lookup would and says whether the entry is still the one that answers.
 * Its contents are the core's.
 */
export interface CacheHitTicket {
  readonly kind: 'cache-hit';
  /** Memory the ticket holds on to (for a caller that bounds what it keeps). */
  readonly heldBytes: number;
}

/**
 * One item of Server.inferStream(): a response, an error response, or (with
 * neither) a bare final flag. The last item of every stream has `final` set.
 */
export interface StreamResponse {
  readonly response: InferResponse | undefined;
  readonly error: import('../errors.js').NereidError | undefined;
  readonly final: boolean;
}

export interface TensorMetadata {
  name: string;
  datatype: Datatype;
  shape: number[];
}

export interface ModelMetadata {
  name: string;
  versions: string[];
  platform: string;
  inputs: TensorMetadata[];
  outputs: TensorMetadata[];
}

export interface ServerMetadata {
  name: string;
  version: string;
  extensions: string[];
}

export type ModelState = 'UNKNOWN' | 'READY' | 'UNAVAILABLE' | 'LOADING' | 'UNLOADING';

export interface RepositoryIndexEntry {
  name: string;
  version?: string;
  state?: ModelState;
  reason?: string;
  /** Bytes the loaded version holds, as measured at its load (Nereid's `memory_bytes`; only under a memory budget). */
  memoryBytes?: number;
}

export interface StatDuration {
  count: number;
  ns: number;
}

/** Triton's statistics extension, field for field. */
export interface ModelStatistics {
  name: string;
  version: string;
  last_inference: number;
  inference_count: number;
  execution_count: number;
  inference_stats: {
    success: StatDuration;
    fail: StatDuration;
    queue: StatDuration;
    compute_input: StatDuration;
    compute_infer: StatDuration;
    compute_output: StatDuration;
    cache_hit: StatDuration;
    cache_miss: StatDuration;
  };
  response_stats: Record<string, unknown>;
  batch_stats: Array<{
    batch_size: number;
    compute_input: StatDuration;
    compute_infer: StatDuration;
    compute_output: StatDuration;
  }>;
  memory_usage: Array<{ type: string; id: number; byte_size: number }>;
}

export type ModelControlMode = 'none' | 'poll' | 'explicit';

export interface ServerOptions {
  /** Model repository folders (at least one). */
  modelRepositories: string[];
  /** Folder for local copies of s3://, gs:// and as:// models (`--model-cache-dir`). */
  modelCacheDir?: string;
  /** Server name reported by metadata (Triton's --id). Default "triton". */
  id?: string;
  modelControlMode?: ModelControlMode;
  /** Explicit mode: models to load at start ('*' = all). */
  loadModels?: string[];
  repositoryPollSecs?: number;
  /** Models loading at once (--model-load-thread-count). Default 4. */
  modelLoadThreadCount?: number;
  /** Extra attempts for a version that fails to load (--model-load-retry-count). Default 0. */
  modelLoadRetryCount?: number;
  modelConfigName?: string;
  strictReadiness?: boolean;
  exitOnError?: boolean;
  /** Seconds stop() waits for in-flight requests. Default 30. */
  exitTimeoutSecs?: number;
  disableAutoCompleteConfig?: boolean;
  /** `--cache-config` settings: cache name ('local') -> key -> value, e.g. { local: { size: '1048576' } }. */
  cacheConfig?: Record<string, Record<string, string>>;
  /** `--backend-config` settings: backend name ('' for global) -> key -> value. */
  backendConfig?: Record<string, Record<string, string>>;
  /** Let clients register shared-memory regions (--allow-client-shm). Default false. */
  allowClientShm?: boolean;
  /**
   * Model paging (--model-memory-budget): bytes, or a text such as "4GiB" or
   * "60%" (of the cgroup's memory limit, else the machine's). Unset: no paging.
   */
  modelMemoryBudget?: number | string;
  /** Models never unloaded for room (--model-pin); needs a budget. */
  modelPins?: string[];
  /** Most a request waits for its model to load on demand (--model-load-wait-ms). Default 30000; needs a budget. */
  modelLoadWaitMs?: number;
  /** Where paging keeps its scores across restarts (--model-memory-history); needs a budget. */
  modelMemoryHistory?: string;
  logger?: import('pino').Logger;
}
