import { test } from 'node:test';
import assert from 'node:assert/strict';
import { NereidError } from '../../src/errors.js';
import type { Datatype } from '../../src/tensor/datatype.js';
import { decodeBytesElements } from '../../src/tensor/tensor.js';
import {
  decodeJsonTensorData,
  encodeJsonTensorData,
  formatJsonDouble,
  requestElementCount,
} from '../../src/tensor/json-codec.js';

const MAX = 64 * 1024 * 1024;

function decode(datatype: Datatype | undefined, shape: number[], data: unknown, max = MAX): Uint8Array {
  return decodeJsonTensorData('INPUT0', datatype, shape, data, max);
}

function rejects(fn: () => unknown, status: number, message: string, code?: string): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof NereidError, `expected NereidError, got ${String(err)}`);
    assert.equal(err.message, message);
    assert.equal(err.httpStatus, status);
    if (code !== undefined) assert.equal(err.code, code);
    return true;
  });
}

test('decodes every fixed-size datatype into little-endian bytes', () => {
  const cases: Array<[Datatype, unknown[], ArrayBufferView]> = [
    ['BOOL', [true, false, true], new Uint8Array([1, 0, 1])],
    ['UINT8', [0, 255, 7], new Uint8Array([0, 255, 7])],
    ['UINT16', [0, 65535, 300], new Uint16Array([0, 65535, 300])],
    ['UINT32', [0, 4294967295, 70000], new Uint32Array([0, 4294967295, 70000])],
    ['UINT64', [0, 2 ** 40, 5], new BigUint64Array([0n, 2n ** 40n, 5n])],
    ['INT8', [-128, 127, 0], new Int8Array([-128, 127, 0])],
    ['INT16', [-32768, 32767, 1], new Int16Array([-32768, 32767, 1])],
    ['INT32', [-2147483648, 2147483647, 3], new Int32Array([-2147483648, 2147483647, 3])],
    ['INT64', [-(2 ** 40), 2 ** 40, -1], new BigInt64Array([-(2n ** 40n), 2n ** 40n, -1n])],
    ['FP32', [1.5, -2, 0.1], new Float32Array([1.5, -2, 0.1])],
    ['FP64', [1.5, -2, 0.1], new Float64Array([1.5, -2, 0.1])],
  ];
  for (const [dt, values, expected] of cases) {
    const got = decode(dt, [values.length], values);
    assert.deepEqual(
      Buffer.from(got),
      Buffer.from(expected.buffer, expected.byteOffset, expected.byteLength),
      `datatype ${dt}`,
    );
  }
});

test('integers wrap to the datatype width like a C cast', () => {
  assert.deepEqual([...new Int8Array(decode('INT8', [1], [200]).buffer)], [-56]);
  assert.deepEqual([...new Uint8Array(decode('UINT8', [1], [256 + 9]))], [9]);
});

test('nested data arrays are flattened row-major', () => {
  const got = decode('INT32', [2, 3], [[1, 2, 3], [4, [5, 6]]]);
  assert.deepEqual([...new Int32Array(got.buffer, got.byteOffset, 6)], [1, 2, 3, 4, 5, 6]);
});

test('too few elements gives Triton\'s 500 text', () => {
  rejects(
    () => decode('INT32', [1, 16], [1, 2, 3]),
    500,
    "Failed to parse 'data' field: shape does not match true shape",
    'NRD_JSON_DATA_SHAPE',
  );
});

test('too many elements gives Triton\'s other 500 text', () => {
  rejects(
    () => decode('INT32', [1, 2], [1, 2, 3]),
    500,
    "Unable to parse 'data': Shape does not match true shape of 'data' field",
    'NRD_JSON_DATA_SHAPE',
  );
});

