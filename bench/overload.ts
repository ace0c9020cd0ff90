/**
 * `node dist/bench/overload.js` (section `overload` of bench/run.ts): a
 * bounded queue at twice its capacity. The medium MLP under the dynamic
 * batcher with `max_queue_size: 64`; first its capacity (wrk, 32 connections,
 * closed loop: requests/s and p99), then an open-loop load at 2× that rate
 * from a generator in its own process (bench/open-loop.ts: requests leave on
 * a clock whether or not earlier ones were answered, as real overload comes,
 * over keep-alive connections it opens and warms before its clock starts;
 * its own lag and CPU are reported apart, not charged to the server). Printed: goodput (200s per second)
 * against capacity, the accepted requests' p99 against the p99 at capacity,
 * how many were refused (503, with Retry-After) and whether the server
 * serves at capacity again right after; beside each point the server's
 * main-thread CPU per request and its own statistics (mean request, queue and
 * compute time, mean batch), to set against what the client measured. Bars: goodput ≥ 0.9× capacity,
 * accepted p99 ≤ 3× the p99 at capacity.
 *
 * Environment: BENCH_SECONDS (per point, default 3), OVERLOAD_FACTOR (default 2),
 * OVERLOAD_NODE_ARGS (extra node flags for the server, e.g. "--cpu-prof --cpu-prof-dir=DIR").
 */
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { binaryBody } from './bodies.js';
import { benchModelsDir, buildBenchModels } from './models.js';
import { DIST, cpuSeconds, startNereid } from './processes.js';
import { type HttpBody, type WrkResult, runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const FACTOR = Number(process.env.OVERLOAD_FACTOR ?? 2);
const MODEL = 'mlp_medium_bounded';
/** Keep-alive connections the generator opens before the clock starts. */
const CONNECTIONS = 1024;

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
  okMeanUs: number;
  okP99FromDueUs: number;
  refusedP99us: number;
  late: number;
  maxLagUs: number;
  connections: number;
  openedDuringRun: number;
  seconds: number;
  cpuSeconds: number;
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
    connections: CONNECTIONS,
    maxConnections: CONNECTIONS,
    warmPath: '/v2/health/live',
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

interface ServedStats {
  success: number;
  requestNs: number;
  queueNs: number;
  computeNs: number;
  executions: number;
  inferences: number;
}

/** The bounded model's statistics (statistics extension), summed as the bench reads them. */
async function modelStats(port: number): Promise<ServedStats> {
  const r = await fetch(`http://127.0.0.1:${port}/v2/models/${MODEL}/stats`);
  const doc = (await r.json()) as {
    model_stats: Array<{
      execution_count: number;
      inference_count: number;
      inference_stats: Record<'success' | 'queue' | 'compute_input' | 'compute_infer' | 'compute_output', { count: number; ns: number }>;
    }>;
  };
  const m = doc.model_stats[0]!;
  const i = m.inference_stats;
  return {
    success: Number(i.success.count),
    requestNs: Number(i.success.ns),
    queueNs: Number(i.queue.ns),
    computeNs: Number(i.compute_input.ns) + Number(i.compute_infer.ns) + Number(i.compute_output.ns),
    executions: Number(m.execution_count),
    inferences: Number(m.inference_count),
  };
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
const nereid = await startNereid(repo, [], { nodeArgs: process.env['OVERLOAD_NODE_ARGS']?.split(' ') ?? [] });
try {
  const urlPath = `/v2/models/${MODEL}/infer`;
  const url = `http://127.0.0.1:${nereid.http}${urlPath}`;
  const pid = nereid.proc.child.pid!;
  /** Main-thread and whole-process CPU over `run` (% of one core), and the main thread's µs per request handled. */
  const busy = async <T>(run: () => Promise<T>, requests: (out: T) => number): Promise<[T, string]> => {
    const t0 = process.hrtime.bigint();
    const [m0, p0] = [cpuSeconds(pid, pid), cpuSeconds(pid)];
    const out = await run();
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    const [m1, p1] = [cpuSeconds(pid, pid), cpuSeconds(pid)];
    const perRequest = (1e6 * (m1 - m0)) / Math.max(1, requests(out));
    return [out, `main ${fmt((100 * (m1 - m0)) / s)} % (${fmt(perRequest)} µs/request), process ${fmt((100 * (p1 - p0)) / s)} %`];
  };
  /** The server's own view of a point: its statistics before and after. */
  const served = async <T>(run: () => Promise<T>): Promise<[T, string]> => {
    const before = await modelStats(nereid.http);
    const out = await run();
    const after = await modelStats(nereid.http);
    const n = Math.max(1, after.success - before.success);
    const batches = Math.max(1, after.executions - before.executions);
    const us = (a: number, b: number): string => fmt((a - b) / n / 1000);
    const text = `server: ${fmt(after.success - before.success)} ok, mean request ${us(after.requestNs, before.requestNs)} µs = queue ${us(after.queueNs, before.queueNs)} + compute ${us(after.computeNs, before.computeNs)}, mean batch ${fmt((after.inferences - before.inferences) / batches, 1)}`;
    return [out, text];
  };
  await runWrk(url, body, 32, 1); // warm-up
  const wrkRequests = (r: WrkResult): number => r.requests;
  const [[cap, capCpu], capServer] = await served(() => busy(() => runWrk(url, body, 32, SECONDS), wrkRequests));
  const [[over, overCpu], overServer] = await served(() =>
    busy(() => openLoop(nereid.http, urlPath, body, cap.requestsPerSec * FACTOR, SECONDS), (r) => r.sent),
  );
  const [[after, afterCpu], afterServer] = await served(() => busy(() => runWrk(url, body, 32, SECONDS), wrkRequests));
  const goodput = over.ok / over.seconds;
  const rows = [
    ['capacity (wrk -c32)', fmt(cap.requestsPerSec), fmt(cap.p99us), String(cap.non2xx + cap.errors), `${capCpu}; p50 ${fmt(cap.p50us)} µs; ${capServer}`],
    [
      `${FACTOR}x open loop (${fmt(cap.requestsPerSec * FACTOR)}/s offered)`,
      fmt(goodput),
      fmt(over.okP99us),
      `${over.refused} (${over.retryAfter} with Retry-After), ${over.otherErrors} other`,
      `${overCpu}; ok p50 ${fmt(over.okP50us)} µs, mean ${fmt(over.okMeanUs)} µs, p99 from the due time ${fmt(over.okP99FromDueUs)} µs; ${overServer}; ` +
        `generator: ${fmt(over.sent)} sent, ${fmt(over.late)} late by >2 ms (max ${fmt(over.maxLagUs / 1000, 1)} ms), ` +
        `${over.connections} connections (${over.openedDuringRun} opened during the run), CPU ${fmt((100 * over.cpuSeconds) / over.seconds)} %; refused p99 ${fmt(over.refusedP99us)} µs`,
    ],
    ['after (wrk -c32)', fmt(after.requestsPerSec), fmt(after.p99us), String(after.non2xx + after.errors), `${afterCpu}; ${afterServer}`],
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
