/**
 * `node dist/bench/overload.js` (section `overload` of bench/run.ts): a
 * bounded queue at twice its capacity. The medium MLP under the dynamic
 * batcher with `max_queue_size: 64`; first its capacity (wrk, 32 connections,
 * closed loop: requests/s and p99), then an open-loop load at 2× that rate
 * from this process (requests leave on a clock whether or not earlier ones
 * were answered, as real overload comes). Printed: goodput (200s per second)
 * against capacity, the accepted requests' p99 against the p99 at capacity,
 * how many were refused (503, with Retry-After) and whether the server
 * serves at capacity again right after. Bars: goodput ≥ 0.9× capacity,
 * accepted p99 ≤ 3× the p99 at capacity.
 *
 * Environment: BENCH_SECONDS (per point, default 3), OVERLOAD_FACTOR (default 2).
 */
import http from 'node:http';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { binaryBody } from './bodies.js';
import { benchModelsDir, buildBenchModels } from './models.js';
import { startNereid } from './processes.js';
import { type HttpBody, runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const FACTOR = Number(process.env.OVERLOAD_FACTOR ?? 2);
const MODEL = 'mlp_medium_bounded';

interface OpenLoopResult {
  sent: number;
  ok: number;
  refused: number;
  retryAfter: number;
  otherErrors: number;
  okP50us: number;
  okP99us: number;
  seconds: number;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** Sends `rate` requests per second for `seconds`, on a 1 ms clock, over keep-alive connections. */
async function openLoop(port: number, urlPath: string, req: HttpBody, rate: number, seconds: number): Promise<OpenLoopResult> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1024 });
  const headers = { ...req.headers, 'Content-Length': String(req.body.byteLength) };
  const latencies: number[] = [];
  const r = { sent: 0, ok: 0, refused: 0, retryAfter: 0, otherErrors: 0 };
  let outstanding = 0;
  const one = (): void => {
    const start = process.hrtime.bigint();
    outstanding += 1;
    const cr = http.request({ host: '127.0.0.1', port, method: 'POST', path: urlPath, headers, agent }, (res) => {
      res.resume();
      res.on('end', () => {
        outstanding -= 1;
        if (res.statusCode === 200) {
          r.ok += 1;
          latencies.push(Number(process.hrtime.bigint() - start) / 1000);
        } else if (res.statusCode === 503) {
          r.refused += 1;
          if (res.headers['retry-after'] !== undefined) r.retryAfter += 1;
        } else {
          r.otherErrors += 1;
        }
      });
    });
    cr.on('error', () => {
      outstanding -= 1;
      r.otherErrors += 1;
    });
    cr.end(req.body);
    r.sent += 1;
  };
  const t0 = process.hrtime.bigint();
  const endNs = t0 + BigInt(Math.round(seconds * 1e9));
  await new Promise<void>((resolve) => {
    const tick = (): void => {
      const now = process.hrtime.bigint();
      const due = Math.floor((Number(now - t0) / 1e9) * rate);
      while (r.sent < due) one();
      if (now >= endNs) resolve();
      else setTimeout(tick, 1);
    };
    tick();
  });
  const sendSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
  while (outstanding > 0) await new Promise((res) => setTimeout(res, 5));
  agent.destroy();
  latencies.sort((a, b) => a - b);
  return { ...r, okP50us: percentile(latencies, 50), okP99us: percentile(latencies, 99), seconds: sendSeconds };
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
  await runWrk(url, body, 32, 1); // warm-up
  const cap = await runWrk(url, body, 32, SECONDS);
  const over = await openLoop(nereid.http, urlPath, body, cap.requestsPerSec * FACTOR, SECONDS);
  const after = await runWrk(url, body, 32, SECONDS);
  const goodput = over.ok / over.seconds;
  const rows = [
    ['capacity (wrk -c32)', fmt(cap.requestsPerSec), fmt(cap.p99us), String(cap.non2xx + cap.errors), '-'],
    [`${FACTOR}x open loop (${fmt(cap.requestsPerSec * FACTOR)}/s offered)`, fmt(goodput), fmt(over.okP99us), `${over.refused} (${over.retryAfter} with Retry-After), ${over.otherErrors} other`, `${fmt(over.sent)} sent`],
    ['after (wrk -c32)', fmt(after.requestsPerSec), fmt(after.p99us), String(after.non2xx + after.errors), '-'],
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
