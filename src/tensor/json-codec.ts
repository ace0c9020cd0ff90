/**
 * Tensor data <-> the JSON `data` arrays of the KServe v2 protocol.
 *
 * Decoding writes the elements once into a fresh buffer in the raw
 * little-endian layout of `Tensor.data`. Encoding produces the text of a
 * flat JSON array, formatted the way Triton's JSON writer formats it
 * (integral doubles keep a ".0", NaN/Infinity are written bare).
 *
 * Errors carry Triton's texts and classes: element count and element type
 * problems are INTERNAL (HTTP 500), which clients and QA scripts rely on.
 */
import { Errors, NereidError } from '../errors.js';
import { type Datatype, type TypedArray, datatypeInfo } from './datatype.js';

/** Triton's limit on nested `data` arrays (the `data` array itself is depth 0). */
export const MAX_JSON_NESTING_DEPTH = 100;

const INT64_MAX = 9223372036854775807n;
const TWO_POW_63 = 2 ** 63;
const TWO_POW_64 = 2 ** 64;

const NON_ARRAY = 'attempt to access JSON non-array as array';
const NON_STRING = 'attempt to access JSON non-string as string';
const NON_BOOL = 'attempt to access JSON non-boolean as boolean';
const NON_INT = 'attempt to access JSON non-signed-integer as signed-integer';
const NON_UINT = 'attempt to access JSON non-unsigned-integer as unsigned-integer';
const NON_NUMBER = 'attempt to access JSON non-number as double';
const TOO_MANY = "Shape does not match true shape of 'data' field";
const TOO_FEW = "Failed to parse 'data' field: shape does not match true shape";
const DEPTH = `JSON nesting depth exceeds maximum allowed limit (${MAX_JSON_NESTING_DEPTH})`;

/**
 * Element count of a request shape with Triton's checks: every dim must be a
 * JSON unsigned integer (500 otherwise) and the product must fit in int64 (400).
 */
export function requestElementCount(inputName: string, shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  if (n > Number.MAX_SAFE_INTEGER) {
    let exact = 1n;
    for (const d of shape) exact *= BigInt(d);
    if (exact > INT64_MAX) {
      throw Errors.malformedBody(
        `invalid shape for input '${inputName}': shape [${shape.map((d) => BigInt(d)).join(',')}] ` +
        `causes total element count to exceed maximum size of ${INT64_MAX}`,
      );
    }
  }
  return n;
}

/**
 * Decodes the JSON `data` of one input into raw tensor bytes.
 * `data` is the parsed JSON value; nested arrays are flattened row-major.
 * `datatype` is undefined when the request named an unknown data type.
 */
export function decodeJsonTensorData(
  inputName: string,
  datatype: Datatype | undefined,
  shape: readonly number[],
  data: unknown,
  maxInputSize: number,
): Uint8Array {
  const elementCount = requestElementCount(inputName, shape);
  if (elementCount === 0) return new Uint8Array(0);
  if (!Array.isArray(data)) throw Errors.jsonValue(`Unable to parse 'data': ${NON_ARRAY}`);

  if (datatype === 'BYTES') return decodeJsonBytes(inputName, data, maxInputSize);

  const elementSize = datatype === undefined ? 0 : datatypeInfo(datatype).byteSize;
  if (elementSize > 1 && elementCount > Number(INT64_MAX / BigInt(elementSize))) {
    throw Errors.malformedBody(
      `byte size overflow for input '${inputName}': element count (${elementCount}) ` +
      `* data type size (${elementSize}) exceeds maximum allowed size (${INT64_MAX})`,
    );
  }
  const byteSize = elementCount * elementSize;
  if (byteSize > maxInputSize) throw jsonInputTooLarge(inputName, byteSize, maxInputSize);

  if (datatype === 'FP16' || datatype === 'BF16') {
    throw Errors.malformedBody(
      `receiving ${datatype} data via JSON is not supported. Please use the binary data format for input ${inputName}`,
    );
  }
  if (datatype === undefined) throw Errors.malformedBody(`invalid datatype for input ${inputName}`);

  const out = new Uint8Array(byteSize);
  const target = makeTarget(inputName, datatype, out, elementCount);
  const written = fillElements(target, data, 0, 0);
  if (written !== elementCount) throw Errors.jsonDataShape(TOO_FEW);
  return out;
}

