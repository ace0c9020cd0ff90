/**
 * FP16 and BF16 travel as raw 16-bit words (Uint16Array); these convert
 * between them and numbers, rounding to nearest even.
 */
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

function float16Word(v: number): number {
  f32[0] = v;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rest = mant & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (rest > halfway || (rest === halfway && (half & 1) === 1)) half++;
    return sign | half;
  }
  let half = sign | (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  // A carry out of the mantissa correctly bumps the exponent (up to infinity).
  if (rest > 0x1000 || (rest === 0x1000 && (half & 1) === 1)) half++;
  return half;
}

function float16Value(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 0x1f) return m !== 0 ? NaN : sign * Infinity;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}

function bfloat16Word(v: number): number {
  f32[0] = v;
  const x = u32[0]!;
  if ((x & 0x7f800000) === 0x7f800000 && (x & 0x7fffff) !== 0) return (x >>> 16) | 0x40;
  return ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff;
}

function bfloat16Value(h: number): number {
  u32[0] = h << 16;
  return f32[0]!;
}

/** Numbers as FP16 words. */
export function toFloat16(values: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = float16Word(values[i]!);
  return out;
}

/** FP16 words as numbers. */
export function fromFloat16(words: ArrayLike<number>): Float32Array {
  const out = new Float32Array(words.length);
  for (let i = 0; i < words.length; i++) out[i] = float16Value(words[i]!);
  return out;
}

/** Numbers as BF16 words. */
export function toBFloat16(values: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = bfloat16Word(values[i]!);
  return out;
}

/** BF16 words as numbers. */
export function fromBFloat16(words: ArrayLike<number>): Float32Array {
  const out = new Float32Array(words.length);
  for (let i = 0; i < words.length; i++) out[i] = bfloat16Value(words[i]!);
  return out;
}
