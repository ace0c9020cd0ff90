/**
 * The load tool's own ceiling: `nereid perf` and wrk drive the same trivial
 * node:http server (it answers every infer with a fixed reply) with the same
 * request bytes, at the same concurrency, each pinned to the same CPU core,
 * in one run. The bar: nereid perf reaches >= 0.8x wrk's request rate.
 * Then the same over gRPC: `nereid perf -i grpc` and h2load (one HTTP/2
 * connection, as many streams as the concurrency) against a trivial grpc-js
 * server answering ModelInfer with a fixed reply.
 *
 * Usage: node dist/bench/load-tool.js [http] [grpc]
 *   (BENCH_SECONDS, BENCH_CONCURRENCY, BENCH_ROUNDS, BENCH_PIN=0)
 * The servers run as `load-tool.js --serve <port> <workers>` / `--serve-grpc <port>` child processes.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import cluster from 'node:cluster';
import { mkdtempSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { createServer } from 'node:net';
import { availableParallelism, tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { create, toBinary } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import { encodeHttpInferBody } from '../src/cli/perf/http-body.js';
import {
  ModelConfigResponseSchema,
  ModelInferRequestSchema,
  ModelInferResponseSchema,
  ModelMetadataResponseSchema,
  ModelStreamInferResponseSchema,
  ServerMetadataResponseSchema,
} from '../src/gen/grpc_service_pb.js';

const SELF = fileURLToPath(import.meta.url);
const PERF_INDEX = path.join(path.dirname(SELF), '..', 'src', 'cli', 'perf', 'index.js');
const MODEL = 'trivial';
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

// ---- the trivial server -------------------------------------------------------------------------

function serve(port: number, workers: number): void {
  if (cluster.isPrimary && workers > 1) {
    for (let i = 0; i < workers; i++) cluster.fork();
    process.on('SIGTERM', () => {
      for (const w of Object.values(cluster.workers ?? {})) w?.kill();
      process.exit(0);
    });
    return;
  }
  if (cluster.isWorker) process.on('disconnect', () => process.exit(0));
  const json = (obj: unknown) => Buffer.from(JSON.stringify(obj));
  const routes = new Map<string, Buffer>([
    ['/v2', json({ name: 'trivial', version: '0', extensions: ['binary_tensor_data'] })],
    [
      `/v2/models/${MODEL}`,
      json({
        name: MODEL,
        versions: ['1'],
        platform: 'trivial',
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [-1, 16] },
          { name: 'INPUT1', datatype: 'INT32', shape: [-1, 16] },
        ],
        outputs: [{ name: 'OUTPUT0', datatype: 'INT32', shape: [-1, 16] }],
      }),
    ],
    [`/v2/models/${MODEL}/config`, json({ name: MODEL, max_batch_size: 8 })],
  ]);
  const outJson = json({
    model_name: MODEL,
    model_version: '1',
    outputs: [{ name: 'OUTPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } }],
  });
  const reply = Buffer.concat([outJson, Buffer.alloc(64)]);
  const replyHeaders = {
    'content-type': 'application/octet-stream',
    'inference-header-content-length': String(outJson.length),
    'content-length': String(reply.length),
  };
  http
    .createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        if (req.method === 'POST') {
          res.writeHead(200, replyHeaders);
          res.end(reply);
          return;
        }
        const body = routes.get(req.url ?? '');
        res.writeHead(body ? 200 : 404, {
          'content-type': 'application/json',
          'content-length': String(body?.length ?? 2),
        });
        res.end(body ?? '{}');
      });
    })
    .listen(port, '127.0.0.1');
}


function serveGrpc(port: number): void {
  const identity = (b: Buffer) => b;
  const method = (name: string, responseStream = false, requestStream = false) => ({
    path: `/inference.GRPCInferenceService/${name}`,
    requestStream,
    responseStream,
    requestSerialize: identity,
    requestDeserialize: identity,
    responseSerialize: identity,
    responseDeserialize: identity,
  });
  const bytes = (b: Uint8Array) => Buffer.from(b);
  const serverMetadata = bytes(
    toBinary(ServerMetadataResponseSchema, create(ServerMetadataResponseSchema, { name: 'trivial', version: '0' })),
  );
  const tensor = (name: string) => ({ name, datatype: 'INT32', shape: [-1n, 16n] });
  const metadata = bytes(
    toBinary(
      ModelMetadataResponseSchema,
      create(ModelMetadataResponseSchema, {
        name: MODEL,
        versions: ['1'],
        platform: 'trivial',
        inputs: [tensor('INPUT0'), tensor('INPUT1')],
        outputs: [tensor('OUTPUT0')],
      }),
    ),
  );
  const config = bytes(
    toBinary(
      ModelConfigResponseSchema,
      create(ModelConfigResponseSchema, { config: { name: MODEL, maxBatchSize: 8 } }),
    ),
  );
  const inferResponse = create(ModelInferResponseSchema, {
    modelName: MODEL,
    modelVersion: '1',
    outputs: [{ name: 'OUTPUT0', datatype: 'INT32', shape: [1n, 16n] }],
    rawOutputContents: [new Uint8Array(64)],
  });
  const infer = bytes(toBinary(ModelInferResponseSchema, inferResponse));
  const streamInfer = bytes(
    toBinary(ModelStreamInferResponseSchema, create(ModelStreamInferResponseSchema, { inferResponse })),
  );
  type Unary = grpc.handleUnaryCall<Buffer, Buffer>;
  const fixed = (reply: Buffer): Unary => (_call, callback) => callback(null, reply);
  const server = new grpc.Server();
  server.addService(
    {
      ServerMetadata: method('ServerMetadata'),
      ModelMetadata: method('ModelMetadata'),
      ModelConfig: method('ModelConfig'),
      ModelInfer: method('ModelInfer'),
      ModelStreamInfer: method('ModelStreamInfer', true, true),
    },
    {
      ServerMetadata: fixed(serverMetadata),
      ModelMetadata: fixed(metadata),
      ModelConfig: fixed(config),
      ModelInfer: fixed(infer),
      ModelStreamInfer: ((call: grpc.ServerDuplexStream<Buffer, Buffer>) => {
        call.on('data', () => call.write(streamInfer));
        call.on('end', () => call.end());
      }) as grpc.handleBidiStreamingCall<Buffer, Buffer>,
    },
  );
  server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (err) => {
    if (err) throw err;
  });
}

// ---- the benchmark ------------------------------------------------------------------------------

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

async function waitForServer(port: number): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const ok = await new Promise<boolean>((resolve) => {
      http.get({ host: '127.0.0.1', port, path: '/v2' }, (res) => {
        res.resume();
        resolve(res.statusCode === 200);
      }).on('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('trivial server did not start');
}

function capture(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    p.stdout.on('data', (d) => (text += d));
    p.stderr.on('data', (d) => (text += d));
    p.on('error', reject);
    p.on('close', () => resolve(text));
  });
}

function luaString(buf: Buffer): string {
  let s = '"';
  for (const b of buf) s += b >= 0x20 && b < 0x7f && b !== 0x22 && b !== 0x5c ? String.fromCharCode(b) : `\\${b}`;
  return `${s}"`;
}

interface RunResult {
  rps: number;
  p50us: number;
  p99us: number;
  errors: number;
  cpuUsPerRequest: number;
}

async function runWrk(
  cpu: string,
  url: string,
  body: Buffer,
  headerLength: number,
  connections: number,
  seconds: number,
): Promise<RunResult> {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-loadtool-'));
  const file = path.join(dir, 'req.lua');
  writeFileSync(
    file,
    `wrk.method = "POST"
wrk.body = ${luaString(body)}
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Inference-Header-Content-Length"] = "${headerLength}"
function done(summary, latency, requests)
  io.write(string.format("WRK_RESULT %f %f %f %d %d\\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(99),
    summary.errors.status + summary.errors.connect + summary.errors.read, summary.requests))
end
`,
  );
  // GNU time reports wrk's CPU seconds, for the CPU cost per request.
  const wrkArgs = ['taskset', '-c', cpu, 'wrk', '-t1', `-c${connections}`, `-d${seconds}s`, '-s', file, url];
  // Without GNU time on PATH the CPU column is left empty.
  const out = await capture('time', ['-f', 'CPU_SECONDS %U %S', ...wrkArgs]).catch(() =>
    capture(wrkArgs[0]!, wrkArgs.slice(1)),
  );
  const m = /WRK_RESULT (\S+) (\S+) (\S+) (\d+) (\d+)/.exec(out);
  const t = /CPU_SECONDS (\S+) (\S+)/.exec(out);
  if (!m) throw new Error(`wrk produced no result:\n${out}`);
  const cpuUs = t ? (Number(t[1]) + Number(t[2])) * 1e6 : Number.NaN;
  return {
    rps: Number(m[1]),
    p50us: Number(m[2]),
    p99us: Number(m[3]),
    errors: Number(m[4]),
    cpuUsPerRequest: cpuUs / Number(m[5]),
  };
}


/** h2load drives gRPC's ModelInfer: one HTTP/2 connection carrying `streams` concurrent calls. */
async function runH2load(
  cpu: string,
  port: number,
  message: Uint8Array,
  streams: number,
  seconds: number,
): Promise<RunResult> {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-loadtool-'));
  const file = path.join(dir, 'req.bin');
  const frame = Buffer.alloc(5 + message.byteLength);
  frame.writeUInt32BE(message.byteLength, 1);
  frame.set(message, 5);
  writeFileSync(file, frame);
  const args = [
    'taskset',
    '-c',
    cpu,
    'h2load',
    '-c1',
    `-m${streams}`,
    `-D${seconds}`,
    '-H',
    'content-type: application/grpc',
    '-H',
    'te: trailers',
    '-d',
    file,
    `http://127.0.0.1:${port}/inference.GRPCInferenceService/ModelInfer`,
  ];
  const out = await capture('time', ['-f', 'CPU_SECONDS %U %S', ...args]).catch(() => capture(args[0]!, args.slice(1)));
  const rps = /finished in \S+, (\S+) req\/s/.exec(out);
  const done = /requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded/.exec(out);
  const t = /CPU_SECONDS (\S+) (\S+)/.exec(out);
  if (!rps || !done) throw new Error(`h2load produced no result:\n${out}`);
  const lat = /time for request:\s+(\S+)\s+(\S+)\s+(\S+)/.exec(out);
  const toUs = (v: string | undefined) =>
    v === undefined
      ? Number.NaN
      : v.endsWith('ms')
        ? Number.parseFloat(v) * 1000
        : v.endsWith('us')
          ? Number.parseFloat(v)
          : Number.parseFloat(v) * 1e6;
  const cpuUs = t ? (Number(t[1]) + Number(t[2])) * 1e6 : Number.NaN;
  return {
    rps: Number(rps[1]),
    p50us: toUs(lat?.[3]),
    p99us: toUs(lat?.[2]),
    errors: Number(done[1]) - Number(done[2]),
    cpuUsPerRequest: cpuUs / Number(done[1]),
  };
}