function jsonInputTooLarge(inputName: string, byteSize: number, max: number): NereidError {
  return Errors.bodyTooLarge(
    `JSON input '${inputName}' has a byte_size (${byteSize} bytes) that exceeds the maximum ` +
    `allowed value of ${max} bytes. Use --http-max-input-size to increase the limit.`,
  );
}

/**
 * A JSON number literal too large for a double (1e309, a 400-digit integer).
 * The HTTP parser hands these over instead of an Infinity, so the codec can
 * reject them for the input they belong to rather than store a wrong value.
 */
export class JsonNumberOverflow {
  constructor(readonly literal: string) {}
}

const FLT_MAX = 3.4028234663852886e38;

function overflowError(t: Target, v: unknown): NereidError {
  const text = v instanceof JsonNumberOverflow ? v.literal : String(v);
  const shown = text.length > 40 ? `${text.slice(0, 20)}...(${text.length} characters)` : text;
  return Errors.malformedBody(
    `unable to parse 'data' for input '${t.inputName}': the number ` +
    `${shown} overflows the input's data type ${t.datatype}`,
  );
}

type ElementCheck = (v: unknown) => boolean;

// Integers beyond 2^53 arrive as BigInt (see the HTTP JSON parser), so 64-bit data stays exact.
const INT64_MIN = -9223372036854775808n;
const UINT64_LIMIT = 18446744073709551616n;
const isBool: ElementCheck = (v) => typeof v === 'boolean';
const isInt: ElementCheck = (v) =>
  typeof v === 'number'
    ? Number.isInteger(v) && v >= -TWO_POW_63 && v < TWO_POW_63
    : typeof v === 'bigint' && v >= INT64_MIN && v <= INT64_MAX;
const isUint: ElementCheck = (v) =>
  typeof v === 'number'
    ? Number.isInteger(v) && v >= 0 && v < TWO_POW_64
    : typeof v === 'bigint' && v >= 0n && v < UINT64_LIMIT;
const isNumber: ElementCheck = (v) => typeof v === 'number' || typeof v === 'bigint';

/** Where decoded elements go: a typed array over the output bytes plus its element check. */
interface Target {
  readonly inputName: string;
  readonly datatype: Datatype;
  readonly array: TypedArray;
  readonly check: ElementCheck;
  readonly checkError: string;
  readonly bigint: boolean;
  readonly float: boolean;
  readonly expected: number;
}

function makeTarget(inputName: string, datatype: Datatype, out: Uint8Array, count: number): Target {
  const info = datatypeInfo(datatype);
  const array = new info.arrayType!(out.buffer, out.byteOffset, count);
  const base = { inputName, datatype, array, expected: count };
  switch (datatype) {
    case 'BOOL':
      return { ...base, check: isBool, checkError: NON_BOOL, bigint: false, float: false };
    case 'UINT8':
    case 'UINT16':
    case 'UINT32':
      return { ...base, check: isUint, checkError: NON_UINT, bigint: false, float: false };
    case 'UINT64':
      return { ...base, check: isUint, checkError: NON_UINT, bigint: true, float: false };
    case 'INT8':
    case 'INT16':
    case 'INT32':
      return { ...base, check: isInt, checkError: NON_INT, bigint: false, float: false };
    case 'INT64':
      return { ...base, check: isInt, checkError: NON_INT, bigint: true, float: false };
    default:
      return { ...base, check: isNumber, checkError: NON_NUMBER, bigint: false, float: true };
  }
}

/**
 * A finite literal too large for the float type (FP32 beyond its max, or a long integer beyond a double's). Infinity
 * literals pass.
 */
function overflowsFloat(datatype: Datatype, v: number | bigint): boolean {
  if (typeof v === 'bigint') {
    const x = Number(v);
    return !Number.isFinite(x) || (datatype === 'FP32' && (x > FLT_MAX || x < -FLT_MAX));
  }
  return datatype === 'FP32' && (v > FLT_MAX || v < -FLT_MAX) && Number.isFinite(v);
}

/**
 * Why `v` failed the target's check: an integer or literal beyond the type's range (400), or a wrong kind of value
 * (Triton's 500).
 */
function elementError(t: Target, v: unknown): NereidError {
  if (v instanceof JsonNumberOverflow) return overflowError(t, v);
  if (!t.float && t.datatype !== 'BOOL') {
    const integral = typeof v === 'bigint' || (typeof v === 'number' && Number.isInteger(v));
    const negativeForUnsigned = t.check === isUint && (typeof v === 'bigint' ? v < 0n : (v as number) < 0);
    if (integral && !negativeForUnsigned) return overflowError(t, v);
  }
  return Errors.jsonValue(`Unable to parse 'data': ${t.checkError}`);
}

