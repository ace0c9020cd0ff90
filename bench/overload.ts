/**
 * `node dist/bench/overload.js` (section `overload` of bench/run.ts): a
 * bounded queue at twice its capacity. The medium MLP under the dynamic
 * batcher with `max_queue_size: 64`; first its capacity (wrk, 32 connections,
 * closed loop: requests/s and p99), then an open-loop load at 2× that rate
 * from a generator in its own process (bench/open-loop.ts: requests leave on
 * a clock whether or not earlier ones were answered, as real overload comes;
 * its own lag is reported apart, not charged to the server). Printed: goodput (200s per second)
 * against capacity, the accepted requests' p99 against the p99 at capacity,
 * how many were refused (503, with Retry-After) and whether the server
 * serves at capacity again right after. Bars: goodput ≥ 0.9× capacity,
 * accepted p99 ≤ 3× the p99 at capacity.
 *
 * Environment: BENCH_SECONDS (per point, default 3), OVERLOAD_FACTOR (default 2).
 */
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { binaryBody } from './bodies.js';
import { benchModelsDir, buildBenchModels } from './models.js';
import { DIST, cpuSeconds, startNereid } from './processes.js';
import { type HttpBody, runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const FACTOR = Number(process.env.OVERLOAD_FACTOR ?? 2);
const MODEL = 'mlp_medium_bounded';

interface OpenLoopResult {
  sent: number;
  scheduled: number;
  unsent: number;
  ok: number;
  refused: number;
  retryAfter: number;
  otherErrors: number;
  okP50us: number;
  okP99us: number;
  refusedP99us: number;
  late: number;
  maxLagUs: number;
  connections: number;
  seconds: number;
}

/** Runs the open-loop generator (bench/open-loop.ts) in its own process. */
function openLoop(port: number, urlPath: string, req: HttpBody, rate: number, seconds: number): Promise<OpenLoopResult> {
  const config = {
    port,
    path: urlPath,
    headers: req.headers,
    bodyBase64: req.body.toString('base64'),
    rate,
    seconds,
    maxConnections: 512,
  };
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(DIST, 'bench', 'open-loop.js'), JSON.stringify(config)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      try {
        resolve(JSON.parse(out) as OpenLoopResult);
      } catch {
        reject(new Error(`open-loop generator exited with ${code}: ${out}`));
      }
    });
  });
}

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

const medium = (await buildBenchModels()).find((m) => m.plainName === 'mlp_medium')!;
const repo = path.join(benchModelsDir(), 'overload');
mkdirSync(path.join(repo, MODEL, '1'), { recursive: true });
writeFileSync(
  path.join(repo, MODEL, 'config.pbtxt'),
  [
    `name: "${MODEL}"`,
    'platform: "onnxruntime_onnx"',
    `max_batch_size: ${medium.maxBatchSize}`,
    `input [ { name: "${medium.inputName}" data_type: TYPE_FP32 dims: [ ${medium.inputSize} ] } ]`,
    `output [ { name: "${medium.outputName}" data_type: TYPE_FP32 dims: [ ${medium.outputSize} ] } ]`,
    'dynamic_batching { default_queue_policy { max_queue_size: 64 } }',
    'instance_group [ { kind: KIND_CPU count: 1 } ]',
    '',
  ].join('\n'),
);
const { readFileSync } = await import('node:fs');
writeFileSync(path.join(repo, MODEL, '1', 'model.onnx'), readFileSync(medium.onnxFile));

const body = binaryBody(medium.inputName, medium.outputName, medium.inputSize);
const nereid = await startNereid(repo, []);
try {
  const urlPath = `/v2/models/${MODEL}/infer`;
  const url = `http://127.0.0.1:${nereid.http}${urlPath}`;
  const pid = nereid.proc.child.pid!;
  /** Main-thread and whole-process CPU over `run`, in % of one core. */
  const busy = async <T>(run: () => Promise<T>): Promise<[T, string]> => {
    const t0 = process.hrtime.bigint();
    const [m0, p0] = [cpuSeconds(pid, pid), cpuSeconds(pid)];
    const out = await run();
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    const [m1, p1] = [cpuSeconds(pid, pid), cpuSeconds(pid)];
    return [out, `main ${fmt((100 * (m1 - m0)) / s)} %, process ${fmt((100 * (p1 - p0)) / s)} %`];
  };
  await runWrk(url, body, 32, 1); // warm-up
  const [cap, capCpu] = await busy(() => runWrk(url, body, 32, SECONDS));
  const [over, overCpu] = await busy(() => openLoop(nereid.http, urlPath, body, cap.requestsPerSec * FACTOR, SECONDS));
  const [after, afterCpu] = await busy(() => runWrk(url, body, 32, SECONDS));
  const goodput = over.ok / over.seconds;
  const rows = [
    ['capacity (wrk -c32)', fmt(cap.requestsPerSec), fmt(cap.p99us), String(cap.non2xx + cap.errors), capCpu],
    [`${FACTOR}x open loop (${fmt(cap.requestsPerSec * FACTOR)}/s offered)`, fmt(goodput), fmt(over.okP99us), `${over.refused} (${over.retryAfter} with Retry-After), ${over.otherErrors} other`, `${overCpu}; ${fmt(over.sent)} sent, ${fmt(over.late)} late by >2 ms (max ${fmt(over.maxLagUs / 1000, 1)} ms), ${over.connections} connections, refused p99 ${fmt(over.refusedP99us)} µs`],
    ['after (wrk -c32)', fmt(after.requestsPerSec), fmt(after.p99us), String(after.non2xx + after.errors), afterCpu],
  ];
  const widths = [0, 1, 2, 3, 4].map((i) => Math.max(...rows.map((r) => r[i]!.length), ['point', 'ok/s', 'ok p99us', 'refused', 'note'][i]!.length));
  const line = (cells: string[]) => cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
  process.stdout.write(`\n${medium.label}, dynamic batching, max_queue_size 64: overload at ${FACTOR}x capacity, ${SECONDS}s per point\n`);
  process.stdout.write(`${line(['point', 'ok/s', 'ok p99us', 'refused', 'note'])}\n`);
  for (const r of rows) process.stdout.write(`${line(r)}\n`);
  process.stdout.write(
    `goodput / capacity: ${fmt(goodput / cap.requestsPerSec, 2)} (bar ≥ 0.9); accepted p99 / p99 at capacity: ${fmt(over.okP99us / cap.p99us, 2)} (bar ≤ 3)\n`,
  );
} finally {
  await nereid.proc.stop();
}
