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

const VARINT = 0;
const I64 = 1;
const LEN = 2;

// ModelInferResponse
const RESP_MODEL_NAME = 1;
const RESP_MODEL_VERSION = 2;
const RESP_ID = 3;
const RESP_PARAMETERS = 4;
const RESP_OUTPUTS = 5;
const RESP_RAW_OUTPUT_CONTENTS = 6;
// ModelInferResponse.InferOutputTensor
const OUT_NAME = 1;
const OUT_DATATYPE = 2;
const OUT_SHAPE = 3;
// map entry
const MAP_KEY = 1;
const MAP_VALUE = 2;
// InferParameter
const P_BOOL = 1;
const P_INT64 = 2;
const P_STRING = 3;
const P_DOUBLE = 4;
const P_UINT64 = 5;
// ModelStreamInferResponse
const STREAM_INFER_RESPONSE = 2;

const TWO_POW_63 = 1n << 63n;

function varintSize(n: number): number {
  let size = 1;
  while (n >= 128) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

/** Size of an int64 as protobuf writes it (negative: 10 bytes). */
function int64Size(v: number | bigint): number {
  if (typeof v === 'bigint') {
    if (v < 0n) return 10;
    let size = 1;
    while (v >= 128n) {
      v >>= 7n;
      size++;
    }
    return size;
  }
  return v < 0 ? 10 : varintSize(v);
}

function lenFieldSize(tagSize: number, len: number): number {
  return tagSize + varintSize(len) + len;
}

class Writer {
  readonly buf: Buffer;
  pos = 0;
  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }
  varint(n: number): void {
    const buf = this.buf;
    while (n >= 128) {
      buf[this.pos++] = (n % 128) | 0x80;
      n = Math.floor(n / 128);
    }
    buf[this.pos++] = n;
  }
  int64(v: number | bigint): void {
    if (typeof v === 'number' && v >= 0) {
      this.varint(v);
      return;
    }
    let u = BigInt.asUintN(64, BigInt(v));
    const buf = this.buf;
    while (u >= 128n) {
      buf[this.pos++] = Number(u & 127n) | 0x80;
      u >>= 7n;
    }
    buf[this.pos++] = Number(u);
  }
  tag(field: number, wireType: number): void {
    this.buf[this.pos++] = (field << 3) | wireType;
  }
  string(field: number, s: string, byteLen: number): void {
    this.tag(field, LEN);
    this.varint(byteLen);
    this.pos += this.buf.write(s, this.pos, byteLen, 'utf8');
  }
  bytes(field: number, b: Uint8Array): void {
    this.tag(field, LEN);
    this.varint(b.byteLength);
    this.buf.set(b, this.pos);
    this.pos += b.byteLength;
  }
}

/** One parameter, sized once and then written. */
class EncodedParameter {
  readonly keyLen: number;
  readonly valueLen: number;
  readonly stringLen: number;
  readonly entryLen: number;
  constructor(
    readonly key: string,
    readonly value: ParameterValue,
  ) {
    this.keyLen = Buffer.byteLength(key);
    let stringLen = 0;
    let valueLen: number;
    if (typeof value === 'boolean') valueLen = 2;
    else if (typeof value === 'string') {
      stringLen = Buffer.byteLength(value);
      valueLen = lenFieldSize(1, stringLen);
    } else if (typeof value === 'bigint') valueLen = 1 + int64Size(value);
    else if (Number.isInteger(value)) valueLen = 1 + int64Size(value);
    else valueLen = 9;
    this.stringLen = stringLen;
    this.valueLen = valueLen;
    this.entryLen = lenFieldSize(1, this.keyLen) + lenFieldSize(1, valueLen);
  }
  write(w: Writer, field: number): void {
    w.tag(field, LEN);
    w.varint(this.entryLen);
    w.string(MAP_KEY, this.key, this.keyLen);
    w.tag(MAP_VALUE, LEN);
    w.varint(this.valueLen);
    const v = this.value;
    if (typeof v === 'boolean') {
      w.tag(P_BOOL, VARINT);
      w.buf[w.pos++] = v ? 1 : 0;
    } else if (typeof v === 'string') {
      w.string(P_STRING, v, this.stringLen);
    } else if (typeof v === 'bigint' || Number.isInteger(v)) {
      // Values past int64's range can only be a uint64.
      w.tag(typeof v === 'bigint' && v >= TWO_POW_63 ? P_UINT64 : P_INT64, VARINT);
      w.int64(v);
    } else {
      w.tag(P_DOUBLE, I64);
      w.buf.writeDoubleLE(v, w.pos);
      w.pos += 8;
    }
  }
}

function encodeParameters(
  params: Readonly<Record<string, ParameterValue>> | undefined,
  stream: boolean,
  final: boolean,
): EncodedParameter[] {
  const out: EncodedParameter[] = [];
  if (params)
    for (const key in params) if (key !== 'triton_final_response') out.push(new EncodedParameter(key, params[key]!));
  if (stream) out.push(new EncodedParameter('triton_final_response', final));
  return out;
}

function stringFieldSize(byteLen: number): number {
  return byteLen === 0 ? 0 : lenFieldSize(1, byteLen);
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

  let size = stringFieldSize(nameLen) + stringFieldSize(versionLen) + stringFieldSize(idLen);
  for (const p of params) size += lenFieldSize(1, p.entryLen);
  for (let i = 0; i < n; i++) {
    const t = outputs[i]!;
    const tNameLen = Buffer.byteLength(t.name);
    const dtLen = t.datatype.length;
    let shapeLen = 0;
    for (const d of t.shape) shapeLen += int64Size(d);
    const tensorLen =
      stringFieldSize(tNameLen) + stringFieldSize(dtLen) + (shapeLen === 0 ? 0 : lenFieldSize(1, shapeLen));
    sizes[i * 4] = tNameLen;
    sizes[i * 4 + 1] = dtLen;
    sizes[i * 4 + 2] = shapeLen;
    sizes[i * 4 + 3] = tensorLen;
    size += lenFieldSize(1, tensorLen) + lenFieldSize(1, t.data.byteLength);
  }

  const w = new Writer(stream ? lenFieldSize(1, size) : size);
  if (stream) {
    w.tag(STREAM_INFER_RESPONSE, LEN);
    w.varint(size);
  }
  if (nameLen > 0) w.string(RESP_MODEL_NAME, res.modelName, nameLen);
  if (versionLen > 0) w.string(RESP_MODEL_VERSION, res.modelVersion, versionLen);
  if (idLen > 0) w.string(RESP_ID, res.id, idLen);
  for (const p of params) p.write(w, RESP_PARAMETERS);
  for (let i = 0; i < n; i++) {
    const t = outputs[i]!;
    w.tag(RESP_OUTPUTS, LEN);
    w.varint(sizes[i * 4 + 3]!);
    if (sizes[i * 4]! > 0) w.string(OUT_NAME, t.name, sizes[i * 4]!);
    if (sizes[i * 4 + 1]! > 0) w.string(OUT_DATATYPE, t.datatype, sizes[i * 4 + 1]!);
    const shapeLen = sizes[i * 4 + 2]!;
    if (shapeLen > 0) {
      w.tag(OUT_SHAPE, LEN);
      w.varint(shapeLen);
      for (const d of t.shape) w.int64(d);
    }
  }
  for (let i = 0; i < n; i++) w.bytes(RESP_RAW_OUTPUT_CONTENTS, outputs[i]!.data);
  if (w.pos !== w.buf.length) throw new Error(`ModelInferResponse encoder wrote ${w.pos} of ${w.buf.length} bytes`);
  return w.buf;
}
