/** Nereid's public in-process API. */
export { Server, NEREID_VERSION } from './core/server.js';
export type { ServerApi, LoadModelOptions } from './core/server-api.js';
export type * from './types/api.js';
export type { Tensor } from './tensor/tensor.js';
export { makeTensor, typedView, bytesOf, encodeBytesElements, decodeBytesElements } from './tensor/tensor.js';
export type { Datatype } from './tensor/datatype.js';
export { NereidError, Errors } from './errors.js';
export type {
  JavaScriptModel,
  JavaScriptModelArgs,
  JavaScriptRequest,
  JavaScriptResponse,
  JavaScriptTensor,
  JavaScriptOutputTensor,
  JavaScriptInferCall,
  JavaScriptInferResult,
} from './backends/javascript/model-api.js';
