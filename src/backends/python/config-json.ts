/**
 * The model configuration as the JSON string Triton hands to model.py
 * (`args['model_config']`): proto field names, every implicit scalar
 * printed, enums by name, and 64-bit integers as numbers rather than the
 * strings protobuf JSON would use.
 */
import { fromJson, toJson, ScalarType, type DescMessage, type JsonObject, type JsonValue } from '@bufbuild/protobuf';
import { ModelConfigSchema, type ModelConfig } from '../../gen/model_config_pb.js';

const INT64_TYPES = new Set<ScalarType>([
  ScalarType.INT64,
  ScalarType.UINT64,
  ScalarType.FIXED64,
  ScalarType.SFIXED64,
  ScalarType.SINT64,
]);

function toNumber(v: JsonValue): JsonValue {
  return typeof v === 'string' && /^-?\d+$/.test(v) ? Number(v) : v;
}

function fixInt64(desc: DescMessage, obj: JsonObject): void {
  for (const field of desc.fields) {
    const v = obj[field.name];
    if (v === undefined || v === null) continue;
    switch (field.fieldKind) {
      case 'scalar':
        if (INT64_TYPES.has(field.scalar)) obj[field.name] = toNumber(v);
        break;
      case 'message':
        fixInt64(field.message, v as JsonObject);
        break;
      case 'list':
        if (field.listKind === 'scalar' && INT64_TYPES.has(field.scalar)) {
          obj[field.name] = (v as JsonValue[]).map(toNumber);
        } else if (field.listKind === 'message') {
          for (const item of v as JsonObject[]) fixInt64(field.message, item);
        }
        break;
      case 'map':
        if (field.mapKind === 'scalar' && INT64_TYPES.has(field.scalar)) {
          const m = v as JsonObject;
          for (const k of Object.keys(m)) m[k] = toNumber(m[k]!);
        } else if (field.mapKind === 'message') {
          for (const item of Object.values(v as JsonObject)) fixInt64(field.message, item as JsonObject);
        }
        break;
      default:
        break;
    }
  }
}

export function modelConfigToJsonObject(config: ModelConfig): JsonObject {
  const json = toJson(ModelConfigSchema, config, { useProtoFieldName: true, alwaysEmitImplicit: true }) as JsonObject;
  fixInt64(ModelConfigSchema, json);
  return json;
}

export function modelConfigToJsonString(config: ModelConfig): string {
  return JSON.stringify(modelConfigToJsonObject(config));
}

/** Reads a configuration dict produced by pb_utils.ModelConfig.as_dict(). */
export function modelConfigFromJsonString(text: string): ModelConfig {
  return fromJson(ModelConfigSchema, JSON.parse(text) as JsonValue, { ignoreUnknownFields: true });
}
