/**
 * `node dist/bench/float32-json.js` (section `float32json` of bench/run.ts): the float32 JSON writer of
 * /v1/embeddings in process, the previous writer against the current one, alternated in rounds in
 * the same run. Each call writes one answer's floats: 16 vectors of 32 values, normalised as an
 * embedding model's are: 64 different answers taking turns, as a real client's vectors differ from
 * call to call; then one answer again and again, as in `npm run bench -- openai` (a), where the CPU
 * learns the previous writer's branches. Printed: nanoseconds of thread CPU per float (medians of
 * the rounds) and previous / current.
 * Environment: BENCH_ROUNDS (default 15).
 */
import { formatJsonDouble } from '../src/tensor/json-codec.js';
import { JsonBytes } from '../src/tensor/float32-json.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 15);

// --- the previous writer (one value per call, the digit search by branches), kept for the comparison ---
/** 10^0 .. 10^13, each exact as a double. */
const POW10 = Float64Array.from({ length: 14 }, (_, i) => Number(`1e${i}`));
/**
 * Per biased float32 exponent e: 8 - D, D the decimal exponent of 2^(e - 127), so that |x| times
 * 10^(8 - D) (or a tenth of it) has nine integer digits; -1 where that is outside the fast path.
 */
const SCALE_EXPONENT = Int8Array.from({ length: 256 }, (_, e) => {
  const d = Math.floor(Math.log10(2) * (e - 127));
  return d >= -5 && d <= 7 ? 8 - d : -1;
});
/** Half the gap between a normal float32 of biased exponent `e` and its neighbours: 2^(e - 151). */
const HALF_GAP = Float64Array.from({ length: 256 }, (_, e) => 2 ** (e - 151));
/** 2^-48: candidates this close (relatively) to a rounding boundary are passed over; see float32(). */
const MARGIN = 2 ** -48;
/** "0000" to "9999", each four ASCII digits as one little-endian 32-bit word. */
const QUADS = Uint32Array.from({ length: 10000 }, (_, n) => {
  const d = (k: number) => 0x30 + (Math.floor(n / 10 ** (3 - k)) % 10);
  return (d(0) | (d(1) << 8) | (d(2) << 16) | (d(3) << 24)) >>> 0;
});
/** "0.00" as one little-endian word. */
const ZERO_POINT = 0x30 | (0x2e << 8) | (0x30 << 16) | (0x30 << 24);
/** Bytes one value takes at most ("-123456790000000000000.0"), and room for a separator. */
const MAX_VALUE_BYTES = 26;

const MINUS = 0x2d;
const DOT = 0x2e;
const ZERO = 0x30;

/** A buffer grown past this is let go once its text is taken, so one huge answer is not kept for good. */
const RETAINED_BYTES = 1 << 20;

/** A growable byte buffer for ASCII JSON text, with a float32 writer. */
class PreviousJsonBytes {
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

  /** Appends one ASCII byte (room reserved). */
  byte(b: number): void {
    this.bytes[this.pos++] = b;
  }

