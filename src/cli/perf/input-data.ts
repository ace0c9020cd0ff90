/**
 * Input tensors for the load: generated (zero or random, strings from
 * --string-length/--string-data) or read from perf_analyzer's JSON input-data
 * format. Data is held per "step" (one batch-1 element of every input) and
 * assembled into batches once, before the load starts.
 */
import { readFileSync } from 'node:fs';
import { type Datatype, datatypeInfo, elementCount, shapeToString } from '../../tensor/datatype.js';
import { encodeBytesElements } from '../../tensor/tensor.js';
import type { ModelInfo, ModelTensorInfo } from './model.js';
import { PerfError } from './errors.js';

/** One input of one step: batch-1 data and its shape (no batch dim). */
export interface StepTensor {
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}

/** One step: input name -> tensor. Optional inputs may be absent. */
export type Step = ReadonlyMap<string, StepTensor>;

/** A request-ready tensor (shape includes the batch dim when the model batches). */
export interface RequestTensor {
  readonly name: string;
  readonly datatype: Datatype;
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}

export interface GenerateOptions {
  readonly zero: boolean;
  readonly stringLength: number;
  readonly stringData: string | undefined;
  /** Injectable for tests; returns a float in [0, 1). */
  readonly random?: () => number;
}

const CHARSET = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';

function fullyDefined(input: ModelTensorInfo): void {
  if (input.shape.some((d) => d < 0)) {
    throw new PerfError(
      'failed to create input data',
      `input ${input.name} contains dynamic shape, provide shapes to send along with the request ` +
        `(--shape ${input.name}:${input.shape.map((d) => (d < 0 ? 'N' : String(d))).join(',')})`,
    );
  }
}

/** IEEE-754 binary16 bits for a number (round to nearest even). */
export function toFloat16Bits(value: number): number {
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = ((x >>> 23) & 0xff) - 127 + 15;
  let mant = x & 0x7fffff;
  if (((x >>> 23) & 0xff) === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  if (exp >= 0x1f) return sign | 0x7c00;
  if (exp <= 0) {
    if (exp < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - exp;
    let half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rem > mid || (rem === mid && half & 1)) half++;
    return sign | half;
  }
  let half = sign | (exp << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && half & 1)) half++;
  return half;
}

/** bfloat16 bits for a number (round to nearest even). */
export function toBFloat16Bits(value: number): number {
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  f32[0] = value;
  const x = u32[0]!;
  const rounding = 0x7fff + ((x >>> 16) & 1);
  return ((x + rounding) >>> 16) & 0xffff;
}

/** Random (or zero) little-endian bytes for `count` elements of a fixed-size type. */
export function generateFixed(datatype: Datatype, count: number, zero: boolean, random: () => number): Uint8Array {
  const size = datatypeInfo(datatype).byteSize;
  const out = new Uint8Array(size * count);
  if (zero) return out;
  const view = new DataView(out.buffer);
  for (let i = 0; i < count; i++) {
    const r = random();
    const off = i * size;
    switch (datatype) {
      case 'BOOL':
        out[off] = r < 0.5 ? 0 : 1;
        break;
      case 'FP16':
        view.setUint16(off, toFloat16Bits(r), true);
        break;
      case 'BF16':
        view.setUint16(off, toBFloat16Bits(r), true);
        break;
      case 'FP32':
        view.setFloat32(off, r, true);
        break;
      case 'FP64':
        view.setFloat64(off, r, true);
        break;
      default:
        // Integer types: uniformly random bytes cover the whole range.
        for (let b = 0; b < size; b++) out[off + b] = Math.floor(random() * 256);
    }
  }
  return out;
}

function randomString(length: number, random: () => number): string {
  let s = '';
  for (let i = 0; i < length; i++) s += CHARSET[Math.floor(random() * CHARSET.length)];
  return s;
}

