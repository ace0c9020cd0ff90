/**
 * InferResponse -> HTTP body: the JSON header in Triton's key order, then
 * the bytes of binary outputs in output order. Binary outputs are not copied:
 * the caller writes the returned views after the JSON.
 */
import type { InferResponse, ParameterValue } from '../../types/api.js';
import { elementCount } from '../../tensor/datatype.js';
import { encodeJsonTensorData, formatJsonDouble } from '../../tensor/json-codec.js';
import type { DecodedInfer } from './infer-decode.js';

export class EncodedInferResponse {
  constructor(
    /** The JSON part (the whole body when there are no binary bytes). */
    readonly json: Buffer,
    /** Binary output bytes, in output order; zero-length outputs are left out. */
    readonly binary: Uint8Array[],
    readonly binaryByteLength: number,
  ) {}
}

function parameterText(v: ParameterValue): string {
  switch (typeof v) {
    case 'string':
      return JSON.stringify(v);
    case 'boolean':
      return v ? 'true' : 'false';
    case 'bigint':
      return v.toString();
    default:
      return Number.isInteger(v) ? String(v) : formatJsonDouble(v);
  }
}

/** `{"k":v,...}` for a parameter map, or '' when it is empty. */
export function parametersJson(params: Readonly<Record<string, ParameterValue>> | undefined): string {
  if (params === undefined) return '';
  let s = '';
  for (const key of Object.keys(params)) {
    s += (s === '' ? '{' : ',') + JSON.stringify(key) + ':' + parameterText(params[key]!);
  }
  return s === '' ? '' : s + '}';
}

export function encodeInferResponse(response: InferResponse, plan: DecodedInfer): EncodedInferResponse {
  let s = '{';
  if (response.id !== '') s += '"id":' + JSON.stringify(response.id) + ',';
  s += '"model_name":' + JSON.stringify(response.modelName) + ',"model_version":' + JSON.stringify(response.modelVersion);
  const params = parametersJson(response.parameters);
  if (params !== '') s += ',"parameters":' + params;
  s += ',"outputs":[';
  const binary: Uint8Array[] = [];
  let binaryByteLength = 0;
  const outputs = response.outputs;
  for (let i = 0; i < outputs.length; i++) {
    const t = outputs[i]!;
    if (i > 0) s += ',';
    s += '{"name":' + JSON.stringify(t.name) + ',"datatype":"' + t.datatype + '","shape":[' + t.shape.join(',') + ']';
    if (plan.shmOutputs?.has(t.name)) {
      s += '}'; // written into the client's region
    } else if (plan.isBinary(t.name)) {
      const size = t.data.byteLength;
      s += ',"parameters":{"binary_data_size":' + size + '}}';
      if (size > 0) {
        binary.push(t.data);
        binaryByteLength += size;
      }
    } else {
      // Text a backend formatted already (off the event loop) is the same encodeJsonTensorData wrote.
      s += ',"data":' + (t.jsonData ?? encodeJsonTensorData(t.name, t.datatype, t.data, elementCount(t.shape))) + '}';
    }
  }
  s += ']}';
  return new EncodedInferResponse(Buffer.from(s, 'utf8'), binary, binaryByteLength);
}