  /** Appends an ASCII string (room reserved). */
  ascii(s: string): void {
    const out = this.bytes;
    let pos = this.pos;
    for (let i = 0; i < s.length; i++) out[pos++] = s.charCodeAt(i);
    this.pos = pos;
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
   * Appends `values[i]` (`words` a view of the same bytes; room reserved); false, writing nothing,
   * for a NaN or an infinity (which JSON cannot hold). Whole values keep /v2's "1.0" form. (An
   * index, not the value: a float, or a bit pattern past 2^30, passed to a call is a heap number.)
   *
   * The fast path covers 1e-4 <= |x| < 1e8 (every value of a normalised embedding but those very
   * near zero): there x * 10^k, with k chosen to give nine integer digits, and the bounds of the
   * values rounding to x are exact doubles (a 25-bit odd mantissa times 5^k of at most 28 bits),
   * so finding the fewest digits that land inside the bounds is exact arithmetic. A candidate
   * within 2^-48 of a bound (but not on it) is passed over: a double read of it could land on the
   * bound itself and tie away. Zeros, powers of two (the lower bound is nearer) and the rest take
   * the engine's formatting.
   */
  float32(values: Float32Array, words: Int32Array, i: number): boolean {
    const x = values[i]!;
    const bits = words[i]!;
    const exponent = (bits >>> 23) & 0xff;
    if (exponent === 0xff) return false;
    let k = SCALE_EXPONENT[exponent]!;
    if (k < 0 || (bits & 0x7fffff) === 0) return this.slow(x);
    const a = x < 0 ? -x : x;
    k -= +(a * POW10[k]! >= 1e9);
    if (k > 12) return this.slow(x);
    const scale = POW10[k]!;
    const s = a * scale;
    // The values rounding to x are those within h of s (scaled, an exact double); `near` keeps the
    // margin off the bounds, which a value exactly on is inside for an even mantissa.
    const h = HALF_GAP[exponent]! * scale;
    const near = h - s * MARGIN;
    const even = (bits & 1) === 0;
    // The scaled half gap h is at least 1e8 / 2^25 (about 3), so the nearest integer c is inside;
    // then the nearest multiple of 10, 100, ..., while it stays inside; `level` counts c's
    // trailing zeros (a multiple of ten inside is found a level up). t is s's distance above the
    // multiple below it, exact; integer divisions by constants are multiplications once compiled.
    const whole = s | 0;
    const frac = s - whole;
    let c = Math.round(s) | 0;
    let level = 0;
    const r1 = whole - ((whole / 10) | 0) * 10;
    const t1 = r1 + frac;
    const d1 = Math.min(t1, 10 - t1);
    if (d1 < near || (even && d1 === h)) {
      c = t1 < 5 ? whole - r1 : whole - r1 + 10;
      level = 1;
      const r2 = whole - ((whole / 100) | 0) * 100;
      const t2 = r2 + frac;
      const d2 = Math.min(t2, 100 - t2);
      if (d2 < near || (even && d2 === h)) {
        c = t2 < 50 ? whole - r2 : whole - r2 + 100;
        level = 2;
        // Rare: h is at most about 60.
        for (let p = 1000; p < 1e9; p *= 10) {
          const r = whole % p;
          const t = r + frac;
          const d = Math.min(t, p - t);
          if (!(d < near || (even && d === h))) break;
          c = t < p / 2 ? whole - r : whole - r + p;
          level++;
        }
      }
    }
    if (c >= 1e9) return this.slow(x);
    const out = this.bytes;
    const view = this.view;
    let pos = this.pos;
    out[pos] = MINUS;
    pos += bits >>> 31;
    // x = c * 10^-k: its first digit is at 10^(8 - k).
    const d = 8 - k;
    const top = (c / 100000000) | 0;
    const rest = (c - top * 100000000) | 0;
    const mid = (rest / 10000) | 0;
    const low = (rest - mid * 10000) | 0;
    if (d < 0) {
      // "0." and -d - 1 zeros (at most three), then the nine digits less c's trailing zeros.
      view.setUint32(pos, ZERO_POINT, true);
      out[pos + 4] = ZERO;
      pos += 1 - d;
      out[pos] = ZERO + top;
      view.setUint32(pos + 1, QUADS[mid]!, true);
      view.setUint32(pos + 5, QUADS[low]!, true);
      this.pos = pos + 9 - level;
      return true;
    }
    // The nine digits one place to the right, then the first d + 1 back left of the point.
    out[pos + 1] = ZERO + top;
    view.setUint32(pos + 2, QUADS[mid]!, true);
    view.setUint32(pos + 6, QUADS[low]!, true);
    for (let j = 0; j <= d; j++) out[pos + j] = out[pos + j + 1]!;
    const point = pos + d + 1;
    out[point] = DOT;
    // Of the 8 - d digits after the point, the trailing zeros go but for one.
    const fraction = 8 - d;
    if (level >= fraction) {
      out[point + 1] = ZERO;
      this.pos = point + 2;
    } else {
      this.pos = point + 1 + fraction - level;
    }
    return true;
  }

