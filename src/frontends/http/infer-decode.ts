/**
 * HTTP infer request body -> the pieces of an InferRequest, following
 * Triton's HTTP frontend check for check: the JSON header, request
 * parameters, inputs (JSON `data`, binary chunks after the header, or shared
 * memory) and requested outputs. Binary tensors are views into the body.
 */
import { Errors, NereidError } from '../../errors.js';
import type { JsonOutputHint, ParameterValue, RequestedOutput } from '../../types/api.js';
import { type Datatype, isDatatype, datatypeInfo, datatypeFromConfigEnum } from '../../tensor/datatype.js';
import type { Tensor } from '../../tensor/tensor.js';
import { decodeJsonTensorData } from '../../tensor/json-codec.js';
import type { ModelConfig } from '../../gen/model_config_pb.js';
import type { SharedMemoryRef } from '../../core/shared-memory.js';
import { parseJsonBytes, parseJsonText } from './json-parse.js';

type JsonObject = Record<string, unknown>;

/** What the HTTP layer decoded from an infer body; the output plan says which outputs go back binary. */
export class DecodedInfer implements JsonOutputHint {
  id = '';
  inputs: Tensor[] = [];
  outputs: RequestedOutput[] | undefined = undefined;
  parameters: Record<string, ParameterValue> | undefined = undefined;
  /** Kind for outputs not listed in `outputs[]` (request parameter binary_data_output). */
  defaultBinary = false;
  /** For listed outputs: their own `binary_data` flag. */
  listedBinary: Map<string, boolean> | undefined = undefined;
  /** Inputs whose bytes are in a shared-memory region (their `data` is filled in later). */
  shmInputs: Array<{ index: number; ref: SharedMemoryRef }> | undefined = undefined;
  /** Outputs to be written into a shared-memory region instead of the body. */
  shmOutputs: Map<string, SharedMemoryRef> | undefined = undefined;

  /** Listed outputs with top-K classification (they go back as BYTES the core builds). */
  classified: Set<string> | undefined = undefined;

  isBinary(outputName: string): boolean {
    const listed = this.listedBinary?.get(outputName);
    return listed === undefined ? this.defaultBinary : listed;
  }

  /** The output goes back as JSON `data` text (not binary, not into shared memory, not a classification). */
  wantsJson(outputName: string): boolean {
    return (
      !this.isBinary(outputName) &&
      this.shmOutputs?.has(outputName) !== true &&
      this.classified?.has(outputName) !== true
    );
  }

  /** Whether any output may go back as JSON `data` (the hint is worth passing on). */
  get anyJson(): boolean {
    const listed = this.listedBinary;
    if (listed === undefined) return !this.defaultBinary;
    for (const name of listed.keys()) if (this.wantsJson(name)) return true;
    return false;
  }
}

const NON_EXISTING = (key: string): string => `attempt to access non-existing object member '${key}'`;
const NON_STRING = 'attempt to access JSON non-string as string';
const NON_ARRAY = 'attempt to access JSON non-array as array';
const NON_BOOL = 'attempt to access JSON non-boolean as boolean';
const NON_UINT = 'attempt to access JSON non-unsigned-integer as unsigned-integer';
const NON_OBJECT = 'attempt to access JSON non-object as object';

function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isUint(v: unknown): v is number | bigint {
  return typeof v === 'number'
    ? Number.isInteger(v) && v >= 0
    : typeof v === 'bigint' && v >= 0n && v < 18446744073709551616n;
}

function memberAsString(obj: JsonObject, key: string, context: string): string {
  const v = obj[key];
  if (v === undefined) throw Errors.jsonValue(`${context}: ${NON_EXISTING(key)}`);
  if (typeof v !== 'string') throw Errors.jsonValue(`${context}: ${NON_STRING}`);
  return v;
}

function memberAsArray(obj: JsonObject, key: string, context: string): unknown[] {
  const v = obj[key];
  if (v === undefined) throw Errors.jsonValue(`${context}: ${NON_EXISTING(key)}`);
  if (!Array.isArray(v)) throw Errors.jsonValue(`${context}: ${NON_ARRAY}`);
  return v;
}