/** One generated step for every input of the model (perf_analyzer generates data once and reuses it). */
export function generateStep(model: ModelInfo, opts: GenerateOptions): Step {
  const random = opts.random ?? Math.random;
  const step = new Map<string, StepTensor>();
  for (const input of model.inputs) {
    if (input.isShapeTensor) {
      throw new PerfError(
        'failed to create input data',
        `can not generate data for shape tensor '${input.name}', user-provided data is needed.`,
      );
    }
    fullyDefined(input);
    const count = elementCount(input.shape);
    let data: Uint8Array;
    if (input.datatype === 'BYTES') {
      const elements: string[] = [];
      // As in perf_analyzer, --input-data zero does not apply to strings.
      for (let i = 0; i < count; i++) elements.push(opts.stringData ?? randomString(opts.stringLength, random));
      data = encodeBytesElements(elements);
    } else {
      data = generateFixed(input.datatype, count, opts.zero, random);
    }
    step.set(input.name, { shape: input.shape, data });
  }
  return step;
}

function flatten(v: unknown, out: unknown[], depth = 0): void {
  if (depth > 100) throw new Error('nested too deeply');
  if (Array.isArray(v)) for (const e of v) flatten(e, out, depth + 1);
  else out.push(v);
}

const INT_RANGE: Partial<Record<Datatype, [bigint, bigint]>> = {
  UINT8: [0n, 255n],
  UINT16: [0n, 65535n],
  UINT32: [0n, 4294967295n],
  UINT64: [0n, 18446744073709551615n],
  INT8: [-128n, 127n],
  INT16: [-32768n, 32767n],
  INT32: [-2147483648n, 2147483647n],
  INT64: [-9223372036854775808n, 9223372036854775807n],
};

/** Serialises an explicit JSON value list into raw tensor bytes (perf_analyzer's SerializeExplicitTensor rules). */
export function serializeExplicit(values: readonly unknown[], datatype: Datatype, where: string): Uint8Array {
  if (datatype === 'BYTES') {
    const elements: string[] = [];
    for (const v of values) {
      if (typeof v !== 'string')
        throw new PerfError('failed to read input data', `unable to find string data in json ${where}`);
      elements.push(v);
    }
    return encodeBytesElements(elements);
  }
  if (datatype === 'FP16' || datatype === 'BF16') {
    throw new PerfError(
      'failed to read input data',
      `Can not use explicit tensor description for ${datatype.toLowerCase()} ` +
      `datatype ${where}; give the data as {"b64": ...}`,
    );
  }
  const size = datatypeInfo(datatype).byteSize;
  const out = new Uint8Array(values.length * size);
  const view = new DataView(out.buffer);
  values.forEach((v, i) => {
    const off = i * size;
    if (datatype === 'BOOL') {
      if (typeof v !== 'boolean')
        throw new PerfError('failed to read input data', `unable to find bool data in json ${where}`);
      out[off] = v ? 1 : 0;
      return;
    }
    if (datatype === 'FP32' || datatype === 'FP64') {
      if (typeof v !== 'number') {
        throw new PerfError(
          'failed to read input data',
          `unable to find ${datatype === 'FP32' ? 'float' : 'fp64'} data in json ${where}`,
        );
      }
      if (datatype === 'FP32') view.setFloat32(off, v, true);
      else view.setFloat64(off, v, true);
      return;
    }
    const range = INT_RANGE[datatype]!;
    if (typeof v !== 'number' || !Number.isInteger(v) || BigInt(v) < range[0] || BigInt(v) > range[1]) {
      throw new PerfError(
        'failed to read input data',
        `unable to find ${datatype.toLowerCase()} data in json ` +
        `${where}: ${JSON.stringify(v)} is not a ${datatype} value`,
      );
    }
    switch (datatype) {
      case 'UINT8':
        view.setUint8(off, v);
        break;
      case 'INT8':
        view.setInt8(off, v);
        break;
      case 'UINT16':
        view.setUint16(off, v, true);
        break;
      case 'INT16':
        view.setInt16(off, v, true);
        break;
      case 'UINT32':
        view.setUint32(off, v, true);
        break;
      case 'INT32':
        view.setInt32(off, v, true);
        break;
      case 'UINT64':
        view.setBigUint64(off, BigInt(v), true);
        break;
      case 'INT64':
        view.setBigInt64(off, BigInt(v), true);
        break;
      default:
        throw new PerfError('failed to read input data', `Unexpected type ${datatype}`);
    }
  });
  return out;
}

