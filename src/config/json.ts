/**
 * The JSON form of a ModelConfig that Triton serves from
 * `GET /v2/models/{m}/config` (core ModelConfigToJson): proto field names,
 * every field printed including defaults (empty lists as [], empty maps as
 * {}), enums by name, oneof members and unset messages only when set, and
 * 64-bit integers as JSON numbers rather than protobuf's strings.
 */
import { ScalarType, fromJson, type DescField, type DescMessage, type JsonValue } from '@bufbuild/protobuf';
import { ModelConfigSchema, type ModelConfig } from '../gen/model_config_pb.js';
import { ConfigError } from './errors.js';

export function modelConfigToJson(config: ModelConfig): Record<string, unknown> {
  return messageToJson(ModelConfigSchema, config as unknown as Record<string, unknown>);
}

function messageToJson(desc: DescMessage, msg: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const field of desc.fields) {
    let value: unknown;
    if (field.oneof !== undefined) {
      const selected = msg[field.oneof.localName] as { case: string | undefined; value?: unknown };
      if (selected.case !== field.localName) continue;
      value = selected.value;
    } else {
      value = msg[field.localName];
    }
    if (field.fieldKind === 'message' && value === undefined) continue;
    out[field.name] = fieldToJson(field, value);
  }
  return out;
}

function fieldToJson(field: DescField, value: unknown): unknown {
  switch (field.fieldKind) {
    case 'scalar':
      return scalarToJson(field.scalar, value);
    case 'enum':
      return enumToJson(field.enum.values, value as number);
    case 'message':
      return messageToJson(field.message, value as Record<string, unknown>);
    case 'list':
      return (value as unknown[]).map((item) => {
        switch (field.listKind) {
          case 'scalar':
            return scalarToJson(field.scalar, item);
          case 'enum':
            return enumToJson(field.enum.values, item as number);
          case 'message':
            return messageToJson(field.message, item as Record<string, unknown>);
        }
      });
    case 'map': {
      const out: Record<string, unknown> = {};
      for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
        switch (field.mapKind) {
          case 'scalar':
            out[key] = scalarToJson(field.scalar, item);
            break;
          case 'enum':
            out[key] = enumToJson(field.enum.values, item as number);
            break;
          case 'message':
            out[key] = messageToJson(field.message, item as Record<string, unknown>);
            break;
        }
      }
      return out;
    }
  }
}

function enumToJson(values: readonly { name: string; number: number }[], value: number): string | number {
  return values.find((v) => v.number === value)?.name ?? value;
}

function scalarToJson(type: ScalarType, value: unknown): unknown {
  switch (type) {
    case ScalarType.INT64:
    case ScalarType.UINT64:
    case ScalarType.SINT64:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return Number(value as bigint | string);
    case ScalarType.FLOAT:
      return floatToJson(value as number, true);
    case ScalarType.DOUBLE:
      return floatToJson(value as number, false);
    case ScalarType.BYTES:
      return Buffer.from(value as Uint8Array).toString('base64');
    default:
      return value;
  }
}

function floatToJson(value: number, single: boolean): number | string {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Infinity) return 'Infinity';
  if (value === -Infinity) return '-Infinity';
  if (!single) return value;
  // The shortest decimal that reads back as the same 32-bit float (0.1, not 0.10000000149011612).
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
        if (typeof value === 'object' && !Array.isArray(value)) fixEnumCase(field.message, value as Record<string, unknown>);
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
          if (field.mapKind === 'scalar' && field.scalar === ScalarType.FLOAT) map[key] = Math.fround(map[key] as number);
          else if (field.mapKind === 'message') roundFloats(field.message, map[key] as Record<string, unknown>);
        }
        break;
      }
      default:
        break;
    }
  }
}
