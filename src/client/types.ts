/**
 * The public shapes of the KServe v2 client: what a caller passes and what it
 * gets back, the same over HTTP and gRPC. See docs/client.md.
 */
import type { Datatype } from '../tensor/datatype.js';

export type { Datatype };

/** The data of one tensor, by datatype (FP16 and BF16 as their raw 16-bit words). */
export interface TensorDataByType {
  BOOL: Uint8Array;
  UINT8: Uint8Array;
  UINT16: Uint16Array;
  UINT32: Uint32Array;
  UINT64: BigUint64Array;
  INT8: Int8Array;
  INT16: Int16Array;
  INT32: Int32Array;
  INT64: BigInt64Array;
  FP16: Uint16Array;
  FP32: Float32Array;
  FP64: Float64Array;
  BF16: Uint16Array;
  BYTES: Uint8Array[] | string[];
}

/** What an output's `data` holds. */
export type TensorData = TensorDataByType[Datatype];

/** What an input's `data` may be: the typed array of its datatype, or a plain array converted on sending. */
export type InputData =
  TensorData | readonly number[] | readonly bigint[] | readonly boolean[] | readonly string[] | readonly Uint8Array[];

/** A request, response or tensor parameter. Integers beyond 2^53 come back as bigint. */
export type ParameterValue = string | number | boolean | bigint;
export type Parameters = Record<string, ParameterValue>;

/** A window of a registered shared-memory region. */
export interface SharedMemoryRef {
  /** The name the region was registered under. */
  readonly region: string;
  readonly byteSize: number;
  /** Byte offset within the region (default 0). */
  readonly offset?: number;
}

export interface InferInput {
  readonly name: string;
  readonly datatype: Datatype;
  readonly shape: readonly number[];
  /** The elements, row-major; omitted when `sharedMemory` names where they lie. */
  readonly data?: InputData;
  readonly sharedMemory?: SharedMemoryRef;
  readonly parameters?: Parameters;
}

export interface RequestedOutput {
  readonly name: string;
  /** Top-K classification (the output comes back as BYTES "value:index[:label]"). */
  readonly classification?: number;
  /** Have the server write the output into a registered region instead of the response. */
  readonly sharedMemory?: SharedMemoryRef;
  readonly parameters?: Parameters;
}

/** Per-call options every method takes. */
export interface CallOptions {
  /** Cancels the call: the promise rejects with an AbortError and the server is told (stream closed). */
  readonly signal?: AbortSignal;
  /** Milliseconds; overrides the client's `timeout`. */
  readonly timeout?: number;
  /** Extra HTTP headers or gRPC metadata for this call. */
  readonly headers?: Record<string, string>;
}

export interface InferRequest extends CallOptions {
  readonly model: string;
  /** A version number as a string ("1"); omitted: the server picks. */
  readonly version?: string;
  readonly id?: string;
  readonly inputs: readonly InferInput[];
  /** Omitted: every output of the model. */
  readonly outputs?: readonly RequestedOutput[];
  readonly parameters?: Parameters;
  /** BYTES outputs as UTF-8 strings instead of Uint8Array elements. */
  readonly bytesAsStrings?: boolean;
}

export interface InferOutput {
  readonly name: string;
  readonly datatype: Datatype;
  readonly shape: number[];
  /** Empty when the output was written to shared memory (then `sharedMemory` is set). */
  readonly data: TensorData;
  readonly parameters?: Parameters;
  readonly sharedMemory?: SharedMemoryRef;
}

export interface InferResult {
  readonly model: string;
  readonly version: string;
  /** The request's id; '' when it had none. */
  readonly id: string;
  readonly outputs: InferOutput[];
  readonly parameters?: Parameters;
  /** Streams only: set on the response the server marks as the request's last. */
  readonly final?: boolean;
}

export interface ServerMetadata {
  readonly name: string;
  readonly version: string;
  readonly extensions: string[];
}