function bytesElementCount(data: Uint8Array): number | undefined {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let off = 0;
  let n = 0;
  while (off < data.byteLength) {
    if (off + 4 > data.byteLength) return undefined;
    off += 4 + view.getUint32(off, true);
    n++;
  }
  return off === data.byteLength ? n : undefined;
}

function readTensor(value: unknown, input: ModelTensorInfo, where: string): StepTensor {
  let content: unknown = value;
  let shape: number[] | undefined;
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    const obj = value as Record<string, unknown>;
    if (obj['shape'] !== undefined) {
      if (!Array.isArray(obj['shape']) || !obj['shape'].every((d) => Number.isInteger(d))) {
        throw new PerfError('failed to read input data', `shape values must be integers. ${where}`);
      }
      shape = obj['shape'] as number[];
    }
    if ('b64' in obj) content = obj;
    else if ('content' in obj) content = obj['content'];
    else throw new PerfError('failed to read input data', `missing content field. ${where}`);
  } else if (!Array.isArray(value)) {
    throw new PerfError(
      'failed to read input data',
      `Input data file is malformed: '${input.name}' must be an array or an object ${where}`,
    );
  }

  let data: Uint8Array;
  if (Array.isArray(content)) {
    const flat: unknown[] = [];
    flatten(content, flat);
    data = serializeExplicit(flat, input.datatype, where);
  } else if (content !== null && typeof content === 'object' && 'b64' in content) {
    const b64 = (content as Record<string, unknown>)['b64'];
    if (typeof b64 !== 'string') {
      throw new PerfError('failed to read input data', `the value of b64 field should be of type string ${where}`);
    }
    data = Buffer.from(b64, 'base64');
  } else {
    throw new PerfError(
      'failed to read input data',
      `The tensor values are not supported. Expected an array or b64 string ${where}`,
    );
  }

  const effective = shape ?? [...input.shape];
  if (effective.some((d) => d < 0)) {
    throw new PerfError(
      'failed to read input data',
      `The variable-sized tensor "${input.name}" with model shape ${shapeToString(input.declaredShape)} ` +
      `needs to have its shape fully defined. See the --shape option.`,
    );
  }
  const declared = input.declaredShape;
  if (effective.length !== declared.length || effective.some((d, i) => declared[i] !== -1 && declared[i] !== d)) {
    throw new PerfError(
      'failed to read input data',
      `The supplied shape of ${shapeToString(effective)} for input "${input.name}" ` +
      `is incompatible with the model's input shape of ${shapeToString(declared)}`,
    );
  }
  const count = elementCount(effective);
  if (input.datatype === 'BYTES') {
    const n = bytesElementCount(data);
    if (n === undefined) {
      throw new PerfError(
        'failed to read input data',
        `malformed BYTES data for ${input.name} ${where}: bad length prefix`,
      );
    }
    if (n !== count) {
      throw new PerfError(
        'failed to read input data',
        `mismatch in the data provided for ${input.name}. Expected: ${count} elements, Got: ${n} elements ${where}`,
      );
    }
  } else {
    const expected = count * datatypeInfo(input.datatype).byteSize;
    if (data.byteLength !== expected) {
      throw new PerfError(
        'failed to read input data',
        `mismatch in the data provided for ${input.name}. Expected: ` +
        `${expected} bytes, Got: ${data.byteLength} bytes ${where}`,
      );
    }
  }
  return { shape: effective, data };
}

