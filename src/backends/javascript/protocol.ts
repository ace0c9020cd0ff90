/**
 * Messages between an instance's main-thread handle (model-worker.ts) and
 * its worker thread (worker.ts).
 *
 * Tensor bytes travel as references into buffers, not as copies: the main
 * thread packs a batch's inputs into one SharedArrayBuffer, so the model's
 * input arrays, and anything it passes on from them (outputs, infer()
 * inputs), are views of memory both threads share. Bytes the model made
 * itself are copied once on the worker thread into a buffer that is
 * transferred, never shared with the model afterwards.
 */
import type { ParameterValue } from '../backend.js';
import type { Datatype } from '../../tensor/datatype.js';

/** A tensor on the wire: its bytes are `l` bytes at offset `o` of buffer `b`. */
export interface WireTensor {
  readonly n: string;
  readonly d: Datatype;
  readonly s: readonly number[];
  readonly b: ArrayBufferLike;
  readonly o: number;
  readonly l: number;
}

/** One output as the worker checks it against the configuration (reshape applied). */
export interface OutputSpec {
  readonly name: string;
  readonly datatype: Datatype;
  readonly dims: readonly number[];
}

/** The model-facing part of initialize()'s args (the worker adds `infer`). */
export interface InitializeArgs {
  readonly modelName: string;
  readonly modelVersion: number;
  readonly instanceName: string;
  readonly instanceKind: 'CPU' | 'GPU' | 'MODEL';
  readonly deviceId: number;
  /** The model's folder (config.pbtxt and version folders). */
  readonly modelDirectory: string;
  /** The model configuration in Triton's JSON form. */
  readonly modelConfig: Record<string, unknown>;
}

export type WorkerInit =
  | {
      readonly mode: 'serve';
      /** Absolute path of model.mjs / model.js. */
      readonly file: string;
      /** For error locations relative to the model folder. */
      readonly modelDir: string;
      readonly args: InitializeArgs;
      readonly outputs: readonly OutputSpec[];
      readonly maxBatchSize: number;
      readonly executeTimeoutMs: number;
      readonly spinMicros: number;
      /** model_transaction_policy.decoupled: requests carry a response sender. */
      readonly decoupled: boolean;
    }
  | {
      readonly mode: 'auto-complete';
      readonly file: string;
      readonly modelDir: string;
      readonly config: Record<string, unknown>;
    };

export interface WireRequest {
  readonly id: string;
  readonly inputs: readonly WireTensor[];
  readonly requestedOutputs: readonly string[];
  readonly parameters: Readonly<Record<string, ParameterValue>>;
  readonly batchSize: number;
  readonly correlationId: bigint | string;
  readonly flags: number;
  /** Decoupled models: the key the request's responses are sent under. */
  readonly k?: number;
  /**
   * Other models: the key a cancellation of the request comes under while execute() runs (requests that can be
   * cancelled).
   */
  readonly c?: number;
  /** A traced request: its trace's handle, which the model's infer() calls carry back. */
  readonly tr?: number;
}

/** main -> worker: run execute() on a batch. */
export interface ExecuteMessage {
  readonly t: 'x';
  readonly id: number;
  /** hrtime ns when posted. */
  readonly at: number;
  /** Nothing else was in flight on this instance (the worker may busy-wait after it). */
  readonly light: boolean;
  readonly requests: readonly WireRequest[];
}

/** main -> worker: the result of an infer() call. */
export type InferResultMessage =
  | {
      readonly t: 'r';
      readonly id: number;
      readonly modelName: string;
      readonly modelVersion: string;
      readonly outputs: readonly WireTensor[];
      readonly parameters?: Readonly<Record<string, ParameterValue>>;
    }
  | {
      readonly t: 'r';
      readonly id: number;
      readonly error: string;
      readonly code: string;
      readonly errorClass: string;
    };

/**
 * main -> worker: the client of a request went away (request.isCancelled()): a decoupled one's stream key, or another's
 * cancel key.
 */
export interface CancelMessage {
  readonly t: 'c';
  readonly k: number;
}

export type ToWorker = ExecuteMessage | InferResultMessage | CancelMessage | { readonly t: 'close' };

export type WireResponse =
  | { readonly outputs: readonly WireTensor[]; readonly parameters?: Readonly<Record<string, ParameterValue>> }
  | { readonly error: string };

/** worker -> main: execute() finished. `times`: picked up, execute() called, execute() settled (hrtime ns). */
export type ExecuteDoneMessage =
  | {
      readonly t: 'd';
      readonly id: number;
      readonly times: readonly number[];
      readonly responses: readonly WireResponse[];
    }
  | { readonly t: 'd'; readonly id: number; readonly times: readonly number[]; readonly error: string };

/** worker -> main: an infer() call (BLS). */
export interface InferCallMessage {
  readonly t: 'i';
  readonly id: number;
  readonly model: string;
  readonly version?: string;
  readonly requestId?: string;
  readonly inputs: readonly WireTensor[];
  readonly outputs?: readonly string[];
  readonly parameters?: Readonly<Record<string, ParameterValue>>;
  /** The trace of the batch the call was made from (its only traced request), traced as its parent. */
  readonly trace?: number;
}

/** worker -> main: one response of a decoupled request (`r` undefined: a bare final flag). */
export interface StreamResponseMessage {
  readonly t: 's';
  readonly k: number;
  readonly final: boolean;
  readonly r?: WireResponse;
}

export type FromWorker =
  | StreamResponseMessage
  | { readonly t: 'ready' }
  | { readonly t: 'init-error'; readonly message: string }
  | { readonly t: 'config'; readonly config: Record<string, unknown> | null }
  | { readonly t: 'closed' }
  | ExecuteDoneMessage
  | InferCallMessage;

export { nowNs } from '../idle-wait.js';

/** Tensors start at multiples of 8 in a packed buffer, so that every typed array can view them. */
export function align8(n: number): number {
  return (n + 7) & ~7;
}
