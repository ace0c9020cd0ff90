/**
 * The generate extension's JSON mapping (POST .../generate and
 * .../generate_stream), as Triton maps it:
 *
 * - request: each top-level key naming a model input becomes that input
 *   (a scalar or a flat array; the shape is the model's with the -1 dims
 *   filled in); any other key becomes a request parameter (string, integer,
 *   boolean or number). A `parameters` object is mapped the same way.
 * - response: one flat object with `model_name`, `model_version`, `id`
 *   (when set), each response parameter and each output (a scalar when it
 *   holds one element, else a flat array), keys in byte order.
 */
import { Errors } from '../../errors.js';
import type { InferResponse, ParameterValue, TensorMetadata } from '../../types/api.js';
import { type Datatype, datatypeInfo } from '../../tensor/datatype.js';
import { decodeJsonTensorData, encodeJsonTensorData } from '../../tensor/json-codec.js';
import type { Tensor } from '../../tensor/tensor.js';

type JsonObject = Record<string, unknown>;

function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export interface GenerateInputs {
  readonly id: string | undefined;
  readonly inputs: Tensor[];
  readonly parameters: Record<string, ParameterValue>;
}

/**
 * The shape an input of `count` elements takes: fixed dims divide it, the innermost -1 takes the rest, other -1 dims
 * are 1.
 */
function fillShape(name: string, dims: readonly number[], count: number): number[] {
  const shape = [...dims];
  let left = count;
  for (let i = shape.length - 1; i >= 0; i--) {
    const d = shape[i]!;
    if (d !== -1) {
      if (d === 0 ? left !== 0 : left % d !== 0) {
        throw Errors.generateMapping(`The schema can not convert input '${name}' to tensor with proper shape`);
      }
      left = d === 0 ? 0 : left / d;
    }
  }
  for (let i = shape.length - 1; i >= 0; i--) {
    if (shape[i] === -1) {
      shape[i] = left;
      left = 1;
    }
  }
  if (left !== 1 && !(left === 0 && count === 0)) {
    throw Errors.generateMapping(`The schema can not convert input '${name}' to tensor with proper shape`);
  }
  return shape;
}

function parameterValue(name: string, v: unknown): ParameterValue {
  if (typeof v === 'string' || typeof v === 'boolean' || typeof v === 'bigint') return v;
  if (typeof v === 'number') return v;
  throw Errors.generateMapping(`parameter '${name}' has invalid type. It should be either 'int', 'bool', or 'string'.`);
}

/** Maps a generate request body onto the model's inputs and request parameters. */
export function mapGenerateRequest(
  doc: unknown,
  metadataInputs: readonly TensorMetadata[],
  maxInputSize: number,
): GenerateInputs {
  if (!isObject(doc)) throw Errors.jsonValue('attempt to access JSON non-object as object');
  const byName = new Map<string, TensorMetadata>();
  for (const t of metadataInputs) byName.set(t.name, t);
  const inputs: Tensor[] = [];
  const parameters: Record<string, ParameterValue> = {};
  let consumed = 0;
  let id: string | undefined;

  const mapKey = (key: string, value: unknown): void => {
    const meta = byName.get(key);
    if (meta === undefined) {
      parameters[key] = parameterValue(key, value);
      return;
    }
    const datatype = meta.datatype as Datatype;
    const elements = Array.isArray(value) ? value : [value];
    const info = datatypeInfo(datatype);
    if (datatype !== 'BYTES' && info.byteSize > 0) {
      const size = elements.length * info.byteSize;
      if (size + consumed > maxInputSize) {
        throw Errors.generateMapping(
          `request size of ${consumed} bytes with input '${key}' of size ${size} bytes exceeds the maximum ` +
          `allowed input size of ${maxInputSize}. Use --http-max-input-size to increase the limit.`,
        );
      }
      consumed += size;
    }
    const shape = fillShape(key, meta.shape, elements.length);
    let data: Uint8Array;
    try {
      data = decodeJsonTensorData(key, datatype, shape, elements, maxInputSize);
    } catch (err) {
      const e = err as Error;
      throw Errors.generateMapping(
        `input '${key}' cannot be read from the generate request as ${datatype}: ${e.message}`,
      );
    }
    inputs.push({ name: key, datatype, shape, data });
  };

  for (const key of Object.keys(doc)) {
    const value = doc[key];
    if (key === 'id') {
      if (typeof value !== 'string')
        throw Errors.jsonValue("Unable to parse 'id': attempt to access JSON non-string as string");
      id = value;
      continue;
    }
    if (key === 'parameters') {
      if (byName.has(key))
        throw Errors.generateMapping("Keyword 'parameters' for nested schema also given as input tensor name");
      if (!isObject(value)) throw Errors.generateMapping("Expected JSON object for keyword: 'parameters'");
      for (const inner of Object.keys(value)) mapKey(inner, value[inner]);
      continue;
    }
    mapKey(key, value);
  }
  return { id, inputs, parameters };
}

function jsonParameter(v: ParameterValue): string {
  return typeof v === 'bigint' ? v.toString() : JSON.stringify(v);
}

/** The JSON text of one generate response. */
export function generateResponseJson(res: InferResponse): string {
  const fields = new Map<string, string>();
  if (res.id !== '') fields.set('id', JSON.stringify(res.id));
  fields.set('model_name', JSON.stringify(res.modelName));
  fields.set('model_version', JSON.stringify(res.modelVersion));
  if (res.parameters) {
    for (const key of Object.keys(res.parameters)) {
      if (key === 'triton_final_response') continue;
      fields.set(key, jsonParameter(res.parameters[key]!));
    }
  }
  for (const t of res.outputs) {
    let count = 1;
    for (const d of t.shape) count *= d;
    const text = encodeJsonTensorData(t.name, t.datatype, t.data, count);
    // One element: the value itself, not an array of one.
    fields.set(t.name, count === 1 ? text.slice(1, -1) : text);
  }
  const keys = [...fields.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  let out = '{';
  for (let i = 0; i < keys.length; i++) {
    if (i > 0) out += ',';
    out += JSON.stringify(keys[i]) + ':' + fields.get(keys[i]!)!;
  }
  return out + '}';
}
