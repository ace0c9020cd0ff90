/**
 * What each protocol implements: the calls of InferenceClient on prepared,
 * checked arguments. The client adds retries; a transport turns every
 * failure into one of the client's error classes.
 */
import type { WireInput } from './tensors.js';
import type {
  InferResult,
  LogSettings,
  LogSettingsUpdate,
  ModelConfig,
  ModelMetadata,
  ModelStatistics,
  Parameters,
  RepositoryIndexEntry,
  RequestedOutput,
  ServerMetadata,
  SharedMemoryStatus,
  TraceSettings,
  TraceSettingsUpdate,
} from './types.js';

/** Per-call settings after the client's defaults are applied. */
export interface CallContext {
  readonly signal: AbortSignal | undefined;
  /** Milliseconds, or undefined for none. */
  readonly timeout: number | undefined;
  readonly headers: Record<string, string> | undefined;
}

export interface WireRequest {
  readonly model: string;
  readonly version: string;
  readonly id: string;
  readonly inputs: readonly WireInput[];
  readonly outputs: readonly RequestedOutput[] | undefined;
  readonly parameters: Parameters | undefined;
  readonly bytesAsStrings: boolean;
}

export interface LoadArguments {
  /** JSON text of a configuration override. */
  readonly config: string | undefined;
  readonly files: Record<string, Uint8Array> | undefined;
}

export interface Transport {
  isLive(c: CallContext): Promise<boolean>;
  isReady(c: CallContext): Promise<boolean>;
  isModelReady(model: string, version: string, c: CallContext): Promise<boolean>;
  serverMetadata(c: CallContext): Promise<ServerMetadata>;
  modelMetadata(model: string, version: string, c: CallContext): Promise<ModelMetadata>;
  modelConfig(model: string, version: string, c: CallContext): Promise<ModelConfig>;
  infer(r: WireRequest, c: CallContext): Promise<InferResult>;
  /** The responses to one request of a decoupled (or any) model, as they come. */
  stream(r: WireRequest, c: CallContext): AsyncGenerator<InferResult, void, undefined>;
  repositoryIndex(ready: boolean, c: CallContext): Promise<RepositoryIndexEntry[]>;
  loadModel(model: string, args: LoadArguments, c: CallContext): Promise<void>;
  unloadModel(model: string, unloadDependents: boolean, c: CallContext): Promise<void>;
  statistics(model: string, version: string, c: CallContext): Promise<ModelStatistics[]>;
  traceSettings(model: string, update: TraceSettingsUpdate | undefined, c: CallContext): Promise<TraceSettings>;
  logSettings(update: LogSettingsUpdate | undefined, c: CallContext): Promise<LogSettings>;
  systemSharedMemoryStatus(name: string, c: CallContext): Promise<SharedMemoryStatus[]>;
  registerSystemSharedMemory(
    name: string,
    key: string,
    byteSize: number,
    offset: number,
    c: CallContext,
  ): Promise<void>;
  unregisterSystemSharedMemory(name: string, c: CallContext): Promise<void>;
  close(): Promise<void>;
}
