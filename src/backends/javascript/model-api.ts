/**
 * The types a JavaScript model is written against (for models written in
 * TypeScript): `import type { JavaScriptModel } from 'nereid'`. The contract
 * is described in docs/javascript-backend.md.
 */
import type { ParameterValue } from '../backend.js';
import type { Datatype } from '../../tensor/datatype.js';
import type { InitializeArgs } from './protocol.js';
import type { ModelTensor, TensorData } from './tensors.js';

/** An input as execute() receives it, or an output of an infer() call. */
export type JavaScriptTensor = ModelTensor;

/** An output (or an infer() input) as a model may give it. */
export interface JavaScriptOutputTensor {
  name: string;
  /** Defaults to the configured datatype (outputs only). */
  datatype?: Datatype;
  shape: readonly number[];
  data: TensorData | readonly number[] | readonly bigint[] | readonly boolean[] | readonly (string | Uint8Array)[];
}

export interface JavaScriptRequest {
  readonly id: string;
  readonly inputs: readonly JavaScriptTensor[];
  readonly requestedOutputs: readonly string[];
  readonly parameters: Readonly<Record<string, ParameterValue>>;
  /** First dimension of the inputs when the model batches, otherwise 1. */
  readonly batchSize: number;
  /** The sequence's correlation id (0n or '' outside a sequence). */
  readonly correlationId: bigint | string;
  /** Bit 1: the sequence starts with this request, bit 2: it ends with it. */
  readonly flags: number;
  /** True once the client went away (while execute() runs, and for a decoupled request until its final response). */
  isCancelled(): boolean;
}

export type JavaScriptResponse =
  | { outputs: readonly JavaScriptOutputTensor[]; parameters?: Readonly<Record<string, string | number | boolean>> }
  | { error: string | Error };

export interface JavaScriptInferCall {
  model: string;
  version?: number | string;
  id?: string;
  inputs: readonly JavaScriptOutputTensor[];
  /** Output names; every output when left out. */
  outputs?: readonly string[];
  parameters?: Readonly<Record<string, ParameterValue>>;
}

export interface JavaScriptInferResult {
  modelName: string;
  modelVersion: string;
  outputs: JavaScriptTensor[];
  parameters?: Readonly<Record<string, ParameterValue>>;
}

export interface JavaScriptModelArgs extends InitializeArgs {
  /** Calls a model of this server (BLS). Rejects with an Error carrying `code` and `errorClass`. */
  infer(call: JavaScriptInferCall): Promise<JavaScriptInferResult>;
}

/** The shape of the default-exported class's instances. */
export interface JavaScriptModel {
  initialize?(args: JavaScriptModelArgs): unknown;
  execute(requests: JavaScriptRequest[]): readonly JavaScriptResponse[] | Promise<readonly JavaScriptResponse[]>;
  finalize?(): unknown;
}
