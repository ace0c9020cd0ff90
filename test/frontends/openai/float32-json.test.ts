/**
 * The float32 JSON writer of /v1/embeddings: every value is written as exactly the text of an
 * independent reference, the fewest significant digits (toPrecision(1..9)) that a double parse
 * followed by Math.fround reads back as the same float32, in /v2's JSON number form.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { JsonBytes } from '../../../src/tensor/float32-json.js';

const values = new Float32Array(1);
const words = new Int32Array(values.buffer);

/** The writer's text for one float32 bit pattern, or undefined where it refuses the value. */
function write(bits: number): string | undefined {
  words[0] = bits;
  const out = new JsonBytes(8);
  out.reserve(0, 1);
  return out.floats(values, words, 0, 1) === -1 ? out.take() : undefined;
}

/** The reference: the shortest toPrecision that reads back, as JSON with "1.0" for whole numbers. */
function reference(x: number): string {
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  for (let p = 1; p <= 9; p++) {
    const v = Number(x.toPrecision(p));
    if (Math.fround(v) !== x) continue;
    if (Number.isInteger(v) && Math.abs(v) < 1e21) return `${v}.0`;
    return String(v).replace('e+', 'e');
  }
  throw new Error(`no decimal of up to 9 digits reads back as ${x}`);
}

function checkBits(bits: number): void {
  words[0] = bits;
  const x = values[0]!;
  const text = write(bits);
  assert.equal(text, reference(x), `bits 0x${(bits >>> 0).toString(16)}`);
  const back = JSON.parse(text!) as number;
  assert.equal(Math.fround(back), x, `${x} written as ${text}`);
}

const bitsOf = (v: number) => new Int32Array(Float32Array.of(v).buffer)[0]!;

/** Each pattern of `bits - n` .. `bits + n` that is finite, both signs. */
function around(bits: number, n: number): void {
  for (let d = -n; d <= n; d++) {
    const b = (bits & 0x7fffffff) + d;
    if (b < 0 || ((b >>> 23) & 0xff) === 0xff) continue;
    checkBits(b);
    checkBits(b | 0x80000000);
  }
}

describe('float32 JSON writer', () => {
  test('random bit patterns: the reference text, and the same float32 read back', () => {
    // A seeded spread over all finite float32 bit patterns, both signs.
    let seed = 12345;
    let checked = 0;
    while (checked < 60_000) {
      seed = (Math.imul(seed, 1103515245) + 12345) | 0;
      const bits = Math.imul(seed ^ (seed >>> 15), 0x2c1b3c6d);
      if (((bits >>> 23) & 0xff) === 0xff) continue;
      checkBits(bits);
      checked++;
    }
  });

  test('random values of a normalised embedding (where nearly all fall: 1e-5 to 1)', () => {
    let seed = 777;
    const from = bitsOf(1e-5);
    const to = bitsOf(1);
    for (let i = 0; i < 40_000; i++) {
      seed = (Math.imul(seed, 1103515245) + 12345) | 0;
      checkBits(from + ((seed >>> 1) % (to - from)) + ((seed & 1) << 31));
    }
  });

  test('random values of 1e-6 to 1e-4 (where the digits are checked as a client reads them)', () => {
    let seed = 4242;
    const from = bitsOf(1e-6);
    const to = bitsOf(1e-4);
    for (let i = 0; i < 40_000; i++) {
      seed = (Math.imul(seed, 1103515245) + 12345) | 0;
      checkBits(from + ((seed >>> 1) % (to - from)) + ((seed & 1) << 31));
    }
    // A candidate within a hair of its rounding bound that a client's read still takes back.
    assert.equal(write(0x35ca9242), '0.000001509274');
    assert.equal(write(0x35ca9242 | 0x80000000), '-0.000001509274');
  });

  test('subnormals, zeros and the extremes', () => {
    for (let m = 1; m < 0x800000; m += 997) {
      checkBits(m);
      checkBits(m | 0x80000000);
    }
    around(0, 20); // the zeros and the smallest subnormals
    around(0x7fffff, 5); // the largest subnormal and the smallest normal
    around(0x7f7fffff, 5); // the largest finite value
  });

  test('every power of two and its neighbours', () => {
    // The rounding interval of a power of two is narrower below than above.
    for (let e = 1; e < 255; e++) around(e << 23, 3);
  });

  test('around the powers of ten, where the digit count and the notation change', () => {
    // JSON (and the engine) switch to exponent notation below 1e-6 and from 1e21 on; the fast path
    // covers 1e-6 up to about 1e8.
    for (let p = -45; p <= 38; p++) around(bitsOf(Number(`1e${p}`)), 40);
    for (const v of [9.999999e-8, 1.0000001e-7, 9.99999e20, 1.00000006e21, 123456790, 99999990, 0.99999994]) {
      around(bitsOf(v), 10);
    }
    assert.equal(write(bitsOf(1e-7)), '1e-7');
    assert.equal(write(bitsOf(1e21)), '1e21');
  });

  test('known texts', () => {
    assert.equal(write(bitsOf(0.1)), '0.1');
    assert.equal(write(bitsOf(1)), '1.0');
    assert.equal(write(bitsOf(-0)), '-0.0');
    assert.equal(write(bitsOf(-12.5)), '-12.5');
    assert.equal(write(bitsOf(300)), '300.0');
    assert.equal(write(bitsOf(0.00012345)), '0.00012345');
    assert.equal(write(bitsOf(0.3)), '0.3');
    assert.equal(write(bitsOf(16777216)), '16777216.0');
  });

  test('a run of values is comma-separated and the buffer grows, keeping what was written', () => {
    const many = Float32Array.from({ length: 100_000 }, (_, i) => Math.sin(i) * 3);
    const bits = new Int32Array(many.buffer);
    const out = new JsonBytes(8);
    for (let round = 0; round < 2; round++) {
      out.reserve(1);
      out.byte(0x5b);
      for (let start = 0; start < many.length; start += 1000) {
        out.reserve(1, 1000);
        if (start > 0) out.byte(0x2c);
        assert.equal(out.floats(many, bits, start, start + 1000), -1);
      }
      out.reserve(1);
      out.byte(0x5d);
      // Past 1 MiB the buffer is let go after the text is taken; the next answer starts small again.
      const text = out.take();
      assert.deepEqual((JSON.parse(text) as number[]).map(Math.fround), Array.from(many));
      assert.equal(text, `[${Array.from(many, reference).join(',')}]`);
    }
  });

  test('NaN and the infinities are refused with their index: JSON cannot hold them', () => {
    for (const v of [NaN, Infinity, -Infinity]) {
      const run = Float32Array.of(0.5, -2, v, 3);
      const out = new JsonBytes(8);
      out.reserve(0, run.length);
      assert.equal(out.floats(run, new Int32Array(run.buffer), 0, run.length), 2);
      assert.equal(write(bitsOf(v)), undefined);
    }
  });
});
