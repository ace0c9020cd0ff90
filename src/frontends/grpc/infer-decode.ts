/**
 * ModelInferRequest (protobuf-es message) → InferRequest for the core.
 *
 * Raw contents are not copied: protobuf-es decodes `bytes` fields as views
 * into the received buffer, and those views become the tensors' data.
 * Typed `contents` are packed into little-endian bytes (one pass each).
 * Parameter checks follow Triton's gRPC frontend, with its messages.
 */
import type { CancellationSignal } from '../../types/cancellation.js';
import type {
  InferParameter,
  InferTensorContents,
  ModelInferRequest,
  ModelInferRequest_InferInputTensor,
  ModelInferRequest_InferRequestedOutputTensor,
} from '../../gen/grpc_service_pb.js';
import { Errors, NereidError } from '../../errors.js';
import { parseWireVersion } from '../../core/version-string.js';
import type { InferRequest, ParameterValue, RequestTrace, RequestedOutput } from '../../types/api.js';
import { isDatatype, type Datatype } from '../../tensor/datatype.js';
import { encodeBytesElements, type Tensor } from '../../tensor/tensor.js';
import type { SharedMemoryRef } from '../../core/shared-memory.js';

/** The one `triton_*` request parameter a client may send. */
export const ENABLE_EMPTY_FINAL_RESPONSE = 'triton_enable_empty_final_response';

const bad = (msg: string): NereidError => Errors.badParameter(msg);

/** int64/uint64 values as plain numbers where that loses nothing. */
function intValue(v: bigint): number | bigint {
  return v >= -9007199254740991n && v <= 9007199254740991n ? Number(v) : v;
}

/** Request-level parameters, validated as Triton's gRPC frontend does. */
function decodeRequestParameters(map: { [key: string]: InferParameter }): Record<string, ParameterValue> | undefined {
  let out: Record<string, ParameterValue> | undefined;
  for (const key in map) {
    const choice = map[key]!.parameterChoice;
    let value: ParameterValue;
    switch (key) {
      case 'sequence_id':
        if (choice.case === 'int64Param') value = intValue(choice.value);
        else if (choice.case === 'stringParam') value = choice.value;
        else throw bad("invalid value type for 'sequence_id' parameter, expected int64_param or string_param.");
        break;
      case 'sequence_start':
      case 'sequence_end':
        if (choice.case !== 'boolParam') throw bad(`invalid value type for '${key}' parameter, expected bool_param.`);
        value = choice.value;
        break;
      case 'priority':
        if (choice.case === 'int64Param') {
          if (choice.value < 0n) throw bad("invalid value for 'priority', expected value >= 0.");
          value = intValue(choice.value);
        } else if (choice.case === 'uint64Param') {
          value = intValue(choice.value);
        } else {
          throw bad("invalid value type for 'priority' parameter, expected int64_param or uint64_param.");
        }
        break;
      case 'timeout':
        if (choice.case !== 'int64Param')
          throw bad("invalid value type for 'timeout' parameter, expected int64_param.");
        value = intValue(choice.value);
        break;
      default:
        if (key.startsWith('triton_')) {
          if (key !== ENABLE_EMPTY_FINAL_RESPONSE) {
            throw bad(
              `parameter keys starting with 'triton_' are reserved for Triton usage. Only the ` +
              `following keys starting with 'triton_' are allowed: ${ENABLE_EMPTY_FINAL_RESPONSE}`,
            );
          }
          if (choice.case !== 'boolParam') throw bad(`invalid value type for '${key}' parameter, expected bool_param.`);
          continue; // a frontend setting, not a request parameter
        }
        if (choice.case === 'int64Param') value = intValue(choice.value);
        else if (choice.case === 'boolParam' || choice.case === 'stringParam' || choice.case === 'doubleParam')
          value = choice.value;
        else throw bad(`invalid value type for '${key}' parameter, expected int64_param, bool_param, or string_param.`);
    }
    (out ??= {})[key] = value;
  }
  return out;
}

/** The shared-memory window a tensor names, after Triton's type and pairing checks. */
function sharedMemoryRegion(
  tensorName: string,
  params: { [key: string]: InferParameter },
): SharedMemoryRef | undefined {
  const region = params['shared_memory_region'];
  const offset = params['shared_memory_offset'];
  const size = params['shared_memory_byte_size'];
  if (region === undefined && offset === undefined && size === undefined) return undefined;
  if (region !== undefined && region.parameterChoice.case !== 'stringParam') {
    throw bad(
      `invalid value type for 'shared_memory_region' parameter for tensor '${tensorName}', expected string_param.`,
    );
  }
  for (const [key, p] of [
    ['shared_memory_offset', offset],
    ['shared_memory_byte_size', size],
  ] as const) {
    if (p === undefined) continue;
    if (region === undefined) {
      throw bad(`'${key}' can not be specified without 'shared_memory_region' parameter for tensor '${tensorName}'`);
    }
    if (p.parameterChoice.case !== 'int64Param') {
      throw bad(`invalid value type for '${key}' parameter for tensor '${tensorName}', expected int64_param.`);
    }
  }
  if (size === undefined) {
    throw bad(
      `'shared_memory_byte_size' must be specified along with ` +
      `'shared_memory_region' parameter for tensor '${tensorName}'`,
    );
  }
  const int = (p: InferParameter | undefined): number =>
    p === undefined ? 0 : Number(p.parameterChoice.value as bigint);
  return { region: region!.parameterChoice.value as string, offset: int(offset), byteSize: int(size) };
}

