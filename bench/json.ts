/**
 * `node dist/bench/json.js` (section `json` of bench/run.ts): JSON tensors on
 * the event loop, in process, the previous code against the current one,
 * alternated in short rounds in the same run (the machine's speed swings, a
 * ratio from the same rounds does not).
 * - decode: parsing the body of a medium-model request (512 FP32 as Python's
 *   json writes them); previous = JSON.parse plus the two regular-expression
 *   checks for long integers and huge numbers, current = parseJsonText.
 * - encode: the `data` text of a 768-FP32 output, distinct values each call
 *   (V8 caches number strings; repeated values would flatter both);
 *   previous = JSON.stringify with the ".0" and "e+" passes always run,
 *   current = encodeJsonTensorData.
 * Printed: µs per call (median of rounds) and previous / current.
 * Environment: BENCH_ROUNDS (default 15).
 */
import { parseJsonText } from '../src/frontends/http/json-parse.js';
import { encodeJsonTensorData } from '../src/tensor/json-codec.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 15);

// --- the previous code, kept here for the comparison ---
const LONG_INTEGER = /(?<![\d.eE+-])-?\d{16,}(?![\d.eE])/;
const HUGE_NUMBER = /\d{309}|[eE]\+?0*[1-9]\d{2}/;
function previousParse(text: string): unknown {
  const doc = JSON.parse(text) as unknown;
  if (text.includes('INT64') || text.includes('sequence_id')) LONG_INTEGER.test(text);
  HUGE_NUMBER.test(text);
  return doc;
}
const INTEGRAL_TOKEN = /([[,]-?\d+)(?=[,\]])/g;
function previousEncode(a: Float32Array): string {
  for (let i = 0; i < a.length; i++) {
    const v = a[i]!;
    if (v - v !== 0 || (v === 0 && 1 / v < 0)) throw new Error('bench data has no NaN/Inf/-0');
  }
  const s = JSON.stringify(Array.from(a)).replace(INTEGRAL_TOKEN, '$1.0');
  return s.includes('e+') ? s.replaceAll('e+', 'e') : s;
}

// --- data ---
const IN = 512;
const OUT = 768;
const VARIANTS = 64;
const requests: string[] = [];
const outputs: Float32Array[] = [];
for (let k = 0; k < VARIANTS; k++) {
  const data = Array.from({ length: IN }, (_, i) => Math.fround(Math.sin(i * 1.3 + k * 0.01) * 2));
  requests.push(
    JSON.stringify({
      inputs: [{ name: 'input', shape: [1, IN], datatype: 'FP32', data }],
      outputs: [{ name: 'output' }],
    }),
  );
  const o = new Float32Array(OUT);
  for (let i = 0; i < OUT; i++) o[i] = Math.cos(i * 0.7 + k * 0.013) * (1 + k / 9);
  outputs.push(o);
}
for (const o of outputs) {
  if (previousEncode(o) !== encodeJsonTensorData('o', 'FP32', new Uint8Array(o.buffer), OUT))
    throw new Error('encoders differ');
}

function timeUs(f: (k: number) => unknown, calls: number): number {
  const t = process.hrtime.bigint();
  for (let i = 0; i < calls; i++) f(i % VARIANTS);
  return Number(process.hrtime.bigint() - t) / 1000 / calls;
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const cases: [string, (k: number) => unknown, (k: number) => unknown][] = [
  [
    `decode: request body, ${IN} FP32 (${requests[0]!.length} bytes)`,
    (k) => previousParse(requests[k]!),
    (k) => parseJsonText(requests[k]!),
  ],
  [
    `encode: output data, ${OUT} FP32`,
    (k) => previousEncode(outputs[k]!),
    (k) => encodeJsonTensorData('o', 'FP32', new Uint8Array(outputs[k]!.buffer), OUT),
  ],
];
process.stdout.write(
  `\nJSON tensors in process: previous vs current, median of ${ROUNDS} alternated rounds of 200 calls\n`,
);
for (const [label, prev, cur] of cases) {
  for (let i = 0; i < 200; i++) {
    // warm-up
    prev(i % VARIANTS);
    cur(i % VARIANTS);
  }
  const a: number[] = [];
  const b: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    a.push(timeUs(prev, 200));
    b.push(timeUs(cur, 200));
  }
  const pa = median(a);
  const pb = median(b);
  process.stdout.write(
    `${label}: previous ${pa.toFixed(1)} µs, current ${pb.toFixed(1)} µs, previous/current ${(pa / pb).toFixed(2)}\n`,
  );
}
