/**
 * `node dist/bench/javascript.js`: what a JavaScript model's worker thread
 * adds to a round trip. One Nereid process serves an identity model twice,
 * as model.mjs (javascript backend) and as an ONNX graph (onnxruntime), with
 * the same config; wrk drives each at concurrency 1 with the same binary
 * body, alternating between the two for BENCH_ROUNDS rounds. The bar: the
 * JavaScript model's p50 within 60 µs of the ONNX model's. Then the same
 * two models in-process (Server.infer() in a loop, no HTTP), which shows
 * the backends' own round trip.
 *
 * Environment: BENCH_SECONDS (per point, default 3), BENCH_ROUNDS (default 3),
 * BENCH_CONCURRENCY (default 1).
 */
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Server } from '../src/core/server.js';
import { buildIdentityModel } from '../test/helpers/onnx-builder.js';
import { binaryBody } from './bodies.js';
import { benchModelsDir } from './models.js';
import { startNereid } from './processes.js';
import { type WrkResult, runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 1);
const SIZE = 16;
const BAR_US = 60;

const IDENTITY_MJS = `export default class {
  execute(requests) {
    return requests.map((r) => ({ outputs: [{ ...r.inputs[0], name: 'OUTPUT0' }] }));
  }
}
`;

function config(name: string, platformOrBackend: string): string {
  return [
    `name: "${name}"`,
    platformOrBackend,
    'max_batch_size: 8',
    `input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ ${SIZE} ] } ]`,
    `output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ ${SIZE} ] } ]`,
    'instance_group [ { kind: KIND_CPU count: 1 } ]',
    '',
  ].join('\n');
}

async function buildRepository(): Promise<string> {
  const root = path.join(benchModelsDir(), 'javascript');
  await mkdir(path.join(root, 'identity_js', '1'), { recursive: true });
  await mkdir(path.join(root, 'identity_onnx', '1'), { recursive: true });
  await writeFile(path.join(root, 'identity_js', 'config.pbtxt'), config('identity_js', 'backend: "javascript"'));
  await writeFile(path.join(root, 'identity_js', '1', 'model.mjs'), IDENTITY_MJS);
  await writeFile(
    path.join(root, 'identity_onnx', 'config.pbtxt'),
    config('identity_onnx', 'platform: "onnxruntime_onnx"'),
  );
  await writeFile(
    path.join(root, 'identity_onnx', '1', 'model.onnx'),
    buildIdentityModel([{ name: 'INPUT0', datatype: 'FP32', shape: ['batch', SIZE] }]).toBytes(),
  );
  return root;
}

const fmt = (n: number, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

function table(title: string, header: string[], rows: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
  process.stdout.write(`\n${title}\n${line(header)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n`);
  for (const r of rows) process.stdout.write(`${line(r)}\n`);
}

const repository = await buildRepository();
const nereid = await startNereid(repository, []);
const body = binaryBody('INPUT0', 'OUTPUT0', SIZE);
const url = (model: string) => `http://127.0.0.1:${nereid.http}/v2/models/${model}/infer`;
const results: { js: WrkResult; onnx: WrkResult }[] = [];
try {
  // Warm both paths up before measuring.
  await runWrk(url('identity_js'), body, CONCURRENCY, 1);
  await runWrk(url('identity_onnx'), body, CONCURRENCY, 1);
  for (let round = 0; round < ROUNDS; round++) {
    // Alternate which goes first, so that a drift in machine load hits both alike.
    if (round % 2 === 0) {
      const onnx = await runWrk(url('identity_onnx'), body, CONCURRENCY, SECONDS);
      const js = await runWrk(url('identity_js'), body, CONCURRENCY, SECONDS);
      results.push({ js, onnx });
    } else {
      const js = await runWrk(url('identity_js'), body, CONCURRENCY, SECONDS);
      const onnx = await runWrk(url('identity_onnx'), body, CONCURRENCY, SECONDS);
      results.push({ js, onnx });
    }
  }
} finally {
  await nereid.proc.stop();
}

const rows = results.map((r, i) => [
  String(i + 1),
  fmt(r.onnx.requestsPerSec),
  fmt(r.onnx.p50us),
  fmt(r.onnx.p99us),
  fmt(r.js.requestsPerSec),
  fmt(r.js.p50us),
  fmt(r.js.p99us),
  fmt(r.js.p50us - r.onnx.p50us),
  String(r.js.errors + r.js.non2xx + r.onnx.errors + r.onnx.non2xx),
]);
const delta = median(results.map((r) => r.js.p50us - r.onnx.p50us));
rows.push([
  'median',
  fmt(median(results.map((r) => r.onnx.requestsPerSec))),
  fmt(median(results.map((r) => r.onnx.p50us))),
  fmt(median(results.map((r) => r.onnx.p99us))),
  fmt(median(results.map((r) => r.js.requestsPerSec))),
  fmt(median(results.map((r) => r.js.p50us))),
  fmt(median(results.map((r) => r.js.p99us))),
  fmt(delta),
  '',
]);
table(
  `identity FP32[${SIZE}], binary HTTP, wrk -t1 -c${CONCURRENCY}, ${SECONDS}s per ` +
  `point: javascript (model.mjs, worker thread) vs onnxruntime, one server, alternating`,
  ['round', 'onnx/s', 'p50us', 'p99us', 'js/s', 'p50us', 'p99us', 'Δp50us', 'errors'],
  rows,
);
process.stdout.write(
  `bar: JavaScript p50 within ${BAR_US} µs of ONNX: ` +
  `${delta <= BAR_US ? 'met' : 'MISSED'} (median Δp50 ${fmt(delta)} µs)\n`,
);

/** Sequential in-process calls for `seconds`: p50 and p99 in µs. */
async function inProcess(
  server: Server,
  model: string,
  seconds: number,
): Promise<{ p50: number; p99: number; perSec: number }> {
  const data = new Uint8Array(new Float32Array(SIZE).fill(0.5).buffer);
  const request = { model, inputs: [{ name: 'INPUT0', datatype: 'FP32' as const, shape: [1, SIZE], data }] };
  for (let i = 0; i < 200; i++) await server.infer(request);
  const samples: number[] = [];
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    const t = performance.now();
    await server.infer(request);
    samples.push((performance.now() - t) * 1000);
  }
  samples.sort((a, b) => a - b);
  const pct = (p: number) => samples[Math.min(samples.length - 1, Math.floor(p * samples.length))]!;
  return { p50: pct(0.5), p99: pct(0.99), perSec: samples.length / seconds };
}

const server = new Server({ modelRepositories: [repository] });
await server.start();
const inRows: string[][] = [];
try {
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? ['identity_onnx', 'identity_js'] : ['identity_js', 'identity_onnx'];
    const got = new Map<string, { p50: number; p99: number; perSec: number }>();
    for (const m of order) got.set(m, await inProcess(server, m, Math.min(SECONDS, 2)));
    const o = got.get('identity_onnx')!;
    const j = got.get('identity_js')!;
    inRows.push([
      String(round + 1),
      fmt(o.perSec),
      fmt(o.p50, 1),
      fmt(o.p99, 1),
      fmt(j.perSec),
      fmt(j.p50, 1),
      fmt(j.p99, 1),
      fmt(j.p50 - o.p50, 1),
    ]);
  }
} finally {
  await server.stop();
}
table(
  `the same models in-process: Server.infer() one call at a time, ${Math.min(SECONDS, 2)}s per point`,
  ['round', 'onnx/s', 'p50us', 'p99us', 'js/s', 'p50us', 'p99us', 'Δp50us'],
  inRows,
);
