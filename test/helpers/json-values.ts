/**
 * Values that JSON tensor text gets wrong easily (NaN, ±Infinity, -0, integral
 * floats, the largest and smallest of each type, INT64/UINT64 beyond 2^53,
 * escapes in BYTES), one list per datatype, and their tensor bytes.
 */
import { datatypeInfo, type Datatype } from '../../src/tensor/datatype.js';
import { bytesOf, encodeBytesElements } from '../../src/tensor/tensor.js';

export type JsonValue = number | bigint | string;

export const HARD_VALUES: Readonly<Record<string, readonly JsonValue[]>> = {
  FP32: [
    0.1,
    -0,
    1,
    -1,
    NaN,
    Infinity,
    -Infinity,
    3.4028234663852886e38,
    1.401298464324817e-45,
    16777216,
    1e20,
    123456.5,
  ],
  FP64: [0.1, -0, 1, 1e21, 1e300, -1e-300, 5e-324, NaN, Infinity, -Infinity, 2 ** 53, 1.5e-7],
  INT8: [-128, 127, 0, -1],
  INT16: [-32768, 32767, 0, 7],
  INT32: [-2147483648, 2147483647, 0, -5],
  INT64: [-(2n ** 63n), 2n ** 63n - 1n, 0n, -1n],
  UINT8: [0, 255, 1, 128],
  UINT16: [0, 65535, 1, 9],
  UINT32: [0, 4294967295, 1, 10],
  UINT64: [0n, 2n ** 64n - 1n, 1n, 2n ** 53n + 1n],
  BOOL: [1, 0, 1, 1],
  BYTES: ['a', 'é"\\', '', 'x'],
  FP16: [0x3c00, 0, 0x7c00, 0xbc00],
};

/** The datatype's hard values rotated by k, so that requests of one batch differ. */
export function rotatedValues(dt: Datatype, k: number): JsonValue[] {
  const v = HARD_VALUES[dt]!;
  return v.map((_, i) => v[(i + k) % v.length]!);
}

/** The tensor bytes of `values` as datatype `dt` (BYTES length-prefixed; FP16 as raw bit patterns). */
export function valuesBytes(dt: Datatype, values: readonly JsonValue[]): Uint8Array {
  if (dt === 'BYTES') return encodeBytesElements(values as string[]);
  const Ctor = datatypeInfo(dt).arrayType!;
  const a = new Ctor(values.length);
  for (let i = 0; i < values.length; i++) (a as unknown as (number | bigint)[])[i] = values[i] as number | bigint;
  return bytesOf(a);
}