test('an element of the wrong JSON type is a 500', () => {
  rejects(
    () => decode('INT32', [2], [1, 1.5]),
    500,
    "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
  );
  rejects(
    () => decode('INT32', [2], [1, 'x']),
    500,
    "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
  );
  rejects(
    () => decode('UINT8', [1], [-1]),
    500,
    "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer",
  );
  rejects(() => decode('BOOL', [1], [1]), 500, "Unable to parse 'data': attempt to access JSON non-boolean as boolean");
  rejects(() => decode('FP32', [1], ['1']), 500, "Unable to parse 'data': attempt to access JSON non-number as double");
  rejects(
    () => decode('BYTES', [1], [1]),
    500,
    'Unable to parse JSON bytes array: attempt to access JSON non-string as string',
  );
});

test('data that is not an array is a 500', () => {
  rejects(() => decode('INT32', [1], 5), 500, "Unable to parse 'data': attempt to access JSON non-array as array");
  rejects(
    () => decode('INT32', [1], undefined),
    500,
    "Unable to parse 'data': attempt to access JSON non-array as array",
  );
});

test('a zero-element shape needs no data', () => {
  assert.equal(decode('INT32', [0, 4], undefined).byteLength, 0);
  assert.equal(decode('FP16', [0], undefined).byteLength, 0);
});

test('FP16 and BF16 cannot be sent as JSON (400)', () => {
  rejects(
    () => decode('FP16', [1], [1]),
    400,
    'receiving FP16 data via JSON is not supported. Please use the binary data format for input INPUT0',
  );
  rejects(
    () => decode('BF16', [1], [1]),
    400,
    'receiving BF16 data via JSON is not supported. Please use the binary data format for input INPUT0',
  );
});

test('an unknown datatype is a 400', () => {
  rejects(() => decode(undefined, [1], [1]), 400, 'invalid datatype for input INPUT0');
});

test('BYTES elements get a 4-byte little-endian length prefix', () => {
  const got = decode('BYTES', [3], ['ab', '', 'héllo']);
  const expected = Buffer.concat([
    Buffer.from([2, 0, 0, 0]),
    Buffer.from('ab'),
    Buffer.from([0, 0, 0, 0]),
    Buffer.from([6, 0, 0, 0]),
    Buffer.from('héllo', 'utf8'),
  ]);
  assert.deepEqual(Buffer.from(got), expected);
  assert.deepEqual(
    decodeBytesElements(got).map((e) => Buffer.from(e).toString()),
    ['ab', '', 'héllo'],
  );
});

test('BYTES count mismatch is left to the core (buffer sized from the strings)', () => {
  const got = decode('BYTES', [3], ['a']);
  assert.equal(decodeBytesElements(got).length, 1);
});

test('nesting deeper than 100 levels is refused; 99 is accepted', () => {
  let deep: unknown = 7;
  for (let i = 0; i < 99; i++) deep = [deep];
  assert.equal(decode('INT64', [1, 1], deep).byteLength, 8);
  let tooDeep: unknown = 7;
  for (let i = 0; i < 120; i++) tooDeep = [tooDeep];
  rejects(
    () => decode('INT64', [1, 1], tooDeep),
    400,
    "Unable to parse 'data': JSON nesting depth exceeds maximum allowed limit (100)",
  );
  let deepString: unknown = 'x';
  for (let i = 0; i < 120; i++) deepString = [deepString];
  rejects(() => decode('BYTES', [1, 1], deepString), 400, 'JSON nesting depth exceeds maximum allowed limit (100)');
});

test('a JSON tensor larger than the input limit is a 400', () => {
  rejects(
    () => decode('FP32', [100], [], 64),
    400,
    "JSON input 'INPUT0' has a byte_size (400 bytes) that exceeds the maximum " +
    "allowed value of 64 bytes. Use --http-max-input-size to increase the limit.",
  );
});

test('shape overflow errors use Triton\'s texts', () => {
  rejects(
    () => requestElementCount('INPUT0', [2 ** 4, 2 ** 62]),
    400,
    "invalid shape for input 'INPUT0': shape [16,4611686018427387904] causes " +
    "total element count to exceed maximum size of 9223372036854775807",
  );
  assert.throws(() => decode('FP32', [2 ** 2, 2 ** 60], [1]), /byte size overflow for input 'INPUT0'/);
});

