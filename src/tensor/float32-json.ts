/**
 * FP32 values as JSON numbers written straight into bytes: each is the shortest decimal that a
 * client's JSON parser (a double) followed by a float32 cast (`Math.fround`, numpy's `float32`)
 * reads back as the very same float32. Nine significant digits at most, against the up to
 * seventeen of the value printed as a double. See docs/openai.md, "Floats as JSON".
 */
import { formatJsonDouble } from './json-codec.js';

/** 10^0 .. 10^15, each exact as a double (15 is looked up, then passed to the slow path). */
const POW10 = Float64Array.from({ length: 16 }, (_, i) => Number(`1e${i}`));
/** 5^k = FIVE_HIGH[k] * 2^24 + FIVE_LOW[k], for the exact scaling of values under 1e-4 (smallDigits). */
const FIVE_HIGH = Float64Array.from({ length: 16 }, (_, k) => Math.floor(5 ** k / 2 ** 24));
const FIVE_LOW = Float64Array.from({ length: 16 }, (_, k) => 5 ** k % 2 ** 24);
/**
 * Per biased float32 exponent e: 8 - D, D the decimal exponent of 2^(e - 127), so that |x| times
 * 10^(8 - D) (or a tenth of it) has nine integer digits; -1 where that is outside the fast path.
 */
const SCALE_EXPONENT = Int8Array.from({ length: 256 }, (_, e) => {
  const d = Math.floor(Math.log10(2) * (e - 127));
  return d >= -7 && d <= 7 ? 8 - d : -1;
});
/** Half the gap between a normal float32 of biased exponent `e` and its neighbours: 2^(e - 151). */
const HALF_GAP = Float64Array.from({ length: 256 }, (_, e) => 2 ** (e - 151));
/** 2^-48: candidates this close (relatively) to a rounding bound are passed over; see JsonBytes.floats. */
const MARGIN = 2 ** -48;
/** "0000" to "9999", each four ASCII digits as one little-endian 32-bit word. */
const QUADS = Uint32Array.from({ length: 10000 }, (_, n) => {
  const d = (k: number) => 0x30 + (Math.floor(n / 10 ** (3 - k)) % 10);
  return (d(0) | (d(1) << 8) | (d(2) << 16) | (d(3) << 24)) >>> 0;
});
/** Bytes one value takes at most ("-123456790000000000000.0"), and room for a separator. */
const MAX_VALUE_BYTES = 26;

/** A buffer grown past this is let go once its text is taken, so one huge answer is not kept for good. */
const RETAINED_BYTES = 1 << 20;

/** A growable byte buffer for ASCII JSON text, with a float32 writer. */
export class JsonBytes {
  private bytes: Buffer;
  private view: DataView;
  pos = 0;

  constructor(private readonly size = 1 << 16) {
    this.bytes = Buffer.allocUnsafeSlow(size);
    this.view = new DataView(this.bytes.buffer, this.bytes.byteOffset, this.bytes.byteLength);
  }

