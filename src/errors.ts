/**
 * Every error a user can cause is declared here once: a stable code, the
 * Triton status class it belongs to, and from that the HTTP and gRPC status.
 * Tests assert on `code`; messages may be reworded.
 */

/** Triton's error classes (TRITONSERVER_Error codes). */
export type TritonErrorClass =
  | 'INTERNAL'
  | 'NOT_FOUND'
  | 'INVALID_ARG'
  | 'UNAVAILABLE'
  | 'UNSUPPORTED'
  | 'ALREADY_EXISTS'
  | 'CANCELLED'
  | 'UNKNOWN';

const HTTP_STATUS: Record<TritonErrorClass, number> = {
  INTERNAL: 500,
  NOT_FOUND: 404,
  UNAVAILABLE: 503,
  UNSUPPORTED: 501,
  INVALID_ARG: 400,
  ALREADY_EXISTS: 400,
  CANCELLED: 400,
  UNKNOWN: 400,
};

/** grpc-js status numbers (google.rpc.Code). */
const GRPC_STATUS: Record<TritonErrorClass, number> = {
  INTERNAL: 13,
  NOT_FOUND: 5,
  UNAVAILABLE: 14,
  UNSUPPORTED: 12,
  INVALID_ARG: 3,
  ALREADY_EXISTS: 6,
  CANCELLED: 1,
  UNKNOWN: 2,
};

export class NereidError extends Error {
  readonly code: string;
  readonly errorClass: TritonErrorClass;
  /**
   * Seconds a client should wait before trying again (HTTP Retry-After, gRPC `retry-after` metadata); unset for
   * most errors.
   */
  retryAfterSecs: number | undefined;
  constructor(code: string, errorClass: TritonErrorClass, message: string) {
    super(message);
    this.name = 'NereidError';
    this.code = code;
    this.errorClass = errorClass;
  }
  get httpStatus(): number {
    return HTTP_STATUS[this.errorClass];
  }
  get grpcStatus(): number {
    return GRPC_STATUS[this.errorClass];
  }
}

/** Wraps anything thrown into a NereidError (unknown errors are INTERNAL). */
export function asNereidError(err: unknown): NereidError {
  if (err instanceof NereidError) return err;
  return Errors.internal(err instanceof Error ? err.message : String(err));
}

/** The codes of Errors.modelReported, by class. */
export const MODEL_REPORTED_CODES: Readonly<Record<TritonErrorClass, string>> = {
  INTERNAL: 'NRD_MODEL_EXECUTION',
  NOT_FOUND: 'NRD_MODEL_REPORTED_NOT_FOUND',
  INVALID_ARG: 'NRD_MODEL_REPORTED_INVALID_ARG',
  UNAVAILABLE: 'NRD_MODEL_REPORTED_UNAVAILABLE',
  UNSUPPORTED: 'NRD_MODEL_REPORTED_UNSUPPORTED',
  ALREADY_EXISTS: 'NRD_MODEL_REPORTED_ALREADY_EXISTS',
  CANCELLED: 'NRD_MODEL_REPORTED_CANCELLED',
  UNKNOWN: 'NRD_MODEL_REPORTED_UNKNOWN',
};

const make =
  <A extends unknown[]>(code: string, errorClass: TritonErrorClass, text: (...args: A) => string) =>
  (...args: A): NereidError =>
    new NereidError(code, errorClass, text(...args));

/**
 * The catalogue. Messages that Triton clients or QA scripts match on keep
 * Triton's wording; the rest say what is wrong and where.
 */