function bytesOf(a: ArrayBufferView): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

test('encodes every datatype as a flat JSON array', () => {
  assert.equal(encodeJsonTensorData('o', 'BOOL', new Uint8Array([1, 0, 2]), 3), '[true,false,true]');
  assert.equal(encodeJsonTensorData('o', 'UINT8', new Uint8Array([0, 255]), 2), '[0,255]');
  assert.equal(encodeJsonTensorData('o', 'UINT16', bytesOf(new Uint16Array([65535])), 1), '[65535]');
  assert.equal(encodeJsonTensorData('o', 'UINT32', bytesOf(new Uint32Array([4294967295])), 1), '[4294967295]');
  assert.equal(
    encodeJsonTensorData('o', 'UINT64', bytesOf(new BigUint64Array([18446744073709551615n])), 1),
    '[18446744073709551615]',
  );
  assert.equal(encodeJsonTensorData('o', 'INT8', bytesOf(new Int8Array([-128, 5])), 2), '[-128,5]');
  assert.equal(encodeJsonTensorData('o', 'INT16', bytesOf(new Int16Array([-2])), 1), '[-2]');
  assert.equal(encodeJsonTensorData('o', 'INT32', bytesOf(new Int32Array([1, -2, 3])), 3), '[1,-2,3]');
  assert.equal(
    encodeJsonTensorData('o', 'INT64', bytesOf(new BigInt64Array([-9223372036854775808n])), 1),
    '[-9223372036854775808]',
  );
  assert.equal(encodeJsonTensorData('o', 'FP32', bytesOf(new Float32Array([1, 0.5, -3])), 3), '[1.0,0.5,-3.0]');
  assert.equal(
    encodeJsonTensorData('o', 'FP64', bytesOf(new Float64Array([0.1, 1e21, NaN, -Infinity])), 4),
    '[0.1,1e21,NaN,-Infinity]',
  );
  assert.equal(encodeJsonTensorData('o', 'INT32', new Uint8Array(0), 0), '[]');
});

test('encodes from unaligned views', () => {
  const backing = new Uint8Array(9);
  backing.set(bytesOf(new Int32Array([7, -7])), 1);
  assert.equal(encodeJsonTensorData('o', 'INT32', backing.subarray(1), 2), '[7,-7]');
});

test('BYTES outputs become JSON strings with escapes', () => {
  const data = Buffer.concat([Buffer.from([3, 0, 0, 0]), Buffer.from('a"b'), Buffer.from([0, 0, 0, 0])]);
  assert.equal(encodeJsonTensorData('o', 'BYTES', data, 2), '["a\\"b",""]');
  assert.throws(
    () => encodeJsonTensorData('o', 'BYTES', Buffer.from([9, 0, 0, 0, 1]), 1),
    /output tensor shape does not match size of output for 'o'/,
  );
});

test('FP16/BF16 outputs cannot be JSON; size mismatches are 500', () => {
  rejects(
    () => encodeJsonTensorData('o', 'FP16', new Uint8Array(2), 1),
    400,
    'sending FP16 data via JSON is not supported. Please use the binary data format for output',
  );
  rejects(
    () => encodeJsonTensorData('o', 'INT32', new Uint8Array(3), 1),
    500,
    "Failed to write 'data' field: output tensor shape does not match size of output for 'o'",
  );
});

test('doubles print as Triton prints them', () => {
  assert.equal(formatJsonDouble(2), '2.0');
  assert.equal(formatJsonDouble(-0), '-0.0');
  assert.equal(formatJsonDouble(1e21), '1e21');
  assert.equal(formatJsonDouble(1.5e300), '1.5e300');
  assert.equal(formatJsonDouble(1e-7), '1e-7');
  assert.equal(formatJsonDouble(Math.fround(0.1)), '0.10000000149011612');
  assert.equal(formatJsonDouble(Infinity), 'Infinity');
});