/** Which typed field a datatype travels in. */
const CONTENTS_FIELD: Record<Datatype, keyof Omit<InferTensorContents, '$typeName' | '$unknown'> | undefined> = {
  BOOL: 'boolContents',
  INT8: 'intContents',
  INT16: 'intContents',
  INT32: 'intContents',
  INT64: 'int64Contents',
  UINT8: 'uintContents',
  UINT16: 'uintContents',
  UINT32: 'uintContents',
  UINT64: 'uint64Contents',
  FP32: 'fp32Contents',
  FP64: 'fp64Contents',
  BYTES: 'bytesContents',
  FP16: undefined,
  BF16: undefined,
};

/** Protocol datatype a typed field carries (for Triton's mismatch message). */
const FIELD_DATATYPE: Record<string, string> = {
  boolContents: 'BOOL',
  intContents: 'INT32',
  int64Contents: 'INT64',
  uintContents: 'UINT32',
  uint64Contents: 'UINT64',
  fp32Contents: 'FP32',
  fp64Contents: 'FP64',
  bytesContents: 'BYTES',
};

const FIELDS = Object.keys(FIELD_DATATYPE) as (keyof typeof FIELD_DATATYPE)[];

function asBytes(a: ArrayBufferView): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

/** Packs typed contents into the raw little-endian layout of `datatype`. */
function packContents(
  model: string,
  input: ModelInferRequest_InferInputTensor,
  datatype: Datatype,
  c: InferTensorContents,
): Uint8Array {
  let used: string | undefined;
  for (const f of FIELDS) {
    const list = c[f as keyof InferTensorContents] as unknown as unknown[];
    if (list.length === 0) continue;
    if (used !== undefined) {
      throw Errors.invalidRequest(
        `unexpected explicit tensor data for input tensor '${input.name}' ` +
        `for model '${model}', binary data was already supplied.`,
      );
    }
    used = f;
  }
  if (used === undefined) return new Uint8Array(0);
  const expected = CONTENTS_FIELD[datatype];
  if (used !== expected) {
    throw Errors.invalidRequest(
      `unexpected explicit tensor data for input tensor '${input.name}' for model '` +
      `${model}' of type '${FIELD_DATATYPE[used]}', expected datatype '${datatype}'`,
    );
  }
  switch (datatype) {
    case 'BOOL':
      return Uint8Array.from(c.boolContents, (b) => (b ? 1 : 0));
    case 'INT8':
      return asBytes(Int8Array.from(c.intContents));
    case 'INT16':
      return asBytes(Int16Array.from(c.intContents));
    case 'INT32':
      return asBytes(Int32Array.from(c.intContents));
    case 'INT64':
      return asBytes(BigInt64Array.from(c.int64Contents));
    case 'UINT8':
      return Uint8Array.from(c.uintContents);
    case 'UINT16':
      return asBytes(Uint16Array.from(c.uintContents));
    case 'UINT32':
      return asBytes(Uint32Array.from(c.uintContents));
    case 'UINT64':
      return asBytes(BigUint64Array.from(c.uint64Contents));
    case 'FP32':
      return asBytes(Float32Array.from(c.fp32Contents));
    case 'FP64':
      return asBytes(Float64Array.from(c.fp64Contents));
    case 'BYTES':
      return encodeBytesElements(c.bytesContents);
    default:
      return new Uint8Array(0);
  }
}

function decodeShape(dims: readonly bigint[]): number[] {
  const shape = new Array<number>(dims.length);
  for (let i = 0; i < dims.length; i++) shape[i] = Number(dims[i]);
  return shape;
}

function decodeOutput(o: ModelInferRequest_InferRequestedOutputTensor, shm: ShmPlan): RequestedOutput {
  const params = o.parameters;
  let classification: number | undefined;
  let passThrough: Record<string, ParameterValue> | undefined;
  const region = sharedMemoryRegion(o.name, params);
  for (const key in params) {
    const choice = params[key]!.parameterChoice;
    if (key === 'classification') {
      if (choice.case !== 'int64Param')
        throw bad("invalid value type for 'classification' parameter, expected int64_param");
      if (choice.value <= 0n) throw bad("invalid value for 'classification' parameter, expected >= 0");
      classification = Number(choice.value);
    } else if (key.startsWith('shared_memory_') || key === 'binary_data') {
      continue;
    } else if (choice.case !== undefined) {
      (passThrough ??= {})[key] = typeof choice.value === 'bigint' ? intValue(choice.value) : choice.value;
    }
  }
  if (region !== undefined) {
    if (classification !== undefined) throw bad("output can't set both 'shared_memory_region' and 'classification'");
    shm.outputs.set(o.name, region);
  }
  if (classification === undefined && passThrough === undefined) return { name: o.name };
  return { name: o.name, classification, parameters: passThrough };
}