export const Errors = {
  // Models and versions
  modelNotFound: make(
    'NRD_MODEL_NOT_FOUND',
    'NOT_FOUND',
    (m: string) => `Request for unknown model: '${m}' is not found`,
  ),
  modelNoAvailableVersions: make(
    'NRD_MODEL_NO_VERSIONS',
    'NOT_FOUND',
    (m: string) => `Request for unknown model: '${m}' has no available versions`,
  ),
  modelVersionNotFound: make(
    'NRD_MODEL_VERSION_NOT_FOUND',
    'NOT_FOUND',
    (m: string, v: string) => `Request for unknown model: '${m}' version ${v} is not found`,
  ),
  modelVersionNotReady: make(
    'NRD_MODEL_VERSION_NOT_READY',
    'UNAVAILABLE',
    (m: string, v: string) => `Request for unknown model: '${m}' version ${v} is not at ready state`,
  ),
  // Triton's two texts (GetModelVersionFromString): a negative (or zero) number, or no integer at all.
  invalidModelVersion: make(
    'NRD_INVALID_MODEL_VERSION',
    'INVALID_ARG',
    (v: string, why: 'non-positive' | 'not-integer') =>
      why === 'non-positive'
        ? `invalid model version specified '${v}' , version should be an integral value > 0`
        : `failed to get model version from specified version string '` +
          `${v}' (details: stol), version should be an integral value > 0`,
  ),
  statsModelNotAvailable: make(
    'NRD_STATS_MODEL_NOT_AVAILABLE',
    'INVALID_ARG',
    (m: string) => `requested model '${m}' is not available`,
  ),
  statsVersionNotAvailable: make(
    'NRD_STATS_VERSION_NOT_AVAILABLE',
    'INVALID_ARG',
    (m: string) => `requested model version is not available for model '${m}'`,
  ),
  serverStopping: make('NRD_SERVER_STOPPING', 'UNAVAILABLE', () => 'Server is stopping and accepts no new requests'),

  // Request validation (core); prefixed with the request id by the caller
  invalidRequest: make('NRD_INVALID_REQUEST', 'INVALID_ARG', (msg: string) => msg),
  inputCount: make(
    'NRD_INPUT_COUNT',
    'INVALID_ARG',
    (expected: string, got: number, m: string, detail: string) =>
      `expected ${expected} inputs but got ${got} inputs for model '${m}'. ${detail}`,
  ),
  unknownInput: make(
    'NRD_UNKNOWN_INPUT',
    'INVALID_ARG',
    (name: string, m: string) => `unexpected inference input '${name}' for model '${m}'`,
  ),
  duplicateInput: make(
    'NRD_DUPLICATE_INPUT',
    'INVALID_ARG',
    (name: string, m: string) => `input '${name}' already exists in request for model '${m}'`,
  ),
  duplicateOutput: make(
    'NRD_DUPLICATE_OUTPUT',
    'INVALID_ARG',
    (name: string) => `output '${name}' already exists in request`,
  ),
  unknownOutput: make(
    'NRD_UNKNOWN_OUTPUT',
    'INVALID_ARG',
    (name: string, m: string) => `unexpected inference output '${name}' for model '${m}'`,
  ),
  inputDatatype: make(
    'NRD_INPUT_DATATYPE',
    'INVALID_ARG',
    (name: string, m: string, expected: string, got: string) =>
      `inference input '${name}' data-type is '${got}', but model '${m}' expects '${expected}'`,
  ),
  inputShape: make(
    'NRD_INPUT_SHAPE',
    'INVALID_ARG',
    (name: string, m: string, expected: string, got: string) =>
      `unexpected shape for input '${name}' for model '${m}'. Expected ${expected}, got ${got}`,
  ),
  batchSizeTooLarge: make(
    'NRD_BATCH_SIZE',
    'INVALID_ARG',
    (max: number, m: string) => `inference request batch-size must be <= ${max} for '${m}'`,
  ),
  batchSizeMismatch: make(
    'NRD_BATCH_SIZE_MISMATCH',
    'INVALID_ARG',
    (m: string) => `all inputs of a request to '${m}' must have the same batch size (first dimension)`,
  ),
  inputByteSize: make(
    'NRD_INPUT_BYTE_SIZE',
    'INVALID_ARG',
    (name: string, m: string, expected: number, got: number) =>
      `input byte size mismatch for input '${name}' for model '${m}'. Expected ${expected}, got ${got}`,
  ),
  bytesElementCount: make(
    'NRD_BYTES_ELEMENT_COUNT',
    'INVALID_ARG',
    (name: string, expected: number, got: number) =>
      got < expected
        ? `expected ${expected} string elements for inference input '${name}', got ${got}`
        : `unexpected number of string elements ${got} for inference input '${name}', expecting ${expected}`,
  ),
  badParameter: make('NRD_BAD_PARAMETER', 'INVALID_ARG', (msg: string) => msg),

  // Wire decoding (frontends)
  malformedBody: make('NRD_MALFORMED_BODY', 'INVALID_ARG', (msg: string) => msg),
  jsonDataShape: make('NRD_JSON_DATA_SHAPE', 'INTERNAL', (msg: string) => msg),
  binarySize: make('NRD_BINARY_SIZE', 'INVALID_ARG', (msg: string) => msg),
  bytesEncoding: make('NRD_BYTES_ENCODING', 'INVALID_ARG', (msg: string) => msg),
  bodyTooLarge: make('NRD_BODY_TOO_LARGE', 'INVALID_ARG', (msg: string) => msg),
  tooManyChunks: make(
    'NRD_TOO_MANY_CHUNKS',
    'INVALID_ARG',
    (max: number) =>
      `Chunked request body exceeds maximum of ${max} non-empty chunks. Send fewer or larger HTTP chunks.`,
  ),
  unsupported: make('NRD_UNSUPPORTED', 'UNSUPPORTED', (msg: string) => msg),

  // Scheduling
  requestTimeout: make('NRD_REQUEST_TIMEOUT', 'UNAVAILABLE', () => 'Request timeout expired'),
  // Sequence batcher (Triton's texts)
  sequenceBatchSize: make(
    'NRD_SEQUENCE_BATCH_SIZE',
    'INVALID_ARG',
    (m: string) =>
      `inference request to model '${m}' must specify batch-size 1 due to requirements of sequence batcher`,
  ),
  sequenceNoCorrelationId: make(
    'NRD_SEQUENCE_NO_CORRELATION_ID',
    'INVALID_ARG',
    (m: string) => `inference request to model '${m}' must specify a non-zero or non-empty correlation ID`,
  ),
  sequenceNotStarted: make(
    'NRD_SEQUENCE_NOT_STARTED',
    'INVALID_ARG',
    (id: string, m: string) =>
      `inference request for sequence ${id} to model '${m}' must ` +
      `specify the START flag on the first request of the sequence`,
  ),
  sequenceCorrelationIdType: make('NRD_SEQUENCE_CORRELATION_ID_TYPE', 'INVALID_ARG', (msg: string) => msg),
  sequenceBacklogTimeout: make(
    'NRD_SEQUENCE_BACKLOG_TIMEOUT',
    'UNAVAILABLE',
    () => 'timeout of the corresponding sequence has been expired',
  ),
  sequenceStateMissing: make(
    'NRD_SEQUENCE_STATE_MISSING',
    'INTERNAL',
    (m: string, output: string) => `model '${m}' did not produce state output '${output}'`,
  ),
  cancelled: make('NRD_CANCELLED', 'CANCELLED', (what: string) => `${what} was cancelled`),

  // Configuration and loading
  config: make('NRD_CONFIG', 'INVALID_ARG', (msg: string) => msg),
  /** --load-model outside explicit mode (the command line and the in-process API say the same, in Triton's words). */
  loadModelNotExplicit: make(
    'NRD_CONFIG',
    'INVALID_ARG',
    () => "Error: Use of '--load-model' requires setting '--model-control-mode=explicit' as well.",
  ),
  loadFailed: make(
    'NRD_LOAD_FAILED',
    'INVALID_ARG',
    (m: string, why: string) => `load failed for model '${m}': ${why}`,
  ),
  // Triton reports a load whose model could not be read (missing, bad overrides) as INTERNAL with this text.
  pollFailed: make(
    'NRD_POLL_FAILED',
    'INTERNAL',
    (m: string, why: string) => `failed to load '${m}', failed to poll from model repository${why ? `: ${why}` : ''}`,
  ),
  unknownRepository: make('NRD_UNKNOWN_REPOSITORY', 'INVALID_ARG', (msg: string) => msg),
  invalidModelName: make('NRD_INVALID_MODEL_NAME', 'INVALID_ARG', (msg: string) => msg),
  warmupFailed: make(
    'NRD_WARMUP_FAILED',
    'INVALID_ARG',
    (sample: string, why: string) => `failed to run warmup sample '${sample}': ${why}`,
  ),
  // Model paging (--model-memory-budget): no room for a load, or a request's wait for its model's load ran out.
  memoryBudget: make('NRD_MEMORY_BUDGET', 'UNAVAILABLE', (msg: string) => msg),
  modelLoadWait: (m: string, waitMs: number): NereidError => {
    const e = new NereidError(
      'NRD_MODEL_LOAD_WAIT',
      'UNAVAILABLE',
      `model '${m}' is loading on demand and was not ready within --model-load-wait-ms (${waitMs} ms); ` +
        'try again shortly',
    );
    e.retryAfterSecs = 1;
    return e;
  },
  backendUnavailable: make('NRD_BACKEND_UNAVAILABLE', 'UNAVAILABLE', (msg: string) => msg),
  modelExecution: make('NRD_MODEL_EXECUTION', 'INTERNAL', (m: string, why: string) => `model '${m}' failed: ${why}`),
  /**
   * An error a model sent as its response with a class of its choosing
   * (Python's pb_utils.TritonError): the model's own message, and a code per
   * class so that each code keeps one status (INTERNAL is a failed execution).
   */
  modelReported: (errorClass: TritonErrorClass, message: string): NereidError =>
    new NereidError(MODEL_REPORTED_CODES[errorClass], errorClass, message),
  internal: make('NRD_INTERNAL', 'INTERNAL', (msg: string) => msg),
  repositoryUrl: make(
    'NRD_REPOSITORY_URL',
    'INVALID_ARG',
    (url: string, why: string) => `malformed model repository URL '${url}': ${why}`,
  ),
  repositoryUnavailable: make(
    'NRD_REPOSITORY_UNAVAILABLE',
    'INTERNAL',
    (url: string, why: string) => `model repository '${url}' is not available: ${why}`,
  ),
  controlModeDisallows: make(
    'NRD_CONTROL_MODE',
    'UNAVAILABLE',
    () => 'explicit model load / unload is not allowed if polling is enabled',
  ),

  // JSON wire values (frontends): Triton reports these as INTERNAL (HTTP 500)
  jsonParse: make('NRD_JSON_PARSE', 'INTERNAL', (msg: string) => msg),
  jsonValue: make('NRD_JSON_VALUE', 'INTERNAL', (msg: string) => msg),
  notFound: make('NRD_NOT_FOUND', 'NOT_FOUND', (msg: string) => msg),

  // Shared memory, repository naming, optional features (both frontends; Triton's wording)
  clientShmDisabled: make(
    'NRD_CLIENT_SHM_DISABLED',
    'UNSUPPORTED',
    () => "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.",
  ),
  shmRegionNotFound: make(
    'NRD_SHM_REGION_NOT_FOUND',
    'NOT_FOUND',
    (r: string) => `Unable to find shared memory region: '${r}'`,
  ),
  systemShmRegionNotFound: make(
    'NRD_SYSTEM_SHM_REGION_NOT_FOUND',
    'NOT_FOUND',
    (r: string) => `Unable to find system shared memory region: '${r}'`,
  ),
  cudaShmRegionNotFound: make(
    'NRD_CUDA_SHM_REGION_NOT_FOUND',
    'NOT_FOUND',
    (r: string) => `Unable to find cuda shared memory region: '${r}'`,
  ),
  cudaShmNoGpu: make(
    'NRD_CUDA_SHM_NO_GPU',
    'INVALID_ARG',
    (r: string) => `failed to register CUDA shared memory region: '${r}', GPUs not supported`,
  ),
  shmAlreadyRegistered: make(
    'NRD_SHM_ALREADY_REGISTERED',
    'ALREADY_EXISTS',
    (r: string) => `shared memory region '${r}' already in manager`,
  ),
  shmOpenFailed: make(
    'NRD_SHM_OPEN_FAILED',
    'INTERNAL',
    (key: string) => `Unable to open shared memory region: '${key}'`,
  ),
  shmInvalidRegion: make(
    'NRD_SHM_INVALID_REGION',
    'INTERNAL',
    (key: string) => `Invalid shared memory region: '${key}'`,
  ),
  shmRegisterInvalidArgs: make(
    'NRD_SHM_REGISTER_INVALID_ARGS',
    'INVALID_ARG',
    (r: string) => `failed to register shared memory region '${r}': invalid args`,
  ),
  shmInvalidKey: make('NRD_SHM_INVALID_KEY', 'INVALID_ARG', (msg: string) => msg),
  shmBounds: make('NRD_SHM_BOUNDS', 'INVALID_ARG', (msg: string) => msg),
  shmOutputTooSmall: make(
    'NRD_SHM_OUTPUT_TOO_SMALL',
    'INTERNAL',
    (output: string, have: number, need: number) =>
      `shared memory size specified with the request for output '${output}' ` +
      `(${have} bytes) should be at least ${need} bytes to hold the results`,
  ),
  // A decoupled model on an endpoint that takes one response (HTTP infer, gRPC ModelInfer): each frontend's own text.
  decoupledNotSupported: make('NRD_DECOUPLED_NOT_SUPPORTED', 'UNSUPPORTED', (what: string) => what),
  // generate / generate_stream (HTTP): the request JSON cannot become the model's inputs
  generateMapping: make('NRD_GENERATE_MAPPING', 'INVALID_ARG', (msg: string) => msg),
  generateResponseCount: make(
    'NRD_GENERATE_RESPONSE_COUNT',
    'INTERNAL',
    () =>
      'generate expects model to produce exactly 1 response, use generate ' +
      'stream for model that generates various number of responses',
  ),
  // Response cache configuration (start-up)
  cacheConfig: make('NRD_CACHE_CONFIG', 'INVALID_ARG', (msg: string) => msg),
  traceUnsupported: make('NRD_TRACE_UNSUPPORTED', 'UNAVAILABLE', () => 'the server does not support trace'),
  // Trace settings of a model that is not ready (HTTP and gRPC alike).
  traceUnknownModel: make('NRD_TRACE_UNKNOWN_MODEL', 'INVALID_ARG', (m: string) => `Request for unknown model : ${m}`),
  loggingUnsupported: make(
    'NRD_LOGGING_UNSUPPORTED',
    'UNAVAILABLE',
    () => 'the server does not support dynamic logging',
  ),
  // A log setting Triton would pass over (HTTP and gRPC alike): refused before anything changes.
  unknownLogSetting: make('NRD_INVALID_REQUEST', 'INVALID_ARG', (key: string) => `unknown log setting '${key}'`),
  // Triton's exact queue-full text: the request id prefix appears only when the request has an id.
  maxQueueSizeExceeded: make(
    'NRD_QUEUE_FULL',
    'UNAVAILABLE',
    (requestId: string) => `${requestId ? `[request id: ${requestId}] ` : ''}Exceeds maximum queue size`,
  ),
  // Triton's HTTP endpoint answers an unknown log_format with UNAVAILABLE (503) and this text; its gRPC
  // endpoint says it otherwise, as INVALID_ARG (badParameter there).
  invalidLogFormat: make(
    'NRD_LOG_FORMAT',
    'UNAVAILABLE',
    (format: string) => `invalid argument for --log_format, got: ${format}`,
  ),
  socketInUse: make(
    'NRD_SOCKET_IN_USE',
    'UNAVAILABLE',
    (address: string, port: number) => `Socket '${address}:${port}' already in use `,
  ),
} as const;