  /** Makes room for `n` more bytes, or for `n` float32 values with their separators. */
  reserve(n: number, floats = 0): void {
    const need = this.pos + n + floats * MAX_VALUE_BYTES;
    if (need <= this.bytes.length) return;
    const bytes = Buffer.allocUnsafeSlow(Math.max(need, 2 * this.bytes.length));
    this.bytes.copy(bytes, 0, 0, this.pos);
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  /** Appends ASCII bytes (room reserved). */
  put(ascii: Uint8Array): void {
    const out = this.bytes;
    let pos = this.pos;
    for (let i = 0; i < ascii.length; i++) out[pos++] = ascii[i]!;
    this.pos = pos;
  }

  /** Appends one ASCII byte (room reserved). */
  byte(b: number): void {
    this.bytes[this.pos++] = b;
  }

  /** Appends an ASCII string (room reserved). */
  ascii(s: string): void {
    this.pos = writeAscii(this.bytes, this.pos, s);
  }

  /** Forgets what was written. */
  clear(): void {
    this.pos = 0;
    if (this.bytes.length > RETAINED_BYTES) {
      this.bytes = Buffer.allocUnsafeSlow(this.size);
      this.view = new DataView(this.bytes.buffer, this.bytes.byteOffset, this.bytes.byteLength);
    }
  }

  /** The text written so far; the buffer is then empty again. */
  take(): string {
    const s = this.bytes.toString('latin1', 0, this.pos);
    this.clear();
    return s;
  }

  /**
   * Appends `values[start]` to `values[end - 1]`, comma-separated (`words` a view of the same bytes;
   * room reserved). Returns -1, or the index of a NaN or an infinity (which JSON cannot hold), in
   * which case what was written is to be thrown away. Whole values keep /v2's "1.0" form.
   *
   * The fast path covers 1e-6 <= |x| < 1e8 but for powers of two (every value of a normalised
   * embedding but those very near zero). There s = |x| * 10^k, with k chosen to give nine integer
   * digits, is exact (a 24-bit mantissa times 5^k of at most 28 bits; under 1e-4 see smallDigits),
   * and so are the bounds of the
   * values rounding to x, s - h and s + h: the nine-digit integer nearest s is within them, and the
   * nearest multiple of 10, 100, ... is taken while it is too (ties away from zero, as `toPrecision`
   * rounds). A candidate within 2^-48 of a bound (but not on it) is passed over: a client's double
   * read of it could land on the bound itself and round away. The checks for 10 and 100 are made
   * and the choice taken with masks rather than branches: on the digits of real vectors, branches
   * were mispredicted often enough to cost nearly half the time. A power of two (whose lower bound
   * is nearer) and the rest take the engine's formatting.
   */
  floats(values: Float32Array, words: Int32Array, start: number, end: number): number {
    const pos = writeFloats(values, words, start, end, this.bytes, this.view, this.pos);
    if (pos < 0) return -1 - pos;
    this.pos = pos;
    return -1;
  }
}

/** JsonBytes.floats on the buffer's bytes from `pos`: the position after, or -1 - the index refused. */
function writeFloats(
  values: Float32Array,
  words: Int32Array,
  start: number,
  end: number,
  out: Buffer,
  view: DataView,
  pos: number,
): number {
  const pow10 = POW10;
  const scaleExponent = SCALE_EXPONENT;
  const halfGap = HALF_GAP;
  const quads = QUADS;
  pos |= 0;
  for (let i = start | 0; i < end; i = (i + 1) | 0) {
    if (i > start) out[pos++] = 0x2c;
    const bits = words[i]! | 0;
    const x = values[i]!;
    const exponent = (bits >>> 23) & 0xff;
    let k = scaleExponent[exponent]! | 0;
    const a = Math.abs(x);
    if (k >= 0) k = (k - +(a * pow10[k]! >= 1e9)) | 0;
    if (k < 0 || k > 14 || (bits & 0x7fffff) === 0) {
      if (exponent === 0xff) return -1 - i;
      pos = writeAscii(out, pos, slowFloat32Text(x));
      continue;
    }
    let c: number;
    let level: number;
    if (k > 12) {
      const digits = smallDigits(bits, a, exponent, k);
      level = digits % 16;
      c = (digits - level) / 16;
    } else {
      const scale = pow10[k]!;
      const s = a * scale;
      // The values that round to x are those within h of s (scaled, an exact double); `near` keeps a
      // margin off the bounds, and a value exactly on one is inside for an even mantissa (`tie`).
      const h = halfGap[exponent]! * scale;
      const near = h - s * MARGIN;
      const tie = h - (bits & 1) * (h + 1);
      // t1, t2: s's distance above the multiple of 10, 100 below it (exact); e1, e2: to the nearest.
      const whole = s | 0;
      const frac = s - whole;
      const q1 = (whole / 10) | 0;
      const q2 = (whole / 100) | 0;
      const t1 = ((whole - Math.imul(q1, 10)) | 0) + frac;
      const t2 = ((whole - Math.imul(q2, 100)) | 0) + frac;
      const e1 = 5 - Math.abs(t1 - 5);
      const e2 = 50 - Math.abs(t2 - 50);
      const ok1 = +(e1 < near) | +(e1 === tie);
      const ok2 = ok1 & (+(e2 < near) | +(e2 === tie));
      const c0 = (whole + +(frac >= 0.5)) | 0;
      const c1 = Math.imul(q1 + +(t1 >= 5), 10);
      const c2 = Math.imul(q2 + +(t2 >= 50), 100);
      c = c0 ^ (-ok1 & (c0 ^ c1));
      c ^= -ok2 & (c ^ c2);
      level = ok1 + ok2;
      // A multiple of 1000 or more fits for a few values in a hundred: only then a loop.
      const e3 = 500 - Math.abs(((whole - Math.imul((whole / 1000) | 0, 1000)) | 0) + frac - 500);
      if ((ok2 & +(e3 <= h)) !== 0) {
        for (let p = 1000; p < 1e9; p *= 10) {
          const r = whole % p;
          const t = r + frac;
          const e = Math.min(t, p - t);
          if (!(e < near || e === tie)) break;
          c = (t < p / 2 ? whole - r : whole - r + p) | 0;
          level++;
        }
      }
    }
    if (c >= 1e9) {
      // Rounded up to ten digits (just below a power of ten): rare.
      pos = writeAscii(out, pos, slowFloat32Text(x));
      continue;
    }
    out[pos] = 0x2d;
    pos = (pos + (bits >>> 31)) | 0;
    // x = c * 10^-k: its first digit is at 10^(8 - k).
    const d = (8 - k) | 0;
    const top = (c / 100000000) | 0;
    const rest = (c - Math.imul(top, 100000000)) | 0;
    const mid = (rest / 10000) | 0;
    const low = (rest - Math.imul(mid, 10000)) | 0;
    if (d < 0) {
      // "0." and -d - 1 zeros (at most five), then the nine digits less c's trailing zeros.
      view.setUint32(pos, 0x30302e30, true);
      view.setUint32(pos + 4, 0x30303030, true);
      pos = (pos + 1 - d) | 0;
      out[pos] = 0x30 + top;
      view.setUint32(pos + 1, quads[mid]!, true);
      view.setUint32(pos + 5, quads[low]!, true);
      pos = (pos + 9 - level) | 0;
      continue;
    }
    // The nine digits one place to the right, then the first d + 1 back left of the point.
    out[pos + 1] = 0x30 + top;
    view.setUint32(pos + 2, quads[mid]!, true);
    view.setUint32(pos + 6, quads[low]!, true);
    for (let j = 0; j <= d; j++) out[pos + j] = out[pos + j + 1]!;
    const point = (pos + d + 1) | 0;
    out[point] = 0x2e;
    // Of the 8 - d digits after the point, the trailing zeros go but for one.
    const fraction = (8 - d) | 0;
    if (level >= fraction) {
      out[point + 1] = 0x30;
      pos = (point + 2) | 0;
    } else {
      pos = (point + 1 + fraction - level) | 0;
    }
  }
  return pos;
}

/**
 * For 1e-6 <= |x| < 1e-4 (k = 13 or 14; rare in embeddings): the digits writeFloats takes, 16 c + level,
 * with the reference's own test. s = |x| 10^k is not exact there (x's 24 bits times 5^k take more than
 * 53), but its two parts through 5^k's two halves are, and so are the sums of their whole and fractional
 * parts. Each candidate, fewest digits first, is read back as a client does: c / 10^k is the correctly
 * rounded double of the decimal (both exact, one division), then rounded to float32.
 */
function smallDigits(bits: number, a: number, exponent: number, k: number): number {
  const scale = POW10[k]!;
  const m = (bits & 0x7fffff) | 0x800000;
  const unit = 2 ** (exponent - 150 + k);
  const high = m * FIVE_HIGH[k]! * unit * 16777216;
  const low = m * FIVE_LOW[k]! * unit;
  const wholeHigh = Math.floor(high);
  const wholeLow = Math.floor(low);
  const sum = high - wholeHigh + (low - wholeLow);
  const carry = +(sum >= 1);
  const whole = wholeHigh + wholeLow + carry;
  const frac = sum - carry;
  for (let level = 8, p = 1e8; level > 0; level--, p /= 10) {
    const r = whole % p;
    const c = r + frac >= p / 2 ? whole - r + p : whole - r;
    if (Math.fround(c / scale) === a) return c * 16 + level;
  }
  return (whole + +(frac >= 0.5)) * 16;
}

function writeAscii(out: Buffer, pos: number, s: string): number {
  for (let i = 0; i < s.length; i++) out[pos++] = s.charCodeAt(i);
  return pos;
}

/** The same text by the engine's own formatting: the fewest significant digits that read back as `x`. */
function slowFloat32Text(x: number): string {
  if (x === 0) return formatJsonDouble(x);
  for (let p = 1; p < 9; p++) {
    const v = Number(x.toPrecision(p));
    if (Math.fround(v) === x) return formatJsonDouble(v);
  }
  return formatJsonDouble(Number(x.toPrecision(9)));
}
