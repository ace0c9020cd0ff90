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
import { InferHead, UNSUPPORTED, WireReader } from '../../protowire/reader.js';
import type {
  InferParameter,
  ModelInferRequest,
  ModelInferRequest_InferInputTensor,
  ModelInferRequest_InferRequestedOutputTensor,
} from '../../gen/grpc_service_pb.js';

const REQUEST = 'inference.ModelInferRequest';
const INPUT = 'inference.ModelInferRequest.InferInputTensor';
const OUTPUT = 'inference.ModelInferRequest.InferRequestedOutputTensor';

const r = new WireReader();

function output(limit: number): ModelInferRequest_InferRequestedOutputTensor {
  const end = r.lengthEnd(limit);
  let name = '';
  const parameters = {} as Record<string, InferParameter>;
  while (r.pos < end) {
    const tag = r.varint();
    if (tag === 0x0a) name = r.string(end);
    else if (tag === 0x12) r.mapEntry(parameters, end);
    else throw UNSUPPORTED;
  }
  r.expectEnd(end);
  return { $typeName: OUTPUT, name, parameters } as unknown as ModelInferRequest_InferRequestedOutputTensor;
}

function request(limit: number): ModelInferRequest | undefined {
  const head = new InferHead();
  const inputs: ModelInferRequest_InferInputTensor[] = [];
  const outputs: ModelInferRequest_InferRequestedOutputTensor[] = [];
  const rawInputContents: Uint8Array[] = [];
  while (r.pos < limit) {
    const tag = r.varint();
    if (r.head(tag, head, limit)) continue;
    if (tag === 0x2a) inputs.push(r.tensor(limit, INPUT, true) as unknown as ModelInferRequest_InferInputTensor);
    else if (tag === 0x32) outputs.push(output(limit));
    else if (tag === 0x3a) rawInputContents.push(r.bytes(limit));
    else return undefined;
  }
  return {
    $typeName: REQUEST,
    modelName: head.modelName,
    modelVersion: head.modelVersion,
    id: head.id,
    parameters: head.parameters,
    inputs,
    outputs,
    rawInputContents,
  } as unknown as ModelInferRequest;
}

/**
 * The ModelInferRequest in `bytes`, equal to fromBinary(ModelInferRequestSchema, bytes),
 * or undefined where the generic decoder must decide.
 */
export function readModelInferRequest(bytes: Uint8Array): ModelInferRequest | undefined {
  return r.run(bytes, request);
}
