/**
 * The one seam between the core and the backends. A backend turns model
 * files into instances that execute batches of requests; it never sees HTTP,
 * gRPC or the scheduler.
 */
import type { Logger } from 'pino';
import type { ModelConfig } from '../gen/model_config_pb.js';
import type { NereidError } from '../errors.js';
import type { Tensor } from '../tensor/tensor.js';
import type { EmbeddingTextHint } from '../tensor/embedding-text.js';
import type { CancellationSignal } from '../types/cancellation.js';
import type {
  InferRequest,
  InferResponse,
  JsonOutputHint,
  ParameterValue,
  RequestTrace,
  StreamResponse,
} from '../types/api.js';

export type { ParameterValue } from '../types/api.js';

/** One request as a backend receives it: validated against the model's configuration. */
export interface BackendRequest {
  readonly id: string;
  /** Inputs in request order. With max_batch_size > 0 each shape starts with the batch dimension. */
  readonly inputs: readonly Tensor[];
  /** The outputs to produce (every configured output when the client named none). */
  readonly requestedOutputs: readonly string[];
  readonly parameters: Readonly<Record<string, ParameterValue>>;
  /** First dimension when the model batches, otherwise 1. */
  readonly batchSize: number;
  /** Sequence correlation id (0 / '' when not part of a sequence). */
  readonly correlationId: bigint | string;
  /** Bit 1: sequence start, bit 2: sequence end. */
  readonly flags: number;
  /**
   * Decoupled models only (model_transaction_policy.decoupled): where the
   * model sends this request's responses, any number of them, the last one
   * marked final. Undefined for every other model.
   */
  readonly responseSender?: ResponseSender | undefined;
  /** Aborted when the client went away; decoupled backends pass it on to the model. */
  readonly signal?: CancellationSignal | undefined;
  /**
   * Outputs the client will get as JSON text: a backend that runs off the
   * event loop may set their Tensor.jsonData (formatted with
   * encodeJsonTensorData, so the text is the same). A hint; undefined when none.
   */
  readonly jsonOutputs?: JsonOutputHint | undefined;
  /**
   * An output the client will get as embeddings items: a backend that runs off the event loop may set its
   * Tensor.embeddingText (made with hintedItems, so the text is the same). A hint; undefined when none.
   */
  readonly embeddingText?: EmbeddingTextHint | undefined;
  /** Set when the request is traced: a backend that serves calls from the model (BLS) spawns their traces from it. */
  readonly trace?: RequestTrace | undefined;
}

/**
 * The streaming response path of decoupled models. The backend calls send()
 * for each response as the model produces it, during or after execute();
 * the call with `final` set ends the request (its response may be
 * undefined: a final flag with no response). Calls after the final one are
 * ignored.
 *
 * For a request with a sender, execute() resolves once the model has taken
 * the request: the response at its position is ignored unless it is an
 * error, which ends the stream (as a final error response) when the model
 * had not sent its final response yet.
 */
export interface ResponseSender {
  send(response: BackendResponse | undefined, final: boolean): void;
}

/** One response, in the order of the requests given to execute(). */
export type BackendResponse =
  | {
      readonly outputs: readonly Tensor[];
      readonly parameters?: Readonly<Record<string, ParameterValue>>;
      readonly error?: undefined;
    }
  | { readonly error: NereidError; readonly outputs?: undefined };

/**
 * Backends call these as they pass the stages of an execution, so that the
 * statistics can split compute time the way Triton does. Calling neither is
 * allowed: the whole execution is then counted as compute_infer.
 */
export interface ExecutionTimer {
  /** Inputs are gathered and handed to the framework; `atNs`: when (hrtime ns) if not now. */
  inputDone(atNs?: bigint): void;
  /** The framework returned; what follows is output handling. `atNs`: when (hrtime ns) if not now. */
  inferDone(atNs?: bigint): void;
  /** Time the batch waited inside the instance for the execution before it, ns (see SchedulingHooks). */
  waited(ns: number): void;
}

/**
 * The scheduling hooks of an instance that runs on a thread or process of its
 * own and takes executions while it runs one, so that it goes from run to run
 * without a round trip through the event loop. The schedulers read them; a
 * backend without them gets one execution at a time.
 *
 * - `maxInFlight`: how many executions the instance takes at once. It runs
 *   them one after another, each waiting inside it for the one before; the
 *   backend reports that wait with `ExecutionTimer.waited`, and it counts as
 *   queue time, not compute_input.
 * - `batchSlots`: how many batches the dynamic batcher may hand it at once,
 *   the running one included (default 2, at most maxInFlight). An instance
 *   that merges batches waiting behind each other into one run may take more:
 *   whatever the event loop handed over meanwhile then runs as one batch
 *   (onnxruntime's session thread merges, but keeps the default: see its
 *   instance.ts).
 * - `spreadBatches()`: asked by the dynamic batcher before it hands an idle
 *   instance what is queued: true to share it out over the free slots (two
 *   halves) instead of one batch. One batch holding every request in flight
 *   moves a closed loop of clients in lockstep, the instance idle while the
 *   event loop answers it and reads the next requests, and the event loop idle
 *   while it runs; two halves overlap the two, which pays when a core is idle
 *   and costs a little when none is (smaller batches). Default false.
 * - `collectFinished()`: takes in, synchronously, executions that finished on
 *   the instance's thread but whose notice still waits for the event loop
 *   (their promises then settle in the microtasks after the caller's task).
 *   Called by a scheduler refusing requests for a full queue: an event loop
 *   flooded with requests to refuse reaches such notices late, and the
 *   instance would wait that long for its next batch.
 */