/** Writes the leaves of `value` from element `index` on; returns the next index. */
function fillElements(t: Target, value: readonly unknown[], index: number, depth: number): number {
  if (depth >= MAX_JSON_NESTING_DEPTH) throw Errors.malformedBody(`Unable to parse 'data': ${DEPTH}`);
  const array = t.array as unknown as { [i: number]: number | bigint | boolean };
  const n = value.length;
  for (let i = 0; i < n; i++) {
    const v = value[i];
    if (Array.isArray(v)) {
      index = fillElements(t, v, index, depth + 1);
      continue;
    }
    if (depth + 1 >= MAX_JSON_NESTING_DEPTH) throw Errors.malformedBody(`Unable to parse 'data': ${DEPTH}`);
    if (index >= t.expected) throw Errors.jsonDataShape(`Unable to parse 'data': ${TOO_MANY}`);
    if (!t.check(v)) throw elementError(t, v);
    if (t.float && overflowsFloat(t.datatype, v as number | bigint)) throw overflowError(t, v);
    if (t.bigint) {
      array[index] = typeof v === 'bigint' ? v : BigInt(v as number);
    } else if (typeof v === 'bigint') {
      // Floats take the nearest value; narrower integers keep the low bits, like a C cast.
      array[index] = t.float ? Number(v) : Number(BigInt.asIntN(32, v));
    } else {
      // Booleans store as 1/0; integer arrays wrap like a C cast.
      array[index] = v as number;
    }
    index++;
  }
  return index;
}

/** Collects the strings of a (nested) BYTES `data` array, with Triton's checks. */
function collectStrings(value: readonly unknown[], out: string[], depth: number): void {
  if (depth >= MAX_JSON_NESTING_DEPTH) throw Errors.malformedBody(DEPTH);
  for (let i = 0; i < value.length; i++) {
    const v = value[i];
    if (Array.isArray(v)) {
      collectStrings(v, out, depth + 1);
    } else {
      if (depth + 1 >= MAX_JSON_NESTING_DEPTH) throw Errors.malformedBody(DEPTH);
      if (typeof v !== 'string') throw Errors.jsonValue(`Unable to parse JSON bytes array: ${NON_STRING}`);
      out.push(v);
    }
  }
}

/**
 * BYTES: the buffer is sized from the strings themselves (4-byte length
 * prefix + UTF-8 bytes each), so a wrong element count is left for the core
 * to report (400), as Triton does.
 */
function decodeJsonBytes(inputName: string, data: readonly unknown[], maxInputSize: number): Uint8Array {
  const strings: string[] = [];
  collectStrings(data, strings, 0);
  let byteSize = 0;
  const lengths = new Array<number>(strings.length);
  for (let i = 0; i < strings.length; i++) {
    const len = Buffer.byteLength(strings[i]!, 'utf8');
    lengths[i] = len;
    byteSize += 4 + len;
  }
  if (byteSize > maxInputSize) throw jsonInputTooLarge(inputName, byteSize, maxInputSize);
  const out = Buffer.allocUnsafeSlow(byteSize);
  let off = 0;
  for (let i = 0; i < strings.length; i++) {
    const len = lengths[i]!;
    out.writeUInt32LE(len, off);
    off += 4;
    if (len > 0) out.write(strings[i]!, off, len, 'utf8');
    off += len;
  }
  return out;
}

// ---------------------------------------------------------------------------
// Encoding

const BOOL_TEXT = ['false', 'true'];

/** Formats a double the way Triton's JSON writer does (1 -> "1.0", 1e+21 -> "1e21"). */
export function formatJsonDouble(v: number): string {
  if (Number.isInteger(v)) {
    if (v === 0) return Object.is(v, -0) ? '-0.0' : '0.0';
    if (v < 1e21 && v > -1e21) return `${v}.0`;
    return String(v).replace('e+', 'e');
  }
  if (v !== v) return 'NaN';
  if (v === Infinity) return 'Infinity';
  if (v === -Infinity) return '-Infinity';
  const s = String(v);
  return s.includes('e+') ? s.replace('e+', 'e') : s;
}

/**
 * From this many elements on, the engine's JSON.stringify over a plain array
 * beats element-by-element formatting (about 2x for 1M elements); below it,
 * the loop (or a typed-array join) is faster.
 */