/** An unsigned JSON integer as a number (values beyond 2^53 are only ever too large to use exactly). */
function asUint(v: unknown, context: string): number {
  if (!isUint(v)) throw Errors.jsonValue(`${context}: ${NON_UINT}`);
  return Number(v);
}

function asBool(v: unknown, context: string): boolean {
  if (typeof v !== 'boolean') throw Errors.jsonValue(`${context}: ${NON_BOOL}`);
  return v;
}

const NO_BYTES = new Uint8Array(0);

function requestPrefix(id: string): string {
  return `[request id: ${id === '' ? '<id_unknown>' : id}] `;
}

/**
 * Parsed JSON headers of recent requests, by their text. Clients send the
 * same header again and again (same model, inputs, shapes and outputs; only
 * the binary bytes after it change), and parsing it was the largest part of
 * decoding a small binary request. The decoder only reads a parsed document,
 * never changes it, so one parse serves every request with that text.
 */
const headerMemo = new Map<string, unknown>();
const MEMO_ENTRIES = 128;
const MEMO_MAX_TEXT = 4096;

function parseRecurringHeader(text: string): unknown {
  const known = headerMemo.get(text);
  if (known !== undefined) return known;
  const doc = parseJsonText(text);
  if (headerMemo.size >= MEMO_ENTRIES) headerMemo.delete(headerMemo.keys().next().value!);
  headerMemo.set(text, doc);
  return doc;
}

/**
 * Decodes a JSON (+ binary) infer body. `headerLength` is the length of the
 * JSON header: the whole body when Inference-Header-Content-Length is absent.
 */
export function decodeInferBody(
  body: Buffer,
  headerLength: number,
  modelName: string,
  maxInputSize: number,
): DecodedInfer {
  if (headerLength > maxInputSize) {
    throw Errors.bodyTooLarge(
      `request JSON size of ${headerLength} bytes exceeds the maximum allowed input ` +
      `size of ${maxInputSize} bytes. Use --http-max-input-size to increase the limit.`,
    );
  }
  const parsed =
    headerLength <= MEMO_MAX_TEXT
      ? parseRecurringHeader(body.toString('utf8', 0, headerLength))
      : parseJsonBytes(body, 0, headerLength);
  const doc: JsonObject = isObject(parsed) ? parsed : {};
  const out = new DecodedInfer();

  const id = doc['id'];
  if (id !== undefined) {
    if (typeof id !== 'string') throw Errors.jsonValue(`Unable to parse 'id': ${NON_STRING}`);
    out.id = id;
  }
  const params = doc['parameters'];
  if (params !== undefined) decodeRequestParameters(params, out);

  let cursor = headerLength;
  const inputs = memberAsArray(doc, 'inputs', "Unable to parse 'inputs'");
  for (let i = 0; i < inputs.length; i++) {
    const input = inputs[i];
    const io: JsonObject = isObject(input) ? input : {};
    const ioParams = isObject(io['parameters']) ? (io['parameters'] as JsonObject) : undefined;
    validateInputContent(io, ioParams);

    const name = memberAsString(io, 'name', "Unable to parse 'name'");
    const datatypeText = memberAsString(io, 'datatype', "Unable to parse 'datatype'");
    const shapeJson = memberAsArray(io, 'shape', "Unable to parse 'shape'");
    const shape = new Array<number>(shapeJson.length);
    for (let d = 0; d < shapeJson.length; d++) shape[d] = asUint(shapeJson[d], "Unable to parse 'shape'");
    const datatype: Datatype | undefined = isDatatype(datatypeText) ? datatypeText : undefined;

    const binarySize = ioParams?.['binary_data_size'];
    let data: Uint8Array;
    if (binarySize !== undefined) {
      const size = asUint(binarySize, "Unable to parse 'binary_data_size'");
      const available = body.byteLength - cursor;
      if (size > available) {
        throw Errors.binarySize(
          `unexpected size for input '${name}', expecting ` +
          `${size - available} additional bytes for model '${modelName}'`,
        );
      }
      data = body.subarray(cursor, cursor + size);
      cursor += size;
    } else if (ioParams?.['shared_memory_region'] !== undefined) {
      (out.shmInputs ??= []).push({ index: out.inputs.length, ref: readShmRef(ioParams) });
      data = NO_BYTES;
    } else {
      data = decodeJsonTensorData(name, datatype, shape, io['data'], maxInputSize);
    }
    if (datatype === undefined) throw Errors.malformedBody(`invalid datatype for input ${name}`);
    out.inputs.push({ name, datatype, shape, data });
  }
  if (cursor !== body.byteLength) {
    throw Errors.binarySize(`unexpected additional input data for model '${modelName}'`);
  }

  const outputs = doc['outputs'];
  if (outputs !== undefined) decodeRequestedOutputs(memberAsArray(doc, 'outputs', "Unable to parse 'outputs'"), out);
  return out;
}