async function runNereidPerf(
  cpuList: string,
  port: number,
  connections: number,
  seconds: number,
  extra: string[] = [],
): Promise<RunResult> {
  // Three windows of `seconds / 3.6` (each window lasts 1.2x the interval), stability not required.
  const intervalMs = Math.max(200, Math.round((seconds * 1000) / 3.6));
  const args = [
    '-m',
    MODEL,
    '-u',
    `127.0.0.1:${port}`,
    '--concurrency-range',
    String(connections),
    '-p',
    String(intervalMs),
    '-r',
    '3',
    '-s',
    '1000000',
    ...extra,
  ];
  // A short first run warms the JIT; CPU is counted over the measured run only and divided by its requests.
  const warm = [
    '-m',
    MODEL,
    '-u',
    `127.0.0.1:${port}`,
    '--concurrency-range',
    String(connections),
    '-p',
    '300',
    '-r',
    '1',
    '-s',
    '1000000',
    ...extra,
  ];
  const script = `const m = await import(${JSON.stringify(PERF_INDEX)});
await m.runPerf(${JSON.stringify(warm)}, { stdout: { write() {} }, stderr: process.stderr });
const c0 = process.cpuUsage();
const code = await m.runPerf(${JSON.stringify(args)}); const c = process.cpuUsage(c0);
console.log('CPU_US', c.user + c.system); process.exit(code);`;
  const out = await capture('taskset', ['-c', cpuList, process.execPath, '--input-type=module', '-e', script]);
  const rps = /Concurrency: \d+, throughput: (\S+) infer\/sec/.exec(out);
  const p50 = /p50 latency: (\d+) usec/.exec(out);
  const p99 = /p99 latency: (\d+) usec/.exec(out);
  const count = /Request count: (\d+)/.exec(out);
  const cpu = /CPU_US (\d+)/.exec(out);
  if (!rps) throw new Error(`nereid perf produced no result:\n${out}`);
  return {
    rps: Number(rps[1]),
    p50us: Number(p50?.[1]),
    p99us: Number(p99?.[1]),
    errors: 0,
    cpuUsPerRequest: Number(cpu?.[1]) / Number(count?.[1]),
  };
}

