/**
 * ModelInferRequest bytes written by hand, and ModelInferResponse bytes read
 * by hand, for the client's inference calls: the generic protobuf-es code
 * walks the schema's reflection data for every field and builds message
 * objects on the way, which cost more than the rest of a call. Sizes are
 * computed first and the message written into one buffer, each input's bytes
 * copied once. Field numbers are those of proto/grpc_service.proto; the tests
 * check both against the generated code. The reader returns undefined for
 * anything it does not expect (typed contents, unknown fields, long varints,
 * malformed bytes), and the caller then decodes with fromBinary.
 */
import type { InferParameter } from '../gen/grpc_service_pb.js';
import { InferHead, WireReader } from '../protowire/reader.js';
import { lenField, stringField, varintSize, WireParameter, WireWriter } from '../protowire/writer.js';
import type { SharedMemoryRef } from './types.js';
import type { WireRequest } from './transport.js';

const NO_OUTPUTS: WireRequest['outputs'] & object = [];

function parameters(
  p: Record<string, string | number | boolean | bigint> | undefined,
  shm: SharedMemoryRef | undefined,
): WireParameter[] | undefined {
  if (p === undefined && shm === undefined) return undefined;
  const out: WireParameter[] = [];
  if (p !== undefined) for (const k in p) out.push(new WireParameter(k, p[k]!));
  if (shm !== undefined) {
    out.push(new WireParameter('shared_memory_region', shm.region));
    out.push(new WireParameter('shared_memory_byte_size', shm.byteSize));
    if (shm.offset) out.push(new WireParameter('shared_memory_offset', shm.offset));
  }
  return out;
}

function parametersSize(list: WireParameter[] | undefined): number {
  let size = 0;
  if (list !== undefined) for (const p of list) size += p.size();
  return size;
}

// Per tensor while a request is written (encoding is synchronous, so one set serves every call): sizes, then
// parameters; inputs first, then outputs.
const sizes: number[] = [];
const tensorParameters: (WireParameter[] | undefined)[] = [];

/**
 * The ModelInferRequest for `r` as bytes: inputs' data as raw_input_contents;
 * `streamed` adds triton_enable_empty_final_response, so the end of a stream is known.
 */
export function encodeInferRequest(r: WireRequest, streamed: boolean): Buffer {
  const modelLen = Buffer.byteLength(r.model);
  const versionLen = Buffer.byteLength(r.version);
  const idLen = Buffer.byteLength(r.id);
  let requestParameters = parameters(r.parameters, undefined);
  if (streamed) (requestParameters ??= []).push(new WireParameter('triton_enable_empty_final_response', true));
  const inputs = r.inputs;
  const outputs = r.outputs ?? NO_OUTPUTS;
  // sizes: per input its name's bytes, its packed shape's bytes, its message's bytes; per output its name's and
  // its message's bytes.
  let size = stringField(modelLen) + stringField(versionLen) + stringField(idLen) + parametersSize(requestParameters);
  for (let i = 0; i < inputs.length; i++) {
    const t = inputs[i]!;
    const nameLen = Buffer.byteLength(t.name);
    let shapeLen = 0;
    for (const d of t.shape) shapeLen += varintSize(d);
    const p = parameters(t.parameters, t.sharedMemory);
    const len = stringField(nameLen) + stringField(t.datatype.length) + (shapeLen === 0 ? 0 : lenField(shapeLen)) +
      parametersSize(p);
    sizes[i * 3] = nameLen;
    sizes[i * 3 + 1] = shapeLen;
    sizes[i * 3 + 2] = len;
    tensorParameters[i] = p;
    size += lenField(len);
    if (t.bytes !== undefined) size += lenField(t.bytes.byteLength);
  }
  const o0 = inputs.length;
  for (let i = 0; i < outputs.length; i++) {
    const o = outputs[i]!;
    const nameLen = Buffer.byteLength(o.name);
    let p = parameters(o.parameters, o.sharedMemory);
    if (o.classification !== undefined) (p ??= []).push(new WireParameter('classification', o.classification));
    const len = stringField(nameLen) + parametersSize(p);
    sizes[o0 * 3 + i * 2] = nameLen;
    sizes[o0 * 3 + i * 2 + 1] = len;
    tensorParameters[o0 + i] = p;
    size += lenField(len);
  }

  const w = new WireWriter(size);
  if (modelLen > 0) w.string(0x0a, r.model, modelLen);
  if (versionLen > 0) w.string(0x12, r.version, versionLen);
  if (idLen > 0) w.string(0x1a, r.id, idLen);
  if (requestParameters !== undefined) for (const p of requestParameters) p.write(w, 0x22);
  for (let i = 0; i < inputs.length; i++) {
    const t = inputs[i]!;
    w.lenHead(0x2a, sizes[i * 3 + 2]!);
    if (sizes[i * 3]! > 0) w.string(0x0a, t.name, sizes[i * 3]!);
    w.string(0x12, t.datatype, t.datatype.length);
    const shapeLen = sizes[i * 3 + 1]!;
    if (shapeLen > 0) {
      w.lenHead(0x1a, shapeLen);
      for (const d of t.shape) w.varint(d);
    }
    const p = tensorParameters[i];
    if (p !== undefined) for (const x of p) x.write(w, 0x22);
  }
  for (let i = 0; i < outputs.length; i++) {
    const o = outputs[i]!;
    w.lenHead(0x32, sizes[o0 * 3 + i * 2 + 1]!);
    const nameLen = sizes[o0 * 3 + i * 2]!;
    if (nameLen > 0) w.string(0x0a, o.name, nameLen);
    const p = tensorParameters[o0 + i];
    if (p !== undefined) for (const x of p) x.write(w, 0x12);
  }
  for (const t of inputs) if (t.bytes !== undefined) w.bytes(0x3a, t.bytes);
  tensorParameters.fill(undefined, 0, o0 + outputs.length);
  return w.expectFull('ModelInferRequest');
}

/** The fields of a ModelInferResponse the client reads; the generated message type has them too. */
export interface InferAnswer {
  readonly modelName: string;
  readonly modelVersion: string;
  readonly id: string;
  readonly parameters: { [key: string]: InferParameter };
  readonly outputs: ReadonlyArray<{
    readonly name: string;
    readonly datatype: string;
    /** bigint from the generated decoder, numbers from readInferAnswer. */
    readonly shape: ReadonlyArray<number | bigint>;
    readonly parameters: { [key: string]: InferParameter };
    readonly contents?: unknown;
  }>;
  readonly rawOutputContents: readonly Uint8Array[];
}

const r = new WireReader();
const OUTPUT = 'inference.ModelInferResponse.InferOutputTensor';

function answer(limit: number): InferAnswer | undefined {
  const head = new InferHead();
  const outputs: InferAnswer['outputs'][number][] = [];
  const rawOutputContents: Uint8Array[] = [];
  while (r.pos < limit) {
    const tag = r.varint();
    if (r.head(tag, head, limit)) continue;
    if (tag === 0x2a) outputs.push(r.tensor(limit, OUTPUT, false));
    else if (tag === 0x32) rawOutputContents.push(r.bytes(limit));
    else return undefined;
  }
  const { modelName, modelVersion, id, parameters } = head;
  return { modelName, modelVersion, id, parameters, outputs, rawOutputContents };
}

/**
 * The ModelInferResponse in `bytes` with raw_output_contents as views of them, or undefined where the generic
 * decoder must decide.
 */
export function readInferAnswer(bytes: Uint8Array): InferAnswer | undefined {
  return r.run(bytes, answer);
}
