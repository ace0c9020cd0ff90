/**
 * `node dist/bench/trace-profile.js VARIANT [SECONDS]`: one server of bench/trace.ts (off, file1000, file1, otlp)
 * under --cpu-prof (NO_PROF=1: without; NODE_ARGS: those flags instead), driven by wrk at concurrency 32; prints
 * req/s and the server's CPU per request (whole process, main thread, each other thread taking ≥ 1 µs: the export
 * and trace file threads are `WorkerThread`).
 * Profiles (a file per thread) and trace files land in $PROFILE_DIR (default: a temp folder). Where the cost of
 * tracing goes: docs/tracing.md, "Cost".
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { appendFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { binaryBody } from './bodies.js';
import { buildBenchModels } from './models.js';
import { cpuSeconds, startNereid } from './processes.js';
import { runWrk } from './wrk.js';

const variant = process.argv[2] ?? 'file1';
const seconds = Number(process.argv[3] ?? 5);
const dir = process.env.PROFILE_DIR ?? mkdtempSync(path.join(tmpdir(), 'nereid-trace-prof-'));
mkdirSync(dir, { recursive: true });
/** OTLP body bytes received: per request, it shows the spans the export thread dropped (about 750 when none). */
let otlpBytes = 0;
const server = http.createServer((req, res) => {
  req.on('data', (chunk: Buffer) => (otlpBytes += chunk.length));
  req.on('end', () => res.writeHead(200, { 'Content-Type': 'application/x-protobuf' }).end());
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const receiver = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`;
const LEVEL = '--trace-config=level=TIMESTAMPS';
const flags: Record<string, string[]> = {
  off: [],
  file1000: [`--trace-config=triton,file=${dir}/r1000.json`, LEVEL, '--trace-config=rate=1000'],
  file1: [`--trace-config=triton,file=${dir}/r1.json`, '--trace-config=triton,log-frequency=1000', LEVEL,
    '--trace-config=rate=1'],
  otlp: ['--trace-config=mode=opentelemetry', `--trace-config=opentelemetry,url=${receiver}`, LEVEL,
    '--trace-config=rate=1'],
};
const [tiny] = await buildBenchModels();
const model = tiny!;
// NODE_ARGS: other flags for the server's node instead of --cpu-prof (its standard output goes to $dir/stdout.txt).
const nodeArgs = process.env.NODE_ARGS?.split(' ').filter((a) => a !== '');
const s = await startNereid(model.repository, ['--allow-metrics=false', ...flags[variant]!], {
  nodeArgs: nodeArgs ?? (process.env.NO_PROF ? [] : ['--cpu-prof', `--cpu-prof-dir=${dir}`]),
  onStdout: nodeArgs === undefined ? undefined : (text) => appendFileSync(path.join(dir, 'stdout.txt'), text),
});
const body = binaryBody(model.inputName, model.outputName, model.inputSize);
const url = `http://127.0.0.1:${s.http}/v2/models/${model.batchedName}/infer`;
await runWrk(url, body, 32, 1);
const pid = s.proc.child.pid!;
/** CPU seconds of each thread of the server, by thread id (the export thread is one of them). */
const threads = (): Map<number, number> => {
  const m = new Map<number, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) m.set(Number(tid), cpuSeconds(pid, Number(tid)));
  return m;
};
const [all0, main0, t0, bytes0] = [cpuSeconds(pid), cpuSeconds(pid, pid), threads(), otlpBytes];
const r = await runWrk(url, body, 32, seconds);
const [all1, main1, t1, bytes1] = [cpuSeconds(pid), cpuSeconds(pid, pid), threads(), otlpBytes];
const busy = [...t1]
  .map(([tid, cpu]) => [tid, cpu - (t0.get(tid) ?? 0)] as const)
  .filter(([tid, cpu]) => tid !== pid && cpu * 1e6 >= r.requests) // ≥ 1 µs per request
  .sort((a, b) => b[1] - a[1])
  .map(([tid, cpu]) => {
    const comm = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
    return `${comm} ${((cpu * 1e6) / r.requests).toFixed(1)}`;
  });
await s.proc.stop();
server.close();
const per = (cpu: number): string => ((cpu * 1e6) / r.requests).toFixed(1);
process.stdout.write(
  `${variant}: ${r.requestsPerSec.toFixed(0)} req/s; CPU µs/request: process ${per(all1 - all0)}, ` +
    `main thread ${per(main1 - main0)}; other threads ${busy.join(', ')}; ` +
    `OTLP bytes/request ${((bytes1 - bytes0) / r.requests).toFixed(0)}; profile in ${dir}\n`,
);
