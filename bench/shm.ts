/**
 * `node dist/bench/shm.js` (section `shm` of bench/run.ts): a 4 MiB FP32
 * input to a model that sums it, once read from client system shared memory
 * (regions registered once; the 4-byte sum is written into a region too) and
 * once sent as binary HTTP (the sum comes back binary), concurrency 1, same
 * server, same run. Prints requests/s, p50 latency and the ratio. The model
 * is cheap on purpose: what differs between the two is moving the input.
 *
 * Environment: BENCH_SECONDS (per way, default 3), BENCH_ROUNDS (alternating slices, default 3).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Pool } from 'undici';
import { OnnxModelBuilder } from '../test/helpers/onnx-builder.js';
import { startNereid } from './processes.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ELEMENTS = 1 << 20; // 4 MiB of FP32
const BYTES = ELEMENTS * 4;

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

interface Point {
  perSec: number;
  p50us: number;
}

/**
 * Runs each way back to back, alternating in ROUNDS slices of SECONDS/ROUNDS
 * each (a shared machine's load then falls on both alike), and reports the
 * rate and median latency of each.
 */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
async function compare(ways: Array<() => Promise<void>>): Promise<Point[]> {
  for (const once of ways) for (let i = 0; i < 3; i++) await once();
  const lat = ways.map(() => [] as number[]);
  const busy = ways.map(() => 0);
  for (let round = 0; round < ROUNDS; round++) {
    for (let w = 0; w < ways.length; w++) {
      const start = process.hrtime.bigint();
      const end = start + BigInt(Math.round((SECONDS / ROUNDS) * 1e9));
      let now = start;
      while (now < end) {
        const t0 = process.hrtime.bigint();
        await ways[w]!();
        now = process.hrtime.bigint();
        lat[w]!.push(Number(now - t0) / 1000);
      }
      busy[w]! += Number(now - start) / 1e9;
    }
  }
  return lat.map((l, w) => {
    l.sort((a, b) => a - b);
    return { perSec: l.length / busy[w]!, p50us: l[Math.floor(l.length / 2)]! };
  });
}

const repo = mkdtempSync(path.join(tmpdir(), 'nereid-bench-shm-'));
const tag = `nereid-bench-${process.pid}`;
const inKey = `/${tag}-in`;
const outKey = `/${tag}-out`;
const modelDir = path.join(repo, 'sum_fp32');
await new OnnxModelBuilder({ name: 'sum' })
  .input('INPUT0', 'FP32', ['batch', ELEMENTS])
  .output('OUTPUT0', 'FP32', ['batch', 1])
  .initializer('axes', 'INT64', [1], BigInt64Array.of(1n))
  .node('ReduceSum', ['INPUT0', 'axes'], ['OUTPUT0'], { keepdims: { i: 1 } })
  .save(path.join(modelDir, '1', 'model.onnx'));
writeFileSync(
  path.join(modelDir, 'config.pbtxt'),
  `platform: "onnxruntime_onnx"
max_batch_size: 1
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ ${ELEMENTS} ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`,
);

const input = new Float32Array(ELEMENTS);
for (let i = 0; i < ELEMENTS; i++) input[i] = (i % 8) * 0.25; // exact in FP32: the sum is 917504
const inputBytes = Buffer.from(input.buffer);
writeFileSync(`/dev/shm${inKey}`, inputBytes);
writeFileSync(`/dev/shm${outKey}`, Buffer.alloc(4));

const nereid = await startNereid(repo, ['--allow-client-shm=true']);
const pool = new Pool(`http://127.0.0.1:${nereid.http}`, { connections: 1 });
try {
  const post = async (p: string, body: Buffer | string, headers: Record<string, string> = {}): Promise<Buffer> => {
    const r = await pool.request({ method: 'POST', path: p, body, headers });
    const chunks: Buffer[] = [];
    for await (const c of r.body) chunks.push(c as Buffer);
    const out = Buffer.concat(chunks);
    if (r.statusCode !== 200) throw new Error(`${p}: ${r.statusCode} ${out.toString()}`);
    return out;
  };
  await post('/v2/systemsharedmemory/region/in/register', JSON.stringify({ key: inKey, offset: 0, byte_size: BYTES }));
  await post('/v2/systemsharedmemory/region/out/register', JSON.stringify({ key: outKey, offset: 0, byte_size: 4 }));

  const shmBody = JSON.stringify({
    inputs: [
      {
        name: 'INPUT0',
        datatype: 'FP32',
        shape: [1, ELEMENTS],
        parameters: { shared_memory_region: 'in', shared_memory_byte_size: BYTES },
      },
    ],
    outputs: [{ name: 'OUTPUT0', parameters: { shared_memory_region: 'out', shared_memory_byte_size: 4 } }],
  });
  const header = Buffer.from(
    JSON.stringify({
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, ELEMENTS], parameters: { binary_data_size: BYTES } }],
      outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }],
    }),
  );
  const binaryBody = Buffer.concat([header, inputBytes]);
  const binaryHeaders = {
    'Inference-Header-Content-Length': String(header.byteLength),
    'Content-Type': 'application/octet-stream',
  };

  // Both ways give the same sum back.
  await post('/v2/models/sum_fp32/infer', shmBody);
  const viaShm = readFileSync(`/dev/shm${outKey}`).readFloatLE(0);
  const reply = await post('/v2/models/sum_fp32/infer', binaryBody, binaryHeaders);
  const viaHttp = reply.readFloatLE(reply.byteLength - 4);
  if (viaShm !== 917504 || viaHttp !== 917504)
    throw new Error(`sums differ: shm ${viaShm}, HTTP ${viaHttp}, expected 917504`);

  const [http, shm] = (await compare([
    async () => {
      await post('/v2/models/sum_fp32/infer', binaryBody, binaryHeaders);
    },
    async () => {
      await post('/v2/models/sum_fp32/infer', shmBody);
    },
  ])) as [Point, Point];
  const w = [18, 12, 10];
  const row = (cells: string[]) => cells.map((c, i) => c.padStart(w[i]!)).join('  ');
  process.stdout.write(
    `\n4 MiB FP32 input (summed by the model), concurrency 1, ` +
    `${SECONDS}s per way: system shared memory vs binary HTTP\n`,
  );
  process.stdout.write(`${row(['transport', 'requests/s', 'p50 us'])}\n`);
  process.stdout.write(`${row(['binary HTTP', fmt(http.perSec, 1), fmt(http.p50us)])}\n`);
  process.stdout.write(`${row(['system shm', fmt(shm.perSec, 1), fmt(shm.p50us)])}\n`);
  process.stdout.write(`shm / HTTP: ${fmt(shm.perSec / http.perSec, 2)}x (bar: >= 3x)\n`);
} finally {
  await pool.close();
  await nereid.proc.stop();
  rmSync(`/dev/shm${inKey}`, { force: true });
  rmSync(`/dev/shm${outKey}`, { force: true });
  rmSync(repo, { recursive: true, force: true });
}
