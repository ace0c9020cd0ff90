/**
 * InferResponse → ModelInferResponse / ModelStreamInferResponse bytes.
 *
 * Written by hand (sizes first, then one buffer) because this is the hot
 * path: each output's bytes are copied exactly once, into the message, and
 * no intermediate message objects are built. Field numbers are those of
 * proto/grpc_service.proto; the round-trip tests decode the result with the
 * generated code to keep the two in step.
 */
import type { InferResponse, ParameterValue } from '../../types/api.js';
import { int64Size, lenField, stringField, WireParameter, WireWriter } from '../../protowire/writer.js';

// Tags, (field << 3) | wire type: ModelInferResponse
const RESP_MODEL_NAME = 0x0a;
const RESP_MODEL_VERSION = 0x12;
const RESP_ID = 0x1a;
const RESP_PARAMETERS = 0x22;
const RESP_OUTPUTS = 0x2a;
const RESP_RAW_OUTPUT_CONTENTS = 0x32;
// ModelInferResponse.InferOutputTensor
const OUT_NAME = 0x0a;
const OUT_DATATYPE = 0x12;
const OUT_SHAPE = 0x1a;
// ModelStreamInferResponse
const STREAM_INFER_RESPONSE = 0x12;

function encodeParameters(
  params: Readonly<Record<string, ParameterValue>> | undefined,
  stream: boolean,
  final: boolean,
): WireParameter[] {
  const out: WireParameter[] = [];
  if (params)
    for (const key in params) if (key !== 'triton_final_response') out.push(new WireParameter(key, params[key]!));
  if (stream) out.push(new WireParameter('triton_final_response', final));
  return out;
}

/**
 * Encodes `res` as a ModelInferResponse, or (stream = true) as a
 * ModelStreamInferResponse holding it with `triton_final_response` set to
 * `final` (false on all but the last response of a decoupled model).
 */
export function encodeInferResponse(res: InferResponse, stream = false, final = true): Buffer {
  const nameLen = Buffer.byteLength(res.modelName);
  const versionLen = Buffer.byteLength(res.modelVersion);
  const idLen = Buffer.byteLength(res.id);
  const params = encodeParameters(res.parameters, stream, final);
  const outputs = res.outputs;
  const n = outputs.length;
  // Per output: [nameLen, datatypeLen, packedShapeLen, tensorLen]
  const sizes = new Array<number>(n * 4);

  let size = stringField(nameLen) + stringField(versionLen) + stringField(idLen);
  for (const p of params) size += p.size();
  for (let i = 0; i < n; i++) {
    const t = outputs[i]!;
    const tNameLen = Buffer.byteLength(t.name);
    const dtLen = t.datatype.length;
    let shapeLen = 0;
    for (const d of t.shape) shapeLen += int64Size(d);
    const tensorLen =
      stringField(tNameLen) + stringField(dtLen) + (shapeLen === 0 ? 0 : lenField(shapeLen));
    sizes[i * 4] = tNameLen;
    sizes[i * 4 + 1] = dtLen;
    sizes[i * 4 + 2] = shapeLen;
    sizes[i * 4 + 3] = tensorLen;
    size += lenField(tensorLen) + lenField(t.data.byteLength);
  }

  const w = new WireWriter(stream ? lenField(size) : size);
  if (stream) w.lenHead(STREAM_INFER_RESPONSE, size);
  if (nameLen > 0) w.string(RESP_MODEL_NAME, res.modelName, nameLen);
  if (versionLen > 0) w.string(RESP_MODEL_VERSION, res.modelVersion, versionLen);
  if (idLen > 0) w.string(RESP_ID, res.id, idLen);
  for (const p of params) p.write(w, RESP_PARAMETERS);
  for (let i = 0; i < n; i++) {
    const t = outputs[i]!;
    w.lenHead(RESP_OUTPUTS, sizes[i * 4 + 3]!);
    if (sizes[i * 4]! > 0) w.string(OUT_NAME, t.name, sizes[i * 4]!);
    if (sizes[i * 4 + 1]! > 0) w.string(OUT_DATATYPE, t.datatype, sizes[i * 4 + 1]!);
    const shapeLen = sizes[i * 4 + 2]!;
    if (shapeLen > 0) {
      w.lenHead(OUT_SHAPE, shapeLen);
      for (const d of t.shape) w.int64(d);
    }
  }
  for (let i = 0; i < n; i++) w.bytes(RESP_RAW_OUTPUT_CONTENTS, outputs[i]!.data);
  return w.expectFull('ModelInferResponse');
}
