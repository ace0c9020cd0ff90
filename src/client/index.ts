/**
 * `nereid/client`: a typed KServe v2 / Triton client for Node over HTTP and
 * gRPC. It imports nothing of the server. See docs/client.md.
 */
export { InferenceClient } from './client.js';
export {
  AbortError,
  ConnectionError,
  InferenceClientError,
  InferenceServerError,
  InvalidInputError,
  ProtocolError,
  TimeoutError,
  type StatusCode,
} from './errors.js';
export { SystemSharedMemoryRegion } from './shared-memory.js';
export { fromBFloat16, fromFloat16, toBFloat16, toFloat16 } from './half.js';
export type * from './types.js';