function validateInputContent(io: JsonObject, ioParams: JsonObject | undefined): void {
  const hasData = io['data'] !== undefined;
  const hasBinary = ioParams?.['binary_data_size'] !== undefined;
  const hasShm = ioParams?.['shared_memory_region'] !== undefined;
  const count = (hasData ? 1 : 0) + (hasBinary ? 1 : 0) + (hasShm ? 1 : 0);
  if (count === 1) return;
  let text =
    "Input must set only one of the following fields: 'data', 'binary_data_size' " +
    "in 'parameters', 'shared_memory_region' in 'parameters'. But";
  if (count === 0) {
    text += ' no field is set';
  } else {
    text += ' set';
    if (hasData) text += " 'data'";
    if (hasBinary) text += " 'binary_data_size'";
    if (hasShm) text += " 'shared_memory_region'";
  }
  throw Errors.malformedBody(text);
}

function readShmRef(params: JsonObject): SharedMemoryRef {
  const region = params['shared_memory_region'];
  if (typeof region !== 'string') throw Errors.jsonValue(`Unable to parse 'shared_memory_region': ${NON_STRING}`);
  const offset = params['shared_memory_offset'];
  const size = params['shared_memory_byte_size'];
  return {
    region,
    offset: offset === undefined ? 0 : asUint(offset, "Unable to parse 'shared_memory_offset'"),
    byteSize: size === undefined ? 0 : asUint(size, "Unable to parse 'shared_memory_byte_size'"),
  };
}

function decodeRequestedOutputs(outputs: unknown[], out: DecodedInfer): void {
  const requested: RequestedOutput[] = [];
  const listed = new Map<string, boolean>();
  for (let i = 0; i < outputs.length; i++) {
    const o = outputs[i];
    const io: JsonObject = isObject(o) ? o : {};
    const params = isObject(io['parameters']) ? (io['parameters'] as JsonObject) : undefined;
    if (params !== undefined && params['shared_memory_region'] !== undefined) {
      if (params['classification'] !== undefined) {
        throw Errors.malformedBody("Output can't set both 'shared_memory_region' and 'classification'");
      }
      if (params['binary_data'] !== undefined && asBool(params['binary_data'], "Unable to set 'binary_data'")) {
        throw Errors.malformedBody("Output can't set both 'shared_memory_region' and 'binary_data'");
      }
    }
    const name = memberAsString(io, 'name', "Unable to parse 'name'");
    if (listed.has(name)) {
      const dup = Errors.duplicateOutput(name);
      throw new NereidError(dup.code, dup.errorClass, requestPrefix(out.id) + dup.message);
    }
    let classification = 0;
    if (params?.['classification'] !== undefined) {
      classification = asUint(params['classification'], "Unable to set 'classification'");
    }
    if (params?.['shared_memory_region'] !== undefined) (out.shmOutputs ??= new Map()).set(name, readShmRef(params));
    let binary = false;
    if (params?.['binary_data'] !== undefined) binary = asBool(params['binary_data'], "Unable to parse 'binary_data'");
    listed.set(name, binary);
    if (classification > 0) (out.classified ??= new Set()).add(name);
    requested.push(classification > 0 ? { name, classification } : { name });
  }
  out.outputs = requested;
  out.listedBinary = listed;
}

