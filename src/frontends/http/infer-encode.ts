/**
 * InferResponse -> HTTP body: the JSON header in Triton's key order, then
 * the bytes of binary outputs in output order. Large binary outputs are not
 * copied: the caller writes the returned views after the JSON. A small body
 * (JOIN_LIMIT bytes or less) is also laid out as one buffer, JSON and bytes
 * together, which the socket takes in one write: writing its parts one by one
 * cost the event loop more than copying a few KiB.
 */
import type { InferResponse, ParameterValue } from '../../types/api.js';
import { elementCount } from '../../tensor/datatype.js';
import { encodeJsonTensorData, formatJsonDouble } from '../../tensor/json-codec.js';
import type { DecodedInfer } from './infer-decode.js';

/** Bodies with binary outputs up to this size are joined into one buffer. */
export const JOIN_LIMIT = 16 * 1024;

export class EncodedInferResponse {
  private bytes: Buffer | undefined;

  constructor(
    /** The JSON part as text. */
    readonly text: string,
    /** Binary output bytes, in output order; zero-length outputs are left out. */
    readonly binary: Uint8Array[],
    readonly binaryByteLength: number,
    /** JSON and binary bytes in one buffer, when there are binary bytes and the body is small; `json` is its start. */
    readonly whole: Buffer | undefined = undefined,
    jsonBytes: Buffer | undefined = undefined,
  ) {
    this.bytes = jsonBytes;
  }

  /** The JSON part as UTF-8 bytes (the whole body when there are no binary bytes), made when first asked for. */
  get json(): Buffer {
    this.bytes ??= Buffer.from(this.text, 'utf8');
    return this.bytes;
  }
}

/** The JSON text and the binary parts after it in one buffer of `total` bytes. */
function joined(text: string, textBytes: number, binary: readonly Uint8Array[], total: number): Buffer {
  const out = Buffer.allocUnsafe(total);
  out.write(text, 0, textBytes, 'utf8');
  let at = textBytes;
  for (let i = 0; i < binary.length; i++) {
    const part = binary[i]!;
    out.set(part, at);
    at += part.byteLength;
  }
  return out;
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
  s +=
    '"model_name":' + JSON.stringify(response.modelName) + ',"model_version":' + JSON.stringify(response.modelVersion);
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
  if (binaryByteLength > 0 && binaryByteLength <= JOIN_LIMIT) {
    const textBytes = Buffer.byteLength(s, 'utf8');
    const total = textBytes + binaryByteLength;
    if (total <= JOIN_LIMIT) {
      const whole = joined(s, textBytes, binary, total);
      return new EncodedInferResponse(s, binary, binaryByteLength, whole, whole.subarray(0, textBytes));
    }
  }
  return new EncodedInferResponse(s, binary, binaryByteLength);
}