  private slow(x: number): true {
    this.ascii(previousSlowText(x));
    return true;
  }
}


function previousSlowText(x: number): string {
  if (x === 0) return formatJsonDouble(x);
  for (let p = 1; p < 9; p++) {
    const v = Number(x.toPrecision(p));
    if (Math.fround(v) === x) return formatJsonDouble(v);
  }
  return formatJsonDouble(Number(x.toPrecision(9)));
}

// --- data ---
const DIM = 32;
const VECTORS = 16;
const FLOATS = DIM * VECTORS;
const answers = Array.from({ length: 64 }, (_, a) => {
  const f = Float32Array.from({ length: FLOATS }, (_, i) => Math.sin(i * 0.37 + a) + 0.1);
  for (let v = 0; v < VECTORS; v++) {
    let norm = 0;
    for (let j = 0; j < DIM; j++) norm += f[v * DIM + j]! ** 2;
    norm = Math.sqrt(norm);
    for (let j = 0; j < DIM; j++) f[v * DIM + j]! /= norm;
  }
  return { floats: f, words: new Int32Array(f.buffer) };
});

const previousOut = new PreviousJsonBytes();
function previous(floats: Float32Array, words: Int32Array): string {
  const out = previousOut;
  out.reserve(2, FLOATS);
  out.byte(0x5b);
  for (let j = 0; j < FLOATS; j++) {
    if (j > 0) out.byte(0x2c);
    if (!out.float32(floats, words, j)) throw new Error('non-finite');
  }
  out.byte(0x5d);
  return out.take();
}

const currentOut = new JsonBytes();
function current(floats: Float32Array, words: Int32Array): string {
  const out = currentOut;
  out.reserve(2, FLOATS);
  out.byte(0x5b);
  if (out.floats(floats, words, 0, FLOATS) !== -1) throw new Error('non-finite');
  out.byte(0x5d);
  return out.take();
}

/** Thread CPU (process CPU where Node has no per-thread figure) in microseconds. */
const threadCpuUsage = (process as { threadCpuUsage?: () => NodeJS.CpuUsage }).threadCpuUsage;
const cpuUs = (): number => {
  const u = threadCpuUsage?.call(process) ?? process.cpuUsage();
  return u.user + u.system;
};

/** Nanoseconds of CPU per float over `calls` answers (blocks long enough for the clock's ticks). */
function time(write: (f: Float32Array, w: Int32Array) => string, calls: number, distinct: number): number {
  const start = cpuUs();
  for (let i = 0; i < calls; i++) {
    const a = answers[i % distinct]!;
    write(a.floats, a.words);
  }
  return ((cpuUs() - start) * 1000) / calls / FLOATS;
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

for (const a of answers) {
  if (previous(a.floats, a.words) !== current(a.floats, a.words)) throw new Error('the writers disagree');
}
time(previous, 3000, answers.length);
time(current, 3000, answers.length);
for (const distinct of [answers.length, 1]) {
  const results = { previous: [] as number[], current: [] as number[] };
  for (let r = 0; r < ROUNDS; r++) {
    results.previous.push(time(previous, 2000, distinct));
    results.current.push(time(current, 2000, distinct));
  }
  const p = median(results.previous);
  const c = median(results.current);
  process.stdout.write(
    `\nfloat32 JSON writer, ${FLOATS} floats per answer (16 normalised vectors of ${DIM}), ` +
      `${distinct === 1 ? 'the same answer every time' : `${distinct} answers taking turns`}, ` +
      `${ROUNDS} alternated rounds (medians, thread CPU)\n` +
      `  previous  ${p.toFixed(1)} ns per float (${((p * FLOATS) / 1000).toFixed(1)} us per answer)\n` +
      `  current   ${c.toFixed(1)} ns per float (${((c * FLOATS) / 1000).toFixed(1)} us per answer)\n` +
      `  previous / current: ${(p / c).toFixed(2)}x\n`,
  );
}
