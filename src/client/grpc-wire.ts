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
import type { SharedMemoryRef } from './types.js';
import type { WireRequest } from './transport.js';

const VARINT = 0;
const I64 = 1;
const LEN = 2;
const TWO_POW_63 = 2 ** 63;
const INT64_MAX = (1n << 63n) - 1n;

function varintSize(n: number): number {
  let size = 1;
  while (n >= 128) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

function bigVarintSize(v: bigint): number {
  let u = BigInt.asUintN(64, v);
  let size = 1;
  while (u >= 128n) {
    u >>= 7n;
    size++;
  }
  return size;
}

/** A length-delimited field of `len` bytes with a one-byte tag. */
const lenField = (len: number) => 1 + varintSize(len) + len;

class Writer {
  readonly buf: Buffer;
  pos = 0;
  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }
  byte(b: number): void {
    this.buf[this.pos++] = b;
  }
  varint(n: number): void {
    const buf = this.buf;
    while (n >= 128) {
      buf[this.pos++] = (n % 128) | 0x80;
      n = Math.floor(n / 128);
    }
    buf[this.pos++] = n;
  }
  bigVarint(v: bigint): void {
    let u = BigInt.asUintN(64, v);
    const buf = this.buf;
    while (u >= 128n) {
      buf[this.pos++] = Number(u & 127n) | 0x80;
      u >>= 7n;
    }
    buf[this.pos++] = Number(u);
  }
  /** A string field of `byteLen` UTF-8 bytes. */
  string(tag: number, s: string, byteLen: number): void {
    this.buf[this.pos++] = tag;
    this.varint(byteLen);
    this.pos += this.buf.write(s, this.pos, byteLen, 'utf8');
  }
  bytes(tag: number, b: Uint8Array): void {
    this.buf[this.pos++] = tag;
    this.varint(b.byteLength);
    this.buf.set(b, this.pos);
    this.pos += b.byteLength;
  }
}

/**
 * One map<string, InferParameter> entry, sized once and then written: integers go as int64 (a bigint past int64 as
 * uint64; a number past int64's range as double), other numbers as double.
 */
class Parameter {
  private readonly keyLen: number;
  private readonly valueLen: number;
  private readonly stringLen: number;
  /** The entry's bytes without its own tag and length. */
  readonly entryLen: number;
  constructor(
    private readonly key: string,
    private readonly value: string | number | boolean | bigint,
  ) {
    this.keyLen = Buffer.byteLength(key);
    let stringLen = 0;
    let valueLen: number;
    if (typeof value === 'boolean') valueLen = 2;
    else if (typeof value === 'string') {
      stringLen = Buffer.byteLength(value);
      valueLen = lenField(stringLen);
    } else if (typeof value === 'bigint') valueLen = 1 + bigVarintSize(value);
    else if (Parameter.isInt64(value)) valueLen = 1 + (value < 0 ? 10 : varintSize(value));
    else valueLen = 9;
    this.stringLen = stringLen;
    this.valueLen = valueLen;
    this.entryLen = lenField(this.keyLen) + lenField(valueLen);
  }
  private static isInt64(v: number): boolean {
    return Number.isInteger(v) && v < TWO_POW_63 && v >= -TWO_POW_63;
  }
  /** The whole entry with its tag (`field`, length-delimited) and length. */
  size(): number {
    return lenField(this.entryLen);
  }
  write(w: Writer, tag: number): void {
    w.byte(tag);
    w.varint(this.entryLen);
    w.string(0x0a, this.key, this.keyLen);
    w.byte(0x12);
    w.varint(this.valueLen);
    const v = this.value;
    if (typeof v === 'boolean') {
      w.byte((1 << 3) | VARINT);
      w.byte(v ? 1 : 0);
    } else if (typeof v === 'string') {
      w.string((3 << 3) | LEN, v, this.stringLen);
    } else if (typeof v === 'bigint') {
      w.byte(((v > INT64_MAX ? 5 : 2) << 3) | VARINT);
      w.bigVarint(v);
    } else if (Parameter.isInt64(v)) {
      w.byte((2 << 3) | VARINT);
      if (v >= 0) w.varint(v);
      else w.bigVarint(BigInt(v));
    } else {
      w.byte((4 << 3) | I64);
      w.buf.writeDoubleLE(v, w.pos);
      w.pos += 8;
    }
  }
}