function readStep(raw: unknown, model: ModelInfo, stream: number, step: number): Step {
  const where = `( Location stream id: ${stream}, step id: ${step})`;
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new PerfError(
      'failed to read input data',
      `Input data file is malformed: each step must be an object ${where}`,
    );
  }
  const obj = raw as Record<string, unknown>;
  const out = new Map<string, StepTensor>();
  for (const input of model.inputs) {
    if (input.name in obj) out.set(input.name, readTensor(obj[input.name], input, where));
    else if (!input.optional) throw new PerfError('failed to read input data', `missing tensor ${input.name} ${where}`);
  }
  const known = new Set([...model.inputs.map((i) => i.name), ...model.outputs.map((o) => o.name), 'model']);
  for (const key of Object.keys(obj)) {
    if (!known.has(key)) {
      throw new PerfError(
        'failed to read input data',
        `The input or output '${key}' is not found in the model configuration`,
      );
    }
  }
  return out;
}

/**
 * Parses perf_analyzer's input-data JSON ({"data": [step, ...]} or
 * {"data": [[step, ...], ...]} for streams). Streams are played one after
 * the other. `validation_data` is accepted and not checked.
 */
export function parseInputDataJson(text: string, model: ModelInfo, source = 'input data'): Step[] {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new PerfError(
      'failed to read input data',
      `failed to parse the specified json file for reading provided data (${source}): ${(err as Error).message}`,
    );
  }
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc) || !('data' in doc)) {
    throw new PerfError('failed to read input data', `The json file doesn't contain data field (${source})`);
  }
  const streams = (doc as Record<string, unknown>)['data'];
  if (!Array.isArray(streams)) throw new PerfError('failed to read input data', `'data' must be an array (${source})`);
  if (streams.length === 0) throw new PerfError('failed to read input data', `'data' is empty (${source})`);
  const multiStream = Array.isArray(streams[0]);
  const steps: Step[] = [];
  streams.forEach((s, si) => {
    if (Array.isArray(s) !== multiStream) {
      throw new PerfError(
        'failed to read input data',
        'Inconsistency in input-data provided. Can not have a ' +
        'combination of objects and arrays inside of the Data array',
      );
    }
    if (multiStream) (s as unknown[]).forEach((st, k) => steps.push(readStep(st, model, si, k)));
    else steps.push(readStep(s, model, 0, si));
  });
  return steps;
}

export function readInputDataFiles(paths: readonly string[], model: ModelInfo): Step[] {
  const steps: Step[] = [];
  for (const p of paths) {
    let text: string;
    try {
      text = readFileSync(p, 'utf8');
    } catch (err) {
      throw new PerfError(
        'failed to read input data',
        `failed to open file '${p}' for reading provided data: ${(err as Error).message}`,
      );
    }
    steps.push(...parseInputDataJson(text, model, p));
  }
  return steps;
}

/**
 * The tensors of one request: batch `batchSize` made of steps
 * first, first+1, ... (wrapping), as perf_analyzer batches user data.
 */
export function assembleRequest(
  model: ModelInfo,
  steps: readonly Step[],
  first: number,
  batchSize: number,
): RequestTensor[] {
  const out: RequestTensor[] = [];
  for (const input of model.inputs) {
    const head = steps[first % steps.length]!.get(input.name);
    if (!head) continue; // optional input left out of this step
    const count = input.isShapeTensor ? 1 : batchSize;
    const parts: Uint8Array[] = [];
    for (let k = 0; k < count; k++) {
      const t = steps[(first + k) % steps.length]!.get(input.name);
      if (!t)
        throw new PerfError(
          'failed to create input data',
          `input '${input.name}' is missing from some steps of a batch`,
        );
      if (t.shape.length !== head.shape.length || t.shape.some((d, i) => d !== head.shape[i])) {
        throw new PerfError(
          'failed to create input data',
          `can not batch tensors with different shapes together (input '${input.name}' ` +
          `expected shape ${shapeToString(head.shape)} and received ${shapeToString(t.shape)}`,
        );
      }
      parts.push(t.data);
    }
    const data = parts.length === 1 ? parts[0]! : Buffer.concat(parts);
    const shape = model.maxBatchSize > 0 && !input.isShapeTensor ? [batchSize, ...head.shape] : [...head.shape];
    out.push({ name: input.name, datatype: input.datatype, shape, data });
  }
  return out;
}
