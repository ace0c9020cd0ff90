/**
 * A hand-written reader for the ModelInferRequest bytes of the common
 * case, which builds the same message object protobuf-es's fromBinary
 * would (same fields, key order, maps as plain objects, `bytes` fields as
 * views into the received buffer), in a fraction of the time: the generic
 * decoder walks the schema's reflection data for every field.
 *
 * It handles every field of ModelInferRequest, InferInputTensor,
 * InferRequestedOutputTensor and InferParameter. Anything else returns
 * undefined and the caller decodes with fromBinary, which then gives the
 * exact result or error text: typed `contents`, unknown fields, wire types
 * a field does not have, varints past 2^49 (negative numbers among them),
 * groups, and any truncated or malformed input.
 */
import type {
  InferParameter,
  ModelInferRequest,
  ModelInferRequest_InferInputTensor,
  ModelInferRequest_InferRequestedOutputTensor,
} from '../../gen/grpc_service_pb.js';

const REQUEST = 'inference.ModelInferRequest';
const INPUT = 'inference.ModelInferRequest.InferInputTensor';
const OUTPUT = 'inference.ModelInferRequest.InferRequestedOutputTensor';
const PARAMETER = 'inference.InferParameter';

/** Varints are read as numbers up to 7 bytes (49 bits); longer ones take the generic decoder. */
const MAX_VARINT_BYTES = 7;

/**
 * proto3 strings must be valid UTF-8 (fromBinary refuses others, so they go to it for its error); a leading U+FEFF is
 * text.
 */
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function decodeUtf8(bytes: Uint8Array): string {
  try {
    return utf8.decode(bytes);
  } catch {
    throw UNSUPPORTED;
  }
}

/** Thrown inside the reader to leave the fast path; never escapes readModelInferRequest. */
class Unsupported {}
const UNSUPPORTED = new Unsupported();

let buf: Uint8Array = new Uint8Array(0);
let pos = 0;

function varint(): number {
  let result = 0;
  let scale = 1;
  for (let i = 0; i < MAX_VARINT_BYTES; i++) {
    if (pos >= buf.length) throw UNSUPPORTED;
    const b = buf[pos++]!;
    result += (b & 0x7f) * scale;
    if (b < 0x80) return result;
    scale *= 128;
  }
  throw UNSUPPORTED;
}

/** The end of a length-delimited field whose length comes next. */
function lengthEnd(limit: number): number {
  const len = varint();
  const end = pos + len;
  if (end > limit) throw UNSUPPORTED;
  return end;
}

/** A string: short ASCII read directly, anything else through a strict TextDecoder as protobuf-es does. */
function string(limit: number): string {
  const end = lengthEnd(limit);
  const start = pos;
  pos = end;
  for (let i = start; i < end; i++) {
    if (buf[i]! >= 0x80) return decodeUtf8(buf.subarray(start, end));
  }
  if (end - start < 64) {
    let s = '';
    for (let i = start; i < end; i++) s += String.fromCharCode(buf[i]!);
    return s;
  }
  return decodeUtf8(buf.subarray(start, end));
}

function byteView(limit: number): Uint8Array {
  const end = lengthEnd(limit);
  const view = buf.subarray(pos, end);
  pos = end;
  return view;
}

function parameter(limit: number): InferParameter {
  const end = lengthEnd(limit);
  const p = { $typeName: PARAMETER, parameterChoice: { case: undefined } } as unknown as InferParameter;
  while (pos < end) {
    const tag = varint();
    const wire = tag & 7;
    const field = tag >>> 3;
    if (field === 1 && wire === 0) p.parameterChoice = { case: 'boolParam', value: varint() !== 0 };
    else if (field === 2 && wire === 0) p.parameterChoice = { case: 'int64Param', value: BigInt(varint()) };
    else if (field === 3 && wire === 2) p.parameterChoice = { case: 'stringParam', value: string(end) };
    else if (field === 4 && wire === 1) {
      if (pos + 8 > end) throw UNSUPPORTED;
      const view = new DataView(buf.buffer, buf.byteOffset + pos, 8);
      p.parameterChoice = { case: 'doubleParam', value: view.getFloat64(0, true) };
      pos += 8;
    } else if (field === 5 && wire === 0) p.parameterChoice = { case: 'uint64Param', value: BigInt(varint()) };
    else throw UNSUPPORTED;
  }
  if (pos !== end) throw UNSUPPORTED;
  return p;
}