const BULK_ELEMENTS = 256;
/** An integral token in JSON.stringify output: "[12" or ",-3" followed by "," or "]". */
const INTEGRAL_TOKEN = /([[,]-?\d+)(?=[,\]])/g;

function formatDoublesBulk(a: Float32Array | Float64Array, count: number): string | undefined {
  const view = a.length === count ? a : a.subarray(0, count);
  let integral = false;
  for (let i = 0; i < count; i++) {
    const v = view[i]!;
    // NaN/Infinity (stringify would write null) and -0 (written as 0) take the exact path.
    if (v - v !== 0 || (v === 0 && 1 / v < 0)) return undefined;
    if (v === Math.floor(v)) integral = true;
  }
  const s = JSON.stringify(Array.from(view));
  // Only integral values need the ".0" (and only those of 1e21 or more print an "e+"): most outputs have none,
  // and skipping the two text passes then saves a good part of the encoding.
  if (!integral) return s;
  const r = s.replace(INTEGRAL_TOKEN, '$1.0');
  return r.includes('e+') ? r.replaceAll('e+', 'e') : r;
}

function formatDoubles(a: Float32Array | Float64Array, count: number): string {
  if (count === 0) return '[]';
  if (count >= BULK_ELEMENTS) {
    const bulk = formatDoublesBulk(a, count);
    if (bulk !== undefined) return bulk;
  }
  let s = '[' + formatJsonDouble(a[0]!);
  for (let i = 1; i < count; i++) s += ',' + formatJsonDouble(a[i]!);
  return s + ']';
}

function shapeMismatch(name: string): NereidError {
  return Errors.internal(
    `Failed to write 'data' field: output tensor shape does not match size of output for '${name}'`,
  );
}

/** A typed view over `data` (copied only when misaligned). */
function viewOf(datatype: Datatype, data: Uint8Array, count: number): TypedArray {
  const info = datatypeInfo(datatype);
  const Ctor = info.arrayType!;
  if (data.byteOffset % info.byteSize === 0) return new Ctor(data.buffer, data.byteOffset, count);
  const copy = new Uint8Array(count * info.byteSize);
  copy.set(data.subarray(0, copy.byteLength));
  return new Ctor(copy.buffer, 0, count);
}

/**
 * The JSON text of a flat `data` array for an output tensor.
 * `elementCount` is the product of the output shape.
 */
export function encodeJsonTensorData(
  name: string,
  datatype: Datatype,
  data: Uint8Array,
  elementCount: number,
): string {
  switch (datatype) {
    case 'FP16':
    case 'BF16':
      throw Errors.malformedBody(
        `sending ${datatype} data via JSON is not supported. Please use the binary data format for output`,
      );
    case 'BYTES':
      return encodeJsonBytes(name, data, elementCount);
    case 'BOOL': {
      if (data.byteLength !== elementCount) throw shapeMismatch(name);
      if (elementCount === 0) return '[]';
      let s = '[' + BOOL_TEXT[data[0] === 0 ? 0 : 1]!;
      for (let i = 1; i < elementCount; i++) s += data[i] === 0 ? ',false' : ',true';
      return s + ']';
    }
    default: {
      const size = datatypeInfo(datatype).byteSize;
      if (data.byteLength !== elementCount * size) throw shapeMismatch(name);
      const view = viewOf(datatype, data, elementCount);
      if (datatype === 'FP32' || datatype === 'FP64') return formatDoubles(view as Float32Array, elementCount);
      // Integer types print exactly; BigInt arrays can only be joined.
      if (elementCount >= BULK_ELEMENTS && datatype !== 'INT64' && datatype !== 'UINT64') {
        return JSON.stringify(Array.from(view as Int32Array));
      }
      return '[' + view.join(',') + ']';
    }
  }
}

function encodeJsonBytes(name: string, data: Uint8Array, elementCount: number): string {
  const buf = Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const parts = new Array<string>(elementCount);
  let off = 0;
  for (let i = 0; i < elementCount; i++) {
    if (off + 4 > buf.byteLength)
      throw Errors.internal(`output tensor shape does not match size of output for '${name}'`);
    const len = buf.readUInt32LE(off);
    off += 4;
    if (off + len > buf.byteLength)
      throw Errors.internal(`output tensor shape does not match size of output for '${name}'`);
    parts[i] = JSON.stringify(buf.toString('utf8', off, off + len));
    off += len;
  }
  return '[' + parts.join(',') + ']';
}
