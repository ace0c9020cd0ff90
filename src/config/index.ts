/**
 * Model configuration: config.pbtxt in, a completed and checked ModelConfig
 * out. A load runs, in order:
 *   readModelConfig        text → message, with where each field was written
 *   completeBackendFields  name, platform, backend, default_model_filename
 *   (backend auto-complete, e.g. ONNX inputs/outputs)
 *   normalizeModelConfig   Triton's defaults (safe to run again)
 *   validateModelConfig    errors name the field and its file:line:column
 *   validateEnsembleModels ensembles only, once the step models are loaded
 * modelConfigToJson / modelConfigFromJson give the JSON form Triton serves.
 */
export { ConfigError, type ConfigErrorLocation, type SourcePosition } from './errors.js';
export { parseModelConfig, parseModelConfigWithPositions, collectPositions, type ParsedModelConfig } from './parse.js';
export { lookupPosition, joinPath, parentPath, type ConfigPositions } from './positions.js';
export {
  readModelConfig,
  CONFIG_FILE_NAME,
  CONFIG_FOLDER_NAME,
  type ModelConfigSource,
  type ReadModelConfigOptions,
} from './read.js';
export {
  completeBackendFields,
  Backend,
  Platform,
  DefaultFilename,
  type BackendFieldsContext,
} from './backend-fields.js';
export {
  normalizeModelConfig,
  normalizeInstanceGroups,
  SEQUENCE_IDLE_DEFAULT_MICROSECONDS,
  TRITON_DEFAULT_CPU_INSTANCE_COUNT,
  type NormalizeOptions,
} from './normalize.js';
export { validateModelConfig, type ValidateOptions } from './validate.js';
export { modelConfigToJson, modelConfigFromJson } from './json.js';
export {
  validateEnsembleModels,
  findEnsembleCycle,
  type StepConfigLookup,
  type EnsembleModelsResult,
} from './ensemble-models.js';