function report(title: string, baseline: string, rounds: Array<{ base: RunResult; ours: RunResult }>): void {
  const fmt = (n: number) => n.toLocaleString('en-US', { maximumFractionDigits: 0 });
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const ratio = median(rounds.map((r) => r.ours.rps / r.base.rps));
  const baseCpu = median(rounds.map((r) => r.base.cpuUsPerRequest));
  const oursCpu = median(rounds.map((r) => r.ours.cpuUsPerRequest));
  const w = Math.max(13, baseline.length + 6);
  let text =
    `\n${title}\n` +
    `round   ${`${baseline} req/s`.padStart(w)}   nereid perf req/s   ratio   ` +
    `${`${baseline} p50/p99 us`.padStart(16)}   perf p50/p99 us   CPU us/req ${baseline} / perf\n`;
  rounds.forEach((r, i) => {
    text +=
      `${String(i + 1).padStart(5)}   ${fmt(r.base.rps).padStart(w)}   ` +
      `${fmt(r.ours.rps).padStart(17)}   ${(r.ours.rps / r.base.rps).toFixed(2).padStart(5)}` +
      `   ${`${Math.round(r.base.p50us)}/${Math.round(r.base.p99us)}`.padStart(16)} ` +
      `  ${`${r.ours.p50us}/${r.ours.p99us}`.padStart(15)}` +
      `   ${r.base.cpuUsPerRequest.toFixed(1).padStart(8)} / ${r.ours.cpuUsPerRequest.toFixed(1)}\n`;
  });
  text +=
    `median ratio nereid perf / ${baseline}: ${ratio.toFixed(2)}  ${
      baseline.startsWith('wrk')
        ? `(bar: >= 0.80) ${ratio >= 0.8 ? 'PASS' : 'BELOW BAR'}`
        : '(reported against h2load; no bar)'
    }\n` + `median CPU per request: ${baseline} ${baseCpu.toFixed(1)} us, nereid perf ${oursCpu.toFixed(1)} us\n`;
  const errors = rounds.reduce((a, r) => a + r.base.errors, 0);
  if (errors > 0) text += `note: ${baseline} saw ${errors} failed requests\n`;
  process.stdout.write(text);
}

