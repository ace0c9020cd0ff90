/**
 * `node dist/bench/trace.js` (section `trace` of bench/run.ts): what request
 * tracing costs. Four Nereid processes serve the tiny MLP (dynamic
 * batching): tracing off; Triton mode at rate=1000 to a file; rate=1 to a
 * file (log-frequency=1000, so files rotate as they would in production);
 * rate=1 over OTLP/HTTP to a receiver in this process that takes and drops
 * the bodies. wrk at concurrency 32 with binary tensors visits them in turn,
 * ROUNDS times; the medians of throughput and p50/p99 are printed with the
 * ratio of each to tracing off, and the server's CPU per request (whole
 * process, and its main thread: on a busy machine the steadier measure). Goals: rate=1000 ≥ 0.97×, rate=1 to a file
 * ≥ 0.85×, OTLP rate=1 ≥ 0.8× of off.
 *
 * Environment: BENCH_SECONDS (per point, default 3), BENCH_ROUNDS (default 3).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { binaryBody } from './bodies.js';
import { buildBenchModels } from './models.js';
import { cpuSeconds, startNereid } from './processes.js';
import { type WrkResult, runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONNECTIONS = 32;

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 === 1 ? s[(s.length - 1) >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

/** Takes OTLP bodies and answers 200 with an empty ExportTraceServiceResponse. */
async function startReceiver(): Promise<{ url: string; bodies: () => number; stop(): Promise<void> }> {
  let bodies = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      bodies += 1;
      res.writeHead(200, { 'Content-Type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/v1/traces`,
    bodies: () => bodies,
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const [tiny] = await buildBenchModels();
const model = tiny!;
const dir = mkdtempSync(path.join(tmpdir(), 'nereid-bench-trace-'));
const receiver = await startReceiver();
const LEVEL = '--trace-config=level=TIMESTAMPS';
const variants = [
  { label: 'tracing off', flags: [] as string[] },
  {
    label: 'triton, rate=1000, file',
    flags: [`--trace-config=triton,file=${dir}/r1000.json`, LEVEL, '--trace-config=rate=1000'],
  },
  {
    label: 'triton, rate=1, file',
    flags: [
      `--trace-config=triton,file=${dir}/r1.json`,
      '--trace-config=triton,log-frequency=1000',
      LEVEL,
      '--trace-config=rate=1',
    ],
  },
  {
    label: 'opentelemetry, rate=1, OTLP',
    flags: [
      '--trace-config=mode=opentelemetry',
      `--trace-config=opentelemetry,url=${receiver.url}`,
      LEVEL,
      '--trace-config=rate=1',
    ],
  },
];
const servers = [];
for (const v of variants) servers.push(await startNereid(model.repository, ['--allow-metrics=false', ...v.flags]));
const body = binaryBody(model.inputName, model.outputName, model.inputSize);
const results: WrkResult[][] = variants.map(() => []);
/** Server CPU µs per request of each run: whole process, main thread. */
const cpu: Array<Array<{ all: number; main: number }>> = variants.map(() => []);
const url = (port: number): string => `http://127.0.0.1:${port}/v2/models/${model.batchedName}/infer`;
try {
  for (const s of servers) await runWrk(url(s.http), body, CONNECTIONS, 1); // warm-up
  for (let round = 0; round < ROUNDS; round++) {
    for (let i = 0; i < servers.length; i++) {
      const pid = servers[i]!.proc.child.pid!;
      const [all0, main0] = [cpuSeconds(pid), cpuSeconds(pid, pid)];
      const r = await runWrk(url(servers[i]!.http), body, CONNECTIONS, SECONDS);
      const [all1, main1] = [cpuSeconds(pid), cpuSeconds(pid, pid)];
      results[i]!.push(r);
      cpu[i]!.push({ all: ((all1 - all0) * 1e6) / r.requests, main: ((main1 - main0) * 1e6) / r.requests });
    }
  }
} finally {
  for (const s of servers) await s.proc.stop();
  await receiver.stop();
}
const files = readdirSync(dir).length;
rmSync(dir, { recursive: true, force: true });

process.stdout.write(
  `\nTracing cost: ${model.label}, dynamic batching, binary tensors, wrk -c${CONNECTIONS}, ` +
    `${ROUNDS} rounds × ${SECONDS}s, alternated; medians\n`,
);
const widths = [10, 8, 9, 9, 9, 11, 11];
const header = ['req/s', '× off', 'p50 µs', 'p99 µs', 'errors', 'CPU µs/req', 'main µs/req']
  .map((h, i) => h.padStart(widths[i]!))
  .join('');
process.stdout.write(`${'variant'.padEnd(30)}${header}\n`);
const offRps = median(results[0]!.map((r) => r.requestsPerSec));
const goals = [undefined, 0.97, 0.85, 0.8];
for (let i = 0; i < variants.length; i++) {
  const rs = results[i]!;
  const rps = median(rs.map((r) => r.requestsPerSec));
  const ratio = rps / offRps;
  const goal = goals[i];
  const p50 = median(rs.map((r) => r.p50us));
  const p99 = median(rs.map((r) => r.p99us));
  const errors = rs.reduce((n, r) => n + r.errors + r.non2xx, 0);
  const cpuAll = median(cpu[i]!.map((c) => c.all)).toFixed(1);
  const cpuMain = median(cpu[i]!.map((c) => c.main)).toFixed(1);
  const verdict = goal === undefined ? '' : `  goal ≥ ${goal}: ${ratio >= goal ? 'met' : 'NOT met'}`;
  process.stdout.write(
    `${variants[i]!.label.padEnd(30)}${rps.toFixed(0).padStart(10)}${ratio.toFixed(3).padStart(8)}` +
      `${p50.toFixed(0).padStart(9)}${p99.toFixed(0).padStart(9)}${String(errors).padStart(9)}` +
      `${cpuAll.padStart(11)}${cpuMain.padStart(11)}${verdict}\n`,
  );
}
process.stdout.write(`trace files written: ${files}; OTLP bodies received: ${receiver.bodies()}\n`);