export interface SchedulingHooks {
  readonly maxInFlight: number;
  readonly batchSlots?: number;
  spreadBatches?(): boolean;
  collectFinished?(): void;
}

export interface BackendInstance {
  /**
   * Runs one batch. Must resolve with exactly one response per request (an
   * error response for a request that failed); rejecting fails every request
   * of the batch with the rejection's message.
   */
  execute(requests: readonly BackendRequest[], timer: ExecutionTimer): Promise<BackendResponse[]>;
  /** How the instance overlaps executions with the event loop; absent: one execution at a time. */
  readonly scheduling?: SchedulingHooks;
  /** The instance's own process (process-based backends): its resident memory counts as the model's. */
  readonly pid?: number;
  /** How often the instance's process was restarted after dying (process-based backends). */
  readonly restartCount?: number;
  /** Readiness check consulted by the model-ready endpoint (Python's is_ready). */
  isReady?(): Promise<boolean>;
  close(): Promise<void>;
}

/** Something in-process the backend may call for BLS (business-logic scripting). */
export interface InferenceCaller {
  infer(request: InferRequest): Promise<InferResponse>;
  /** Every response of a request (decoupled models: zero or more, then the final flag). */
  inferStream?(request: InferRequest): AsyncIterable<StreamResponse>;
}

export interface ModelContext {
  readonly modelName: string;
  readonly version: number;
  /** The model's folder (holding config.pbtxt and version folders). */
  readonly modelDir: string;
  /** The version folder. */
  readonly versionDir: string;
  /** The completed, validated configuration. */
  readonly config: ModelConfig;
  /** `--backend-config=<this backend>,key=value` settings (plus global ones). */
  readonly backendConfig: Readonly<Record<string, string>>;
  readonly logger: Logger;
  readonly server: InferenceCaller;
  /**
   * Tells the core that the model took `bytes` more memory after its load
   * (a session made on first use): it counts against the memory budget
   * (docs/paging.md). What the load itself adds is measured by the core.
   */
  readonly memoryGrew?: (bytes: number) => void;
}

export interface InstanceContext extends ModelContext {
  /** e.g. "fraud_detector_0_1": group name, then index within the group. */
  readonly instanceName: string;
  readonly kind: 'CPU' | 'GPU' | 'MODEL';
  readonly deviceId: number;
}

export interface AutoCompleteContext {
  readonly modelName: string;
  readonly modelDir: string;
  /** The version folder auto-complete should read (the highest one present), if any. */
  readonly versionDir: string | undefined;
  /** The configuration as parsed so far (may be nearly empty when config.pbtxt is absent). */
  readonly config: ModelConfig;
  readonly backendConfig: Readonly<Record<string, string>>;
  readonly logger: Logger;
}

/** A model version loaded by a backend: shared state its instances use. */
export interface BackendModel {
  createInstance(ctx: InstanceContext): Promise<BackendInstance>;
  close(): Promise<void>;
}

export interface Backend {
  /** The `backend:` name in config.pbtxt (e.g. "onnxruntime"). */
  readonly name: string;
  /**
   * Fills what config.pbtxt left out from the model files (inputs, outputs,
   * max_batch_size...) and returns the completed configuration. Called only
   * when auto-complete is enabled.
   */
  autoCompleteConfig?(ctx: AutoCompleteContext): Promise<ModelConfig>;
  /**
   * Whether models with model_transaction_policy { decoupled: true } may load (they get a ResponseSender per request).
   */
  readonly supportsDecoupled?: boolean;
  /** Default instance count for KIND_CPU groups without `count` (Triton: 2 for onnxruntime, else 1). */
  readonly defaultCpuInstanceCount?: number;
  /** Checks the model files against the configuration and loads what instances share. */
  loadModel(ctx: ModelContext): Promise<BackendModel>;
  /**
   * The checks loadModel makes before it loads anything (the model file is
   * there and fits the configuration, the parameters are valid), with the
   * same errors, without loading the model or starting anything:
   * `nereid validate` runs them. loadModel runs them too (share the code).
   */
  checkModel?(ctx: ModelContext): Promise<void>;
}