function parameters(
  p: Record<string, string | number | boolean | bigint> | undefined,
  shm: SharedMemoryRef | undefined,
): Parameter[] | undefined {
  if (p === undefined && shm === undefined) return undefined;
  const out: Parameter[] = [];
  if (p !== undefined) for (const k in p) out.push(new Parameter(k, p[k]!));
  if (shm !== undefined) {
    out.push(new Parameter('shared_memory_region', shm.region));
    out.push(new Parameter('shared_memory_byte_size', shm.byteSize));
    if (shm.offset) out.push(new Parameter('shared_memory_offset', shm.offset));
  }
  return out;
}

function parametersSize(list: Parameter[] | undefined): number {
  let size = 0;
  if (list !== undefined) for (const p of list) size += p.size();
  return size;
}

const stringSize = (byteLen: number) => (byteLen === 0 ? 0 : lenField(byteLen));

/**
 * The ModelInferRequest for `r` as bytes: inputs' data as raw_input_contents;
 * `streamed` adds triton_enable_empty_final_response, so the end of a stream is known.
 */
export function encodeInferRequest(r: WireRequest, streamed: boolean): Buffer {
  const modelLen = Buffer.byteLength(r.model);
  const versionLen = Buffer.byteLength(r.version);
  const idLen = Buffer.byteLength(r.id);
  const requestParameters = parameters(r.parameters, undefined) ?? [];
  if (streamed) requestParameters.push(new Parameter('triton_enable_empty_final_response', true));
  const inputs = r.inputs;
  // Per input: name bytes, packed shape bytes, parameters, message bytes.
  const inputNames = new Array<number>(inputs.length);
  const inputShapes = new Array<number>(inputs.length);
  const inputParameters = new Array<Parameter[] | undefined>(inputs.length);
  const inputLens = new Array<number>(inputs.length);
  let size = stringSize(modelLen) + stringSize(versionLen) + stringSize(idLen) + parametersSize(requestParameters);
  for (let i = 0; i < inputs.length; i++) {
    const t = inputs[i]!;
    const nameLen = Buffer.byteLength(t.name);
    let shapeLen = 0;
    for (const d of t.shape) shapeLen += varintSize(d);
    const p = parameters(t.parameters, t.sharedMemory);
    const len = stringSize(nameLen) + stringSize(t.datatype.length) + (shapeLen === 0 ? 0 : lenField(shapeLen)) +
      parametersSize(p);
    inputNames[i] = nameLen;
    inputShapes[i] = shapeLen;
    inputParameters[i] = p;
    inputLens[i] = len;
    size += lenField(len);
    if (t.bytes !== undefined) size += lenField(t.bytes.byteLength);
  }
  const outputs = r.outputs ?? [];
  const outputNames = new Array<number>(outputs.length);
  const outputParameters = new Array<Parameter[] | undefined>(outputs.length);
  const outputLens = new Array<number>(outputs.length);
  for (let i = 0; i < outputs.length; i++) {
    const o = outputs[i]!;
    const nameLen = Buffer.byteLength(o.name);
    let p = parameters(o.parameters, o.sharedMemory);
    if (o.classification !== undefined) (p ??= []).push(new Parameter('classification', o.classification));
    const len = stringSize(nameLen) + parametersSize(p);
    outputNames[i] = nameLen;
    outputParameters[i] = p;
    outputLens[i] = len;
    size += lenField(len);
  }

  const w = new Writer(size);
  if (modelLen > 0) w.string(0x0a, r.model, modelLen);
  if (versionLen > 0) w.string(0x12, r.version, versionLen);
  if (idLen > 0) w.string(0x1a, r.id, idLen);
  for (const p of requestParameters) p.write(w, 0x22);
  for (let i = 0; i < inputs.length; i++) {
    const t = inputs[i]!;
    w.byte(0x2a);
    w.varint(inputLens[i]!);
    if (inputNames[i]! > 0) w.string(0x0a, t.name, inputNames[i]!);
    w.string(0x12, t.datatype, t.datatype.length);
    if (inputShapes[i]! > 0) {
      w.byte(0x1a);
      w.varint(inputShapes[i]!);
      for (const d of t.shape) w.varint(d);
    }
    const p = inputParameters[i];
    if (p !== undefined) for (const x of p) x.write(w, 0x22);
  }
  for (let i = 0; i < outputs.length; i++) {
    const o = outputs[i]!;
    w.byte(0x32);
    w.varint(outputLens[i]!);
    if (outputNames[i]! > 0) w.string(0x0a, o.name, outputNames[i]!);
    const p = outputParameters[i];
    if (p !== undefined) for (const x of p) x.write(w, 0x12);
  }
  for (const t of inputs) if (t.bytes !== undefined) w.bytes(0x3a, t.bytes);
  if (w.pos !== size) throw new Error(`ModelInferRequest encoder: wrote ${w.pos} bytes of ${size}`);
  return w.buf;
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

const PARAMETER = 'inference.InferParameter';

/** Thrown inside the reader to leave the fast path; never escapes readInferAnswer. */
const UNSUPPORTED = new (class Unsupported {})();
/** Varints are read as numbers up to 7 bytes (49 bits); longer ones take the generic decoder. */
const MAX_VARINT_BYTES = 7;
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

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

function lengthEnd(limit: number): number {
  const len = varint();
  const end = pos + len;
  if (end > limit) throw UNSUPPORTED;
  return end;
}

function string(limit: number): string {
  const end = lengthEnd(limit);
  const start = pos;
  pos = end;
  if (end - start < 64) {
    let s = '';
    for (let i = start; i < end; i++) {
      const c = buf[i]!;
      if (c >= 0x80) return decodeUtf8(start, end);
      s += String.fromCharCode(c);
    }
    return s;
  }
  return decodeUtf8(start, end);
}

function decodeUtf8(start: number, end: number): string {
  try {
    return utf8.decode(buf.subarray(start, end));
  } catch {
    throw UNSUPPORTED;
  }
}

function parameter(limit: number): InferParameter {
  const end = lengthEnd(limit);
  const p = { $typeName: PARAMETER, parameterChoice: { case: undefined } } as unknown as InferParameter;
  while (pos < end) {
    const tag = varint();
    if (tag === 0x08) p.parameterChoice = { case: 'boolParam', value: varint() !== 0 };
    else if (tag === 0x10) p.parameterChoice = { case: 'int64Param', value: BigInt(varint()) };
    else if (tag === 0x1a) p.parameterChoice = { case: 'stringParam', value: string(end) };
    else if (tag === 0x21) {
      if (pos + 8 > end) throw UNSUPPORTED;
      p.parameterChoice = {
        case: 'doubleParam',
        value: new DataView(buf.buffer, buf.byteOffset + pos, 8).getFloat64(0, true),
      };
      pos += 8;
    } else if (tag === 0x28) p.parameterChoice = { case: 'uint64Param', value: BigInt(varint()) };
    else throw UNSUPPORTED;
  }
  if (pos !== end) throw UNSUPPORTED;
  return p;
}

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
  if (pos !== end || key === '__proto__') throw UNSUPPORTED;
  map[key] = value ?? ({ $typeName: PARAMETER, parameterChoice: { case: undefined } } as unknown as InferParameter);
}