test('large arrays (bulk path) print exactly like element-by-element formatting', () => {
  const n = 1000;
  const f64 = new Float64Array(n);
  for (let i = 0; i < n; i++)
    f64[i] = i % 5 === 0 ? i : i % 5 === 1 ? -i / 7 : i % 5 === 2 ? 1e22 * i : i % 5 === 3 ? 1e-9 * i : -i;
  const expected = '[' + Array.from(f64, formatJsonDouble).join(',') + ']';
  assert.equal(encodeJsonTensorData('o', 'FP64', bytesOf(f64), n), expected);
  const f32 = Float32Array.from(f64);
  assert.equal(
    encodeJsonTensorData('o', 'FP32', bytesOf(f32), n),
    '[' + Array.from(f32, formatJsonDouble).join(',') + ']',
  );
  f64[10] = NaN;
  f64[11] = -0;
  assert.equal(
    encodeJsonTensorData('o', 'FP64', bytesOf(f64), n),
    '[' + Array.from(f64, formatJsonDouble).join(',') + ']',
  );
  const i32 = Int32Array.from({ length: n }, (_, i) => (i - 500) * 1000);
  assert.equal(encodeJsonTensorData('o', 'INT32', bytesOf(i32), n), '[' + i32.join(',') + ']');
  const i64 = BigInt64Array.from({ length: n }, (_, i) => BigInt(i) * 10000000000n);
  assert.equal(encodeJsonTensorData('o', 'INT64', bytesOf(i64), n), '[' + i64.join(',') + ']');
});

test('FP32/FP64 JSON text equals the element-by-element formatting ' +
  'on many values (NaN, Inf, -0, denormals, large integers)', () => {
  // The reference: every element through formatJsonDouble, Triton's number formatting.
  const reference = (a: Float32Array | Float64Array) => '[' + Array.from(a, formatJsonDouble).join(',') + ']';
  const special = [
    0,
    -0,
    1,
    -1,
    0.5,
    0.1,
    1e21,
    -1e21,
    1e20,
    123456789012345680000,
    2 ** 53,
    2 ** 53 + 2,
    2 ** 63,
    2 ** 64,
    -(2 ** 63),
    Number.MAX_VALUE,
    -Number.MAX_VALUE,
    Number.MIN_VALUE,
    5e-324,
    2.2250738585072014e-308,
    1e-7,
    1.5e-10,
    3.4028234663852886e38,
    1.401298464324817e-45,
    1.1754943508222875e-38,
    // eslint-disable-next-line no-loss-of-precision -- the literal rounds as the JSON text does (what is tested)
    12345678901234567891,
    NaN,
    Infinity,
    -Infinity,
  ];
  let seed = 7;
  const rand = () => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed / 2147483648;
  };
  const cases: number[][] = [];
  for (let k = 0; k < 200; k++) {
    const n = [1, 255, 256, 257, 768, 1000][k % 6]!;
    const values: number[] = [];
    for (let i = 0; i < n; i++) {
      const r = rand();
      if (k % 5 === 0 && r < 0.05) values.push(special[Math.floor(rand() * special.length)]!);
      else if (k % 3 === 0) values.push(Math.round((rand() - 0.5) * 1e6));
      else values.push((rand() - 0.5) * 10 ** Math.floor(rand() * 60 - 30));
    }
    cases.push(values);
  }
  cases.push(
    special.filter((v) => Number.isFinite(v) && !Object.is(v, -0)),
    Array(300).fill(-0),
    Array(300).fill(NaN),
    Array(300).fill(1e-310),
  );
  for (const values of cases) {
    for (const [datatype, Ctor] of [['FP32', Float32Array], ['FP64', Float64Array]] as const) {
      const a = new Ctor(values);
      const text = encodeJsonTensorData('o', datatype, new Uint8Array(a.buffer), a.length);
      assert.equal(text, reference(a), `${datatype} ${a.length} values`);
    }
  }
});
