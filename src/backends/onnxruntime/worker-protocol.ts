/**
 * Messages between an instance (main thread) and its session worker.
 * onnxruntime-node runs a session synchronously on the calling thread, so
 * each instance owns a worker thread that holds its InferenceSession; the
 * event loop only moves buffers (transferred, not copied) in and out.
 */
import type { InferenceSession, Tensor as OrtTensor } from 'onnxruntime-node';
import type { TypedArray } from '../../tensor/datatype.js';

export type OrtTensorType = OrtTensor.Type;

/** workerData of a session worker. */
export interface SessionWorkerInit {
  readonly modelPath: string;
  readonly options: InferenceSession.SessionOptions;
}

/** A tensor crossing the thread boundary: numbers as a typed array, strings as string[]. */
export interface WireTensor {
  readonly name: string;
  readonly type: OrtTensorType;
  readonly dims: readonly number[];
  readonly data: TypedArray | readonly string[];
}

export type ToWorker =
  | { readonly kind: 'run'; readonly id: number; readonly feeds: readonly WireTensor[]; readonly fetches: readonly string[] }
  | { readonly kind: 'close' };

export type FromWorker =
  | { readonly kind: 'ready' }
  | { readonly kind: 'init-error'; readonly message: string }
  | { readonly kind: 'result'; readonly id: number; readonly outputs: readonly WireTensor[] }
  | { readonly kind: 'run-error'; readonly id: number; readonly message: string };