async function main(): Promise<void> {
  const seconds = Number(process.env.BENCH_SECONDS ?? 4);
  const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 32);
  const pin = process.env.BENCH_PIN !== '0';
  const sections = process.argv.slice(2);
  const want = (name: string) => sections.length === 0 || sections.includes(name);
  const cpus = availableParallelism();
  // One core for the load generators, the rest for the server (at least one, shared if the machine has one).
  // BENCH_PIN=0 lets every process use every core.
  const clientCpu = pin ? '0' : `0-${cpus - 1}`;
  const serverCpus = pin && cpus > 1 ? `1-${cpus - 1}` : `0-${cpus - 1}`;
  const zeros = new Uint8Array(64);
  const inputs = [
    { name: 'INPUT0', datatype: 'INT32' as const, shape: [1, 16], data: zeros },
    { name: 'INPUT1', datatype: 'INT32' as const, shape: [1, 16], data: zeros },
  ];

  if (want('http')) {
    const workers = Math.max(1, cpus - 1);
    const port = await freePort();
    const server: ChildProcess = spawn(
      'taskset',
      ['-c', serverCpus, process.execPath, SELF, '--serve', String(port), String(workers)],
      {
        stdio: 'inherit',
      },
    );
    try {
      await waitForServer(port);
      const req = encodeHttpInferBody(inputs, ['OUTPUT0'], 'binary', 'binary');
      const url = `http://127.0.0.1:${port}/v2/models/${MODEL}/infer`;
      // Alternate, so a change in background load hits both tools alike; the median round decides.
      const rounds: Array<{ base: RunResult; ours: RunResult }> = [];
      for (let i = 0; i < ROUNDS; i++) {
        const base = await runWrk(clientCpu, url, req.body, req.headerLength!, concurrency, seconds);
        const ours = await runNereidPerf(clientCpu, port, concurrency, seconds);
        rounds.push({ base, ours });
      }
      report(
        `HTTP: trivial node:http server (${workers} worker(s) on ` +
        `CPU ${serverCpus}), load generators on CPU ${clientCpu}, ` +
          `concurrency ${concurrency}, ${seconds}s per run`,
        'wrk -t1',
        rounds,
      );
    } finally {
      server.kill('SIGTERM');
    }
  }

  if (want('grpc')) {
    const port = await freePort();
    const server: ChildProcess = spawn(
      'taskset',
      ['-c', serverCpus, process.execPath, SELF, '--serve-grpc', String(port)],
      { stdio: 'inherit' },
    );
    try {
      await new Promise((r) => setTimeout(r, 1000));
      const message = toBinary(
        ModelInferRequestSchema,
        create(ModelInferRequestSchema, {
          modelName: MODEL,
          inputs: inputs.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape.map((d) => BigInt(d)) })),
          outputs: [{ name: 'OUTPUT0' }],
          rawInputContents: inputs.map((t) => t.data),
        }),
      );
      const rounds: Array<{ base: RunResult; ours: RunResult }> = [];
      for (let i = 0; i < ROUNDS; i++) {
        const base = await runH2load(clientCpu, port, message, concurrency, seconds);
        const ours = await runNereidPerf(clientCpu, port, concurrency, seconds, ['-i', 'grpc']);
        rounds.push({ base, ours });
      }
      report(
        `gRPC: trivial grpc-js server (CPU ${serverCpus}), load generators on CPU ${clientCpu}, ` +
          `${concurrency} concurrent ModelInfer calls on one connection, ${seconds}s per run`,
        'h2load',
        rounds,
      );
    } finally {
      server.kill('SIGTERM');
    }
  }
}

if (process.argv[2] === '--serve') serve(Number(process.argv[3]), Number(process.argv[4] ?? 1));
else if (process.argv[2] === '--serve-grpc') serveGrpc(Number(process.argv[3]));
else await main();
