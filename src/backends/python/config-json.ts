/**
 * Reading back the configuration a Python model's auto_complete_config()
 * returns. The other direction (the JSON Triton hands to model.py as
 * `args['model_config']`) is config/'s modelConfigToJson, the same form the
 * model configuration endpoint serves.
 */
import { fromJson, type JsonValue } from '@bufbuild/protobuf';
import { ModelConfigSchema, type ModelConfig } from '../../gen/model_config_pb.js';

/** Reads a configuration dict produced by pb_utils.ModelConfig.as_dict(). */
export function modelConfigFromJsonString(text: string): ModelConfig {
  return fromJson(ModelConfigSchema, JSON.parse(text) as JsonValue, { ignoreUnknownFields: true });
}