/** One entry of a map<string, InferParameter> into `map` (a later entry for a key replaces an earlier one). */
function mapEntry(map: Record<string, InferParameter>, limit: number): void {
  const end = lengthEnd(limit);
  let key = '';
  let value: InferParameter | undefined;
  while (pos < end) {
    const tag = varint();
    if (tag === 0x0a) key = string(end);
    else if (tag === 0x12) value = parameter(end);
    else throw UNSUPPORTED;
  }
  // An own key named __proto__ is left to the generic decoder's handling.
  if (pos !== end || key === '__proto__') throw UNSUPPORTED;
  map[key] = value ?? ({ $typeName: PARAMETER, parameterChoice: { case: undefined } } as unknown as InferParameter);
}

function input(limit: number): ModelInferRequest_InferInputTensor {
  const end = lengthEnd(limit);
  let name = '';
  let datatype = '';
  const shape: bigint[] = [];
  const parameters = {} as Record<string, InferParameter>;
  while (pos < end) {
    const tag = varint();
    switch (tag) {
      case 0x0a:
        name = string(end);
        break;
      case 0x12:
        datatype = string(end);
        break;
      case 0x18:
        shape.push(BigInt(varint()));
        break;
      case 0x1a: {
        const packedEnd = lengthEnd(end);
        while (pos < packedEnd) shape.push(BigInt(varint()));
        if (pos !== packedEnd) throw UNSUPPORTED;
        break;
      }
      case 0x22:
        mapEntry(parameters, end);
        break;
      default:
        // contents (field 5) and anything unknown
        throw UNSUPPORTED;
    }
  }
  if (pos !== end) throw UNSUPPORTED;
  return { $typeName: INPUT, name, datatype, shape, parameters } as unknown as ModelInferRequest_InferInputTensor;
}

function output(limit: number): ModelInferRequest_InferRequestedOutputTensor {
  const end = lengthEnd(limit);
  let name = '';
  const parameters = {} as Record<string, InferParameter>;
  while (pos < end) {
    const tag = varint();
    if (tag === 0x0a) name = string(end);
    else if (tag === 0x12) mapEntry(parameters, end);
    else throw UNSUPPORTED;
  }
  if (pos !== end) throw UNSUPPORTED;
  return { $typeName: OUTPUT, name, parameters } as unknown as ModelInferRequest_InferRequestedOutputTensor;
}

/**
 * The ModelInferRequest in `bytes`, equal to fromBinary(ModelInferRequestSchema, bytes),
 * or undefined where the generic decoder must decide.
 */
export function readModelInferRequest(bytes: Uint8Array): ModelInferRequest | undefined {
  buf = bytes;
  pos = 0;
  const limit = bytes.length;
  let modelName = '';
  let modelVersion = '';
  let id = '';
  const parameters = {} as Record<string, InferParameter>;
  const inputs: ModelInferRequest_InferInputTensor[] = [];
  const outputs: ModelInferRequest_InferRequestedOutputTensor[] = [];
  const rawInputContents: Uint8Array[] = [];
  try {
    while (pos < limit) {
      const tag = varint();
      switch (tag) {
        case 0x0a:
          modelName = string(limit);
          break;
        case 0x12:
          modelVersion = string(limit);
          break;
        case 0x1a:
          id = string(limit);
          break;
        case 0x22:
          mapEntry(parameters, limit);
          break;
        case 0x2a:
          inputs.push(input(limit));
          break;
        case 0x32:
          outputs.push(output(limit));
          break;
        case 0x3a:
          rawInputContents.push(byteView(limit));
          break;
        default:
          return undefined;
      }
    }
  } catch (e) {
    if (e === UNSUPPORTED) return undefined;
    throw e;
  } finally {
    buf = EMPTY;
  }
  return {
    $typeName: REQUEST,
    modelName,
    modelVersion,
    id,
    parameters,
    inputs,
    outputs,
    rawInputContents,
  } as unknown as ModelInferRequest;
}

const EMPTY = new Uint8Array(0);