const RESERVED_UINT = new Set(['priority', 'timeout']);
const RESERVED_BOOL = new Set(['sequence_start', 'sequence_end']);

/** Request-level parameters: Triton's reserved keys are type-checked, the rest pass through. */
function decodeRequestParameters(params: unknown, out: DecodedInfer): void {
  if (!isObject(params)) throw Errors.jsonValue(`failed to get request params.: ${NON_OBJECT}`);
  const result: Record<string, ParameterValue> = {};
  for (const key of Object.keys(params)) {
    const v = params[key];
    if (key === 'sequence_id') {
      if (isUint(v)) result[key] = v;
      else if (typeof v === 'string') result[key] = v;
      else throw Errors.jsonValue(`Unable to parse 'sequence_id': ${NON_STRING}`);
    } else if (RESERVED_BOOL.has(key)) {
      result[key] = asBool(v, `Unable to parse '${key}'`);
    } else if (RESERVED_UINT.has(key)) {
      result[key] = asUint(v, `Unable to parse '${key}'`);
    } else if (key === 'binary_data_output') {
      out.defaultBinary = asBool(v, "Unable to parse 'binary_data_output'");
    } else if (key.startsWith('triton_')) {
      throw Errors.badParameter(
        "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.",
      );
    } else if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint') {
      result[key] = v;
    } else {
      throw Errors.badParameter(`parameter '${key}' has invalid type. It should be either 'int', 'bool', or 'string'.`);
    }
  }
  out.parameters = result;
}

/**
 * A raw binary request (Inference-Header-Content-Length: 0): the body is the
 * bytes of the model's only input. Shape and datatype come from the config,
 * as Triton's core derives them; every output goes back binary.
 */
export function decodeRawInfer(body: Buffer, config: ModelConfig): DecodedInfer {
  const prefix = requestPrefix('');
  if (config.input.length !== 1) {
    throw Errors.invalidRequest(
      `${prefix}Raw request must only have 1 input (found 1) to be deduced but ` +
      `got ${config.input.length} inputs in '${config.name}' model configuration`,
    );
  }
  const input = config.input[0]!;
  const datatype = datatypeFromConfigEnum(input.dataType);
  if (datatype === undefined) {
    throw Errors.invalidRequest(
      `${prefix}raw input '${input.name}' has an invalid data type in the model configuration`,
    );
  }
  const shape: number[] = config.maxBatchSize !== 0 ? [1] : [];
  let dynamicAxis = -1;
  let elementCount = 1;
  for (const dim of input.dims) {
    const d = Number(dim);
    if (d === -1) {
      if (dynamicAxis !== -1) {
        throw Errors.invalidRequest(
          `${prefix}The shape of the raw input '${input.name}' can not be ` +
          `deduced because there are more than one variable-sized dimension`,
        );
      }
      dynamicAxis = shape.length;
    } else {
      elementCount *= d;
    }
    shape.push(d);
  }
  let data: Uint8Array = body;
  if (datatype === 'BYTES') {
    if (dynamicAxis !== -1 || elementCount !== 1) {
      throw Errors.invalidRequest(
        `${prefix}For BYTE datatype raw input '${input.name}', the model must have input shape [1]`,
      );
    }
    const prefixed = Buffer.allocUnsafe(4 + body.byteLength);
    prefixed.writeUInt32LE(body.byteLength, 0);
    body.copy(prefixed, 4);
    data = prefixed;
  } else if (dynamicAxis !== -1) {
    const size = datatypeInfo(datatype).byteSize;
    shape[dynamicAxis] = elementCount * size === 0 ? 0 : Math.floor(body.byteLength / elementCount / size);
  }
  const out = new DecodedInfer();
  out.inputs.push({ name: input.name, datatype, shape, data });
  out.defaultBinary = true;
  return out;
}

