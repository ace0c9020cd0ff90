/**
 * The float32 JSON writer of /v1/embeddings: every value reads back (JSON.parse, then Math.fround)
 * as the same float32, with the fewest significant digits that do so.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { JsonBytes } from '../../../src/frontends/openai/float32-json.js';

const values = new Float32Array(1);
const words = new Int32Array(values.buffer);

function write(bits: number): string | undefined {
  words[0] = bits;
  const out = new JsonBytes(8);
  out.reserve(0, 1);
  return out.float32(values, words, 0) ? out.take() : undefined;
}

/** The fewest significant digits p for which x.toPrecision(p) reads back as x through a double. */
function shortestDigits(x: number): number {
  for (let p = 1; p <= 9; p++) if (Math.fround(Number(x.toPrecision(p))) === x) return p;
  throw new Error(`no decimal of up to 9 digits reads back as ${x}`);
}

function significantDigits(text: string): number {
  const mantissa = text.replace(/^-/, '').replace(/e.*$/, '').replace('.', '');
  return mantissa.replace(/^0+/, '').replace(/0+$/, '').length;
}

function checkBits(bits: number): void {
  words[0] = bits;
  const x = values[0]!;
  const text = write(bits);
  assert.ok(text !== undefined, `bits ${bits}`);
  const back = JSON.parse(text) as number;
  assert.equal(Math.fround(back), x, `${x} written as ${text}`);
  assert.equal(Object.is(back, -0), Object.is(x, -0), `${x} written as ${text}`);
  if (x !== 0) assert.equal(significantDigits(text), shortestDigits(x), `${x} written as ${text}`);
}

describe('float32 JSON writer', () => {
  test('every value reads back as the same float32 with the fewest digits', () => {
    // A deterministic spread over all finite float32 bit patterns, both signs.
    let seed = 12345;
    for (let i = 0; i < 50_000; i++) {
      seed = (Math.imul(seed, 1103515245) + 12345) | 0;
      const bits = seed;
      if (((bits >>> 23) & 0xff) === 0xff) continue;
      checkBits(bits);
    }
  });

  test('values of a normalised embedding, one binade after another', () => {
    // Every 499th pattern from 1e-5 to 1, where nearly all embedding values fall.
    const from = new Int32Array(Float32Array.of(1e-5).buffer)[0]!;
    const to = new Int32Array(Float32Array.of(1).buffer)[0]!;
    for (let bits = from; bits <= to; bits += 499) {
      checkBits(bits);
      checkBits(bits | 0x80000000);
    }
  });

  test('edges: zeros, powers of two and ten, the decimal range bounds, extremes', () => {
    const edges = [0, -0, 1, -1, 0.5, 0.25, 2, 1024, 0.1, 0.2, 0.3, 1e-4, 9.999999e-5, 1e-3, 1e8, 99999990,
      123456790, 1e9, 3.4028234663852886e38, 1.401298464324817e-45, 1.1754943508222875e-38, 16777216, 0.99999994];
    for (const e of edges) {
      const bits = new Int32Array(Float32Array.of(e).buffer)[0]!;
      for (let d = -3; d <= 3; d++) if ((((bits + d) >>> 23) & 0xff) !== 0xff) checkBits(bits + d);
    }
    assert.equal(write(new Int32Array(Float32Array.of(0.1).buffer)[0]!), '0.1');
    assert.equal(write(new Int32Array(Float32Array.of(1).buffer)[0]!), '1.0');
    assert.equal(write(new Int32Array(Float32Array.of(-0).buffer)[0]!), '-0.0');
    assert.equal(write(new Int32Array(Float32Array.of(-12.5).buffer)[0]!), '-12.5');
    assert.equal(write(new Int32Array(Float32Array.of(300).buffer)[0]!), '300.0');
    assert.equal(write(new Int32Array(Float32Array.of(0.00012345).buffer)[0]!), '0.00012345');
  });

  test('the buffer grows as values come and the text keeps what was written before', () => {
    const many = Float32Array.from({ length: 100_000 }, (_, i) => Math.sin(i) * 3);
    const bits = new Int32Array(many.buffer);
    const out = new JsonBytes(8);
    for (let round = 0; round < 2; round++) {
      out.reserve(1);
      out.byte(0x5b);
      for (let i = 0; i < many.length; i++) {
        out.reserve(1, 1);
        if (i > 0) out.byte(0x2c);
        assert.ok(out.float32(many, bits, i));
      }
      out.reserve(1);
      out.byte(0x5d);
      // Past 1 MiB the buffer is let go after the text is taken; the next answer starts small again.
      assert.deepEqual((JSON.parse(out.take()) as number[]).map(Math.fround), Array.from(many));
    }
  });

  test('NaN and the infinities are refused: JSON cannot hold them', () => {
    for (const v of [NaN, Infinity, -Infinity]) {
      assert.equal(write(new Int32Array(Float32Array.of(v).buffer)[0]!), undefined);
    }
  });
});