function output(limit: number): InferAnswer['outputs'][number] {
  const end = lengthEnd(limit);
  let name = '';
  let datatype = '';
  const shape: number[] = [];
  const parameters: Record<string, InferParameter> = {};
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
        shape.push(varint());
        break;
      case 0x1a: {
        const packedEnd = lengthEnd(end);
        while (pos < packedEnd) shape.push(varint());
        if (pos !== packedEnd) throw UNSUPPORTED;
        break;
      }
      case 0x22:
        mapEntry(parameters, end);
        break;
      default:
        // typed contents (field 5) and anything unknown
        throw UNSUPPORTED;
    }
  }
  if (pos !== end) throw UNSUPPORTED;
  return { name, datatype, shape, parameters };
}

/**
 * The ModelInferResponse in `bytes` with raw_output_contents as views of them, or undefined where the generic
 * decoder must decide.
 */
export function readInferAnswer(bytes: Uint8Array): InferAnswer | undefined {
  buf = bytes;
  pos = 0;
  const limit = bytes.length;
  let modelName = '';
  let modelVersion = '';
  let id = '';
  const parameters: Record<string, InferParameter> = {};
  const outputs: InferAnswer['outputs'][number][] = [];
  const rawOutputContents: Uint8Array[] = [];
  try {
    while (pos < limit) {
      switch (varint()) {
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
          outputs.push(output(limit));
          break;
        case 0x32: {
          const end = lengthEnd(limit);
          rawOutputContents.push(buf.subarray(pos, end));
          pos = end;
          break;
        }
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
  return { modelName, modelVersion, id, parameters, outputs, rawOutputContents };
}

const EMPTY = new Uint8Array(0);