/** Tensors of one request that live in client shared-memory regions. */
export interface ShmPlan {
  /** Inputs whose `data` is to be read from a region (index into the request's inputs). */
  readonly inputs: Array<{ index: number; ref: SharedMemoryRef }>;
  readonly outputs: Map<string, SharedMemoryRef>;
}

/** A decoded request; `shm` when some tensors are in shared memory. */
export interface DecodedGrpcInfer {
  readonly request: InferRequest;
  /** The request's inputs (mutable, so shared-memory bytes can be put in place). */
  readonly inputs: Tensor[];
  readonly shm: ShmPlan | undefined;
}

const NO_BYTES = new Uint8Array(0);

/**
 * Builds the core request. Throws NereidError (INVALID_ARG) with Triton's
 * wording; shared-memory regions are resolved by the caller (`shm`).
 */
export function decodeInferRequest(
  msg: ModelInferRequest,
  signal?: CancellationSignal,
  forwardedHeaders?: Readonly<Record<string, ParameterValue>>,
  trace?: RequestTrace,
): InferRequest {
  return decodeInfer(msg, signal, forwardedHeaders, trace).request;
}

/** decodeInferRequest, and which tensors the request keeps in shared memory. */
export function decodeInfer(
  msg: ModelInferRequest,
  signal?: CancellationSignal,
  forwardedHeaders?: Readonly<Record<string, ParameterValue>>,
  trace?: RequestTrace,
): DecodedGrpcInfer {
  const shm: ShmPlan = { inputs: [], outputs: new Map() };
  const model = msg.modelName;
  const raw = msg.rawInputContents;
  const inputs = new Array<Tensor>(msg.inputs.length);
  let rawIndex = 0;
  for (let i = 0; i < msg.inputs.length; i++) {
    const io = msg.inputs[i]!;
    const region = sharedMemoryRegion(io.name, io.parameters);
    if (region !== undefined) {
      if (io.contents !== undefined) {
        throw Errors.invalidRequest(
          `unexpected 'content' provided when using shared memory for input tensor '${io.name}' for model '${model}'`,
        );
      }
      if (!isDatatype(io.datatype)) {
        throw Errors.invalidRequest(
          `invalid datatype '${io.datatype}' for input tensor '${io.name}' for model '${model}'`,
        );
      }
      shm.inputs.push({ index: i, ref: region });
      inputs[i] = { name: io.name, datatype: io.datatype, shape: decodeShape(io.shape), data: NO_BYTES };
      continue;
    }
    const datatype = io.datatype;
    if (!isDatatype(datatype)) {
      throw Errors.invalidRequest(`invalid datatype '${datatype}' for input tensor '${io.name}' for model '${model}'`);
    }
    let data: Uint8Array;
    if (io.contents !== undefined) {
      if (raw.length > 0) {
        throw Errors.invalidRequest(
          `contents field must not be specified when using raw_input_contents for '${io.name}' for model '${model}'`,
        );
      }
      data = packContents(model, io, datatype, io.contents);
    } else if (rawIndex < raw.length) {
      data = raw[rawIndex++]!;
    } else {
      throw Errors.invalidRequest(`unable to find data for input tensor '${io.name}' for model '${model}' in request.`);
    }
    inputs[i] = { name: io.name, datatype, shape: decodeShape(io.shape), data };
  }
  if (rawIndex < raw.length) {
    throw Errors.invalidRequest(
      `expected ${rawIndex} raw_input_contents (one per input in 'inputs') but got ${raw.length} for model '${model}'`,
    );
  }

  let outputs: RequestedOutput[] | undefined;
  if (msg.outputs.length > 0) {
    outputs = new Array<RequestedOutput>(msg.outputs.length);
    for (let i = 0; i < msg.outputs.length; i++) outputs[i] = decodeOutput(msg.outputs[i]!, shm);
  }

  let parameters = decodeRequestParameters(msg.parameters);
  if (forwardedHeaders !== undefined) parameters = Object.assign(parameters ?? {}, forwardedHeaders);

  const request: InferRequest = {
    model,
    version: parseWireVersion(msg.modelVersion) ?? '',
    id: msg.id,
    inputs,
    outputs,
    parameters,
    signal,
    trace,
  };
  return { request, inputs, shm: shm.inputs.length > 0 || shm.outputs.size > 0 ? shm : undefined };
}

/** Whether the request asked for empty final responses (decoupled models, streaming only). */
export function wantsEmptyFinalResponse(msg: ModelInferRequest): boolean {
  const p = msg.parameters[ENABLE_EMPTY_FINAL_RESPONSE];
  return p !== undefined && p.parameterChoice.case === 'boolParam' && p.parameterChoice.value;
}