export interface TensorMetadata {
  readonly name: string;
  readonly datatype: string;
  readonly shape: number[];
}

export interface ModelMetadata {
  readonly name: string;
  readonly versions: string[];
  readonly platform: string;
  readonly inputs: TensorMetadata[];
  readonly outputs: TensorMetadata[];
}

/** The model configuration in Triton's JSON form (proto field names), as `GET .../config` returns it. */
export type ModelConfig = Record<string, unknown>;

export interface RepositoryIndexEntry {
  readonly name: string;
  readonly version?: string;
  readonly state?: string;
  readonly reason?: string;
}

export interface LoadModelOptions extends CallOptions {
  /** A configuration (JSON text or an object) that overrides config.pbtxt. */
  readonly config?: string | Record<string, unknown>;
  /** Files that override the model's, keyed "<version>/<path>" (needs `config`). */
  readonly files?: Record<string, Uint8Array>;
}

export interface UnloadModelOptions extends CallOptions {
  readonly unloadDependents?: boolean;
}

export interface StatisticDuration {
  readonly count: number;
  readonly ns: number;
}

export interface ModelStatistics {
  readonly name: string;
  readonly version: string;
  readonly last_inference: number;
  readonly inference_count: number;
  readonly execution_count: number;
  readonly inference_stats: Record<string, StatisticDuration>;
  readonly response_stats: Record<string, Record<string, StatisticDuration>>;
  readonly batch_stats: Array<{
    readonly batch_size: number;
    readonly compute_input: StatisticDuration;
    readonly compute_infer: StatisticDuration;
    readonly compute_output: StatisticDuration;
  }>;
  readonly memory_usage: Array<{ readonly type: string; readonly id: number; readonly byte_size: number }>;
}

/** Trace settings as the server reports them: `trace_level` a list, every other value a string. */
export type TraceSettings = Record<string, string | string[]>;
/** A change: a value, a list, or null to clear a model's override back to the global value. */
export type TraceSettingsUpdate = Record<string, string | number | readonly string[] | null>;

export interface LogSettings {
  readonly log_file: string;
  readonly log_info: boolean;
  readonly log_warning: boolean;
  readonly log_error: boolean;
  readonly log_verbose_level: number;
  readonly log_format: string;
}
export type LogSettingsUpdate = Partial<Omit<LogSettings, 'log_file'>>;

export interface SharedMemoryStatus {
  readonly name: string;
  readonly key: string;
  readonly offset: number;
  readonly byteSize: number;
}

export interface RetryOptions {
  /** Tries in all, the first included (default 3). */
  readonly attempts?: number;
  /** Wait before the first retry in ms (default 50); doubled per retry, with jitter. */
  readonly initialDelay?: number;
  /** Upper bound of one wait in ms (default 2000). */
  readonly maxDelay?: number;
}

export interface ClientOptions {
  /** http://, https://, grpc:// or grpcs://host:port. */
  readonly url: string;
  /** Default per-call timeout in ms (default: none). */
  readonly timeout?: number;
  /** Opt-in retries with exponential backoff of calls that failed as UNAVAILABLE. */
  readonly retry?: RetryOptions | boolean;
  /** HTTP only: kept-alive connections in the pool (default 16). gRPC multiplexes one HTTP/2 connection. */
  readonly connections?: number;
  /** HTTP only: "binary" (default, the binary tensor extension) or "json" `data` arrays. */
  readonly tensorFormat?: 'binary' | 'json';
  /** Compress request bodies and ask for compressed answers (HTTP: gzip or deflate; gRPC: gzip). */
  readonly compression?: 'gzip' | 'deflate';
  /** Sent with every call (HTTP headers or gRPC metadata). */
  readonly headers?: Record<string, string>;
  /** TLS for https:// and grpcs://: PEM root certificates, client key and certificate. */
  readonly tls?: { readonly ca?: string | Buffer; readonly key?: string | Buffer; readonly cert?: string | Buffer };
}
