/**
 * The JSON form of a ModelConfig, as Triton serves it from
 * `GET /v2/models/{m}/config` and hands it to Python models
 * (`args['model_config']`), one converter for every use: proto field names
 * in declaration order, every field printed including defaults (empty lists
 * as [], empty maps as {}), enums by name, oneof members and unset messages
 * only when set, 64-bit integers as JSON numbers rather than protobuf's
 * strings, and 32-bit floats in their shortest form (0.1, not
 * 0.10000000149011612).
 *
 * protobuf-es `toJson` does the conversion; `tritonForm` then walks the
 * schema once to put the fields in declaration order (toJson writes them by
 * field number) and to rewrite the 64-bit integers and floats.
 */
import {
  ScalarType,
  fromJson,
  toJson,
  type DescField,
  type DescMessage,
  type JsonObject,
  type JsonValue,
} from '@bufbuild/protobuf';
import { ModelConfigSchema, type ModelConfig } from '../gen/model_config_pb.js';
import { ConfigError } from './errors.js';

export function modelConfigToJson(config: ModelConfig): JsonObject {
  const json = toJson(ModelConfigSchema, config, { useProtoFieldName: true, alwaysEmitImplicit: true }) as JsonObject;
  return tritonForm(ModelConfigSchema, json);
}

function tritonForm(desc: DescMessage, json: JsonObject): JsonObject {
  const out: JsonObject = {};
  for (const field of desc.fields) {
    const value = json[field.name];
    if (value !== undefined) out[field.name] = fieldForm(field, value);
  }
  return out;
}

function fieldForm(field: DescField, value: JsonValue): JsonValue {
  switch (field.fieldKind) {
    case 'scalar':
      return scalarForm(field.scalar, value);
    case 'message':
      return tritonForm(field.message, value as JsonObject);
    case 'list':
      if (field.listKind === 'message') return (value as JsonObject[]).map((item) => tritonForm(field.message, item));
      if (field.listKind === 'scalar') return (value as JsonValue[]).map((item) => scalarForm(field.scalar, item));
      return value;
    case 'map': {
      if (field.mapKind === 'enum') return value;
      const out: JsonObject = {};
      for (const [key, item] of Object.entries(value as JsonObject)) {
        out[key] =
          field.mapKind === 'message' ? tritonForm(field.message, item as JsonObject) : scalarForm(field.scalar, item);
      }
      return out;
    }
    default:
      return value;
  }
}

function scalarForm(type: ScalarType, value: JsonValue): JsonValue {
  switch (type) {
    case ScalarType.INT64:
    case ScalarType.UINT64:
    case ScalarType.SINT64:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return typeof value === 'string' ? Number(value) : value;
    case ScalarType.FLOAT:
      return typeof value === 'number' ? shortestFloat32(value) : value;
    default:
      return value;
  }
}

/** The shortest decimal that reads back as the same 32-bit float. */
function shortestFloat32(value: number): number {
  for (let digits = 1; digits <= 9; digits++) {
    const shorter = Number(value.toPrecision(digits));
    if (Math.fround(shorter) === value) return shorter;
  }
  return value;
}

/**
 * Parses ModelConfig JSON (the load API's `config` parameter). Accepts proto
 * and lowerCamel field names, numbers or numeric strings for integers, and
 * enum names in any letter case; unknown fields are errors, as in Triton.
 */
export function modelConfigFromJson(jsonText: string): ModelConfig {
  let parsed: unknown;
  try {
    parsed = JSON.parse(jsonText);
  } catch (err) {
    throw new ConfigError(`the model configuration is not valid JSON: ${(err as Error).message}`);
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new ConfigError('the model configuration JSON must be an object');
  }
  fixEnumCase(ModelConfigSchema, parsed as Record<string, unknown>);
  try {
    const config = fromJson(ModelConfigSchema, parsed as JsonValue, { ignoreUnknownFields: false });
    roundFloats(ModelConfigSchema, config as unknown as Record<string, unknown>);
    return config;
  } catch (err) {
    const raw = err instanceof Error ? err.message : String(err);
    const plain = raw
      .replace(/^cannot decode (field |message )?inference\./, '')
      .replace(/ from JSON:/, ':');
    throw new ConfigError(`invalid model configuration JSON: ${plain}`);
  }
}

/** Rewrites enum names written in another case (`kind_gpu`) to the proto spelling, in place. */
function fixEnumCase(desc: DescMessage, obj: Record<string, unknown>): void {
  for (const [key, value] of Object.entries(obj)) {
    const field = desc.fields.find((f) => f.name === key || f.jsonName === key);
    if (field === undefined || value === null) continue;
    const values = field.enum?.values;
    const fixName = (v: unknown): unknown => {
      if (values === undefined || typeof v !== 'string') return v;
      return values.find((e) => e.name.toUpperCase() === v.toUpperCase())?.name ?? v;
    };
    switch (field.fieldKind) {
      case 'enum':
        obj[key] = fixName(value);
        break;
      case 'message':
        if (typeof value === 'object' && !Array.isArray(value))
          fixEnumCase(field.message, value as Record<string, unknown>);
        break;
      case 'list':
        if (!Array.isArray(value)) break;
        if (field.listKind === 'enum') obj[key] = value.map(fixName);
        if (field.listKind === 'message') {
          for (const item of value) {
            if (item !== null && typeof item === 'object') fixEnumCase(field.message, item as Record<string, unknown>);
          }
        }
        break;
      case 'map':
        if (typeof value !== 'object' || Array.isArray(value)) break;
        for (const [k, item] of Object.entries(value as Record<string, unknown>)) {
          if (field.mapKind === 'enum') (value as Record<string, unknown>)[k] = fixName(item);
          if (field.mapKind === 'message' && item !== null && typeof item === 'object') {
            fixEnumCase(field.message, item as Record<string, unknown>);
          }
        }
        break;
      default:
        break;
    }
  }
}

/** Stores `float` fields at 32-bit precision, as the text parser and Triton do. */
function roundFloats(desc: DescMessage, msg: Record<string, unknown>): void {
  for (const field of desc.fields) {
    let value: unknown;
    if (field.oneof !== undefined) {
      const selected = msg[field.oneof.localName] as { case: string | undefined; value?: unknown };
      if (selected.case !== field.localName) continue;
      if (field.fieldKind === 'scalar' && field.scalar === ScalarType.FLOAT) {
        selected.value = Math.fround(selected.value as number);
        continue;
      }
      value = selected.value;
    } else {
      value = msg[field.localName];
    }
    switch (field.fieldKind) {
      case 'scalar':
        if (field.scalar === ScalarType.FLOAT) msg[field.localName] = Math.fround(value as number);
        break;
      case 'message':
        if (value !== undefined) roundFloats(field.message, value as Record<string, unknown>);
        break;
      case 'list': {
        const list = value as unknown[];
        if (field.listKind === 'scalar' && field.scalar === ScalarType.FLOAT) {
          for (let i = 0; i < list.length; i++) list[i] = Math.fround(list[i] as number);
        } else if (field.listKind === 'message') {
          for (const item of list) roundFloats(field.message, item as Record<string, unknown>);
        }
        break;
      }
      case 'map': {
        const map = value as Record<string, unknown>;
        for (const key of Object.keys(map)) {
          if (field.mapKind === 'scalar' && field.scalar === ScalarType.FLOAT)
            map[key] = Math.fround(map[key] as number);
          else if (field.mapKind === 'message') roundFloats(field.message, map[key] as Record<string, unknown>);
        }
        break;
      }
      default:
        break;
    }
  }
}
