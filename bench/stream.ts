/**
 * `node dist/bench/stream.js` (section `stream` of bench/run.ts): how fast
 * the responses of a decoupled Python model reach a client. The model
 * sends N small responses (one INT32 each) from execute(), then the final
 * flag; the client times one request from sending it to the final flag,
 * over gRPC ModelStreamInfer (with the empty final response asked for) with
 * three clients: grpc-js (what Node applications use; it builds an object
 * and an event per message), a bare node:http2 stream that walks the
 * message prefixes and decodes only the first and the last message, and
 * h2load (a C client); and over HTTP generate_stream (Server-Sent Events,
 * counted by their blank line). Beside responses/s (which swings with the
 * machine's load) it reports the CPU time per response of the server's
 * event loop, of the Python worker and of the client. Bar: 1,000 responses
 * at >= 20,000 responses/s on both transports.
 *
 * Environment: NEREID_PYTHON (default /usr/bin/python3), BENCH_STREAM_RESPONSES
 * (default 1000), BENCH_STREAM_RUNS (streams per transport, default 10).
 */
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import http2 from 'node:http2';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { ModelInferRequestSchema, ModelStreamInferResponseSchema } from '../src/gen/grpc_service_pb.js';
import { inferenceServiceDefinition } from '../src/frontends/grpc/index.js';
import { spawnSync } from 'node:child_process';
import { grpcFrame } from './grpc.js';
import { startNereid } from './processes.js';

const PYTHON = process.env.NEREID_PYTHON ?? process.env.NEREID_TEST_PYTHON ?? '/usr/bin/python3';
const N = Number(process.env.BENCH_STREAM_RESPONSES ?? 1000);
const RUNS = Number(process.env.BENCH_STREAM_RUNS ?? 10);

const MODEL_PY = `import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(n):
                out = pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
`;

const CONFIG = `name: "stream_counter"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`;

/** The stream request: N responses, and the empty final response asked for so that the client sees the end. */
function streamRequest() {
  return create(ModelInferRequestSchema, {
    modelName: 'stream_counter',
    inputs: [{ name: 'COUNT', datatype: 'INT32', shape: [1n] }],
    rawInputContents: [new Uint8Array(new Int32Array([N]).buffer)],
    parameters: { triton_enable_empty_final_response: { parameterChoice: { case: 'boolParam', value: true } } },
  });
}

function grpcStream(client: grpc.Client): Promise<{ responses: number; ms: number }> {
  const request = streamRequest();
  return new Promise((resolve, reject) => {
    const call = client.makeBidiStreamRequest(
      '/inference.GRPCInferenceService/ModelStreamInfer',
      (m: Uint8Array) => Buffer.from(m),
      (b: Buffer) => b,
    );
    // Decoding every message would measure the client: count them, decode the first and the last.
    let messages = 0;
    const t0 = performance.now();
    call.on('data', (b: Buffer) => {
      messages++;
      if (messages === 1) {
        const first = fromBinary(ModelStreamInferResponseSchema, b);
        if (first.errorMessage) reject(new Error(first.errorMessage));
      }
      if (messages < N + 1) return;
      const ms = performance.now() - t0;
      const last = fromBinary(ModelStreamInferResponseSchema, b);
      const fin = last.inferResponse?.parameters['triton_final_response']?.parameterChoice;
      if (fin?.case !== 'boolParam' || !fin.value || last.inferResponse!.outputs.length !== 0) {
        reject(new Error('the last message is not the empty final response'));
      }
      call.end();
      resolve({ responses: messages - 1, ms });
    });
    call.on('error', reject);
    call.write(toBinary(ModelInferRequestSchema, request));
  });
}

/**
 * Counts the gRPC messages of a ModelStreamInfer call on a bare HTTP/2
 * stream (node:http2): the 5-byte length prefixes are walked chunk by chunk
 * and only the first and the last message are decoded, so the client costs
 * little beside grpc-js, which builds a message object and an event per
 * response.
 */
class GrpcMessageCounter {
  messages = 0;
  /** Bytes of the current message still to come (its prefix included). */
  private remaining = 0;
  private prefix = Buffer.alloc(5);
  private prefixHave = 0;
  private capture: Buffer | undefined;
  private captured = 0;
  first: Buffer | undefined;
  last: Buffer | undefined;

  constructor(private readonly lastIndex: number) {}

  push(chunk: Buffer): void {
    let at = 0;
    while (at < chunk.length) {
      if (this.remaining === 0) {
        const take = Math.min(5 - this.prefixHave, chunk.length - at);
        chunk.copy(this.prefix, this.prefixHave, at, at + take);
        this.prefixHave += take;
        at += take;
        if (this.prefixHave < 5) return;
        this.prefixHave = 0;
        this.remaining = this.prefix.readUInt32BE(1);
        this.messages++;
        const keep = this.messages === 1 || this.messages === this.lastIndex;
        this.capture = keep ? Buffer.allocUnsafe(this.remaining) : undefined;
        this.captured = 0;
        if (this.remaining === 0) this.finishMessage();
        continue;
      }
      const take = Math.min(this.remaining, chunk.length - at);
      if (this.capture) chunk.copy(this.capture, this.captured, at, at + take);
      this.captured += take;
      this.remaining -= take;
      at += take;
      if (this.remaining === 0) this.finishMessage();
    }
  }

  private finishMessage(): void {
    if (this.capture === undefined) return;
    if (this.messages === 1) this.first = this.capture;
    if (this.messages === this.lastIndex) this.last = this.capture;
    this.capture = undefined;
  }
}

function rawGrpcStream(session: http2.ClientHttp2Session, body: Buffer): Promise<{ responses: number; ms: number }> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const counter = new GrpcMessageCounter(N + 1);
    const req = session.request({
      ':method': 'POST',
      ':path': '/inference.GRPCInferenceService/ModelStreamInfer',
      'content-type': 'application/grpc',
      te: 'trailers',
    });
    req.on('data', (chunk: Buffer) => counter.push(chunk));
    req.on('end', () => {
      const ms = performance.now() - t0;
      const first = counter.first && fromBinary(ModelStreamInferResponseSchema, counter.first);
      if (first?.errorMessage) return reject(new Error(first.errorMessage));
      const last = counter.last && fromBinary(ModelStreamInferResponseSchema, counter.last);
      const fin = last?.inferResponse?.parameters['triton_final_response']?.parameterChoice;
      if (fin?.case !== 'boolParam' || !fin.value || last!.inferResponse!.outputs.length !== 0) {
        return reject(new Error('the last message is not the empty final response'));
      }
      resolve({ responses: counter.messages - 1, ms });
    });
    req.on('error', reject);
    req.end(body);
  });
}

function sseStream(port: number): Promise<{ responses: number; ms: number }> {
  const body = JSON.stringify({ COUNT: N });
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/v2/models/stream_counter/generate_stream',
        headers: { 'Content-Length': String(body.length) },
      },
      (res) => {
        let responses = 0;
        let tail = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          const text = tail + chunk;
          let from = 0;
          for (;;) {
            const i = text.indexOf('\n\n', from);
            if (i === -1) break;
            responses++;
            from = i + 2;
          }
          tail = text.slice(from);
        });
        res.on('end', () => resolve({ responses, ms: performance.now() - t0 }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * The same stream driven by h2load (a C HTTP/2 client, so the client's own
 * cost hardly counts): one framed request per ModelStreamInfer call,
 * half-closed at once; the server ends the call after the final flag.
 * Returns responses per second over `calls` calls, one at a time.
 */
function h2loadStreams(port: number, calls: number): number | undefined {
  const request = create(ModelInferRequestSchema, {
    modelName: 'stream_counter',
    inputs: [{ name: 'COUNT', datatype: 'INT32', shape: [1n] }],
    rawInputContents: [new Uint8Array(new Int32Array([N]).buffer)],
  });
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-h2load-stream-'));
  const file = path.join(dir, 'body.bin');
  writeFileSync(file, grpcFrame(toBinary(ModelInferRequestSchema, request)));
  const r = spawnSync(
    'h2load',
    [
      '-t1',
      '-c1',
      '-m1',
      `-n${calls}`,
      `-d${file}`,
      '-H',
      'content-type: application/grpc',
      '-H',
      'te: trailers',
      `http://127.0.0.1:${port}/inference.GRPCInferenceService/ModelStreamInfer`,
    ],
    { encoding: 'utf8' },
  );
  rmSync(dir, { recursive: true, force: true });
  const done = /requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded/.exec(r.stdout ?? '');
  const took = /finished in ([\d.]+)(ms|s),/.exec(r.stdout ?? '');
  if (!done || !took || Number(done[2]) !== calls) return undefined;
  const seconds = Number(took[1]) / (took[2] === 'ms' ? 1000 : 1);
  return (calls * N) / seconds;
}

/** CPU time (ns) the main thread of process `pid` has run: its event loop, for a Node process. */
function mainThreadCpuNs(pid: number): number {
  try {
    return Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
  } catch {
    return NaN;
  }
}

/** The Python worker of the server (its only child running the stub). */
function stubPid(serverPid: number): number | undefined {
  try {
    for (const c of readFileSync(`/proc/${serverPid}/task/${serverPid}/children`, 'utf8').trim().split(/\s+/)) {
      if (readFileSync(`/proc/${c}/cmdline`, 'utf8').includes('nereid_stub')) return Number(c);
    }
  } catch {
    // not Linux: no CPU figures
  }
  return undefined;
}

/** µs of CPU per response of the server's event loop and of the Python worker while `work` runs. */
async function cpuPerResponse<T>(
  serverPid: number,
  responses: number,
  work: () => Promise<T>,
): Promise<{ result: T; serverUs: number; pythonUs: number }> {
  const py = stubPid(serverPid);
  const s0 = mainThreadCpuNs(serverPid);
  const p0 = py === undefined ? NaN : mainThreadCpuNs(py);
  const result = await work();
  const serverUs = (mainThreadCpuNs(serverPid) - s0) / 1000 / responses;
  const pythonUs = py === undefined ? NaN : (mainThreadCpuNs(py) - p0) / 1000 / responses;
  return { result, serverUs, pythonUs };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

const repo = mkdtempSync(path.join(tmpdir(), 'nereid-bench-stream-'));
mkdirSync(path.join(repo, 'stream_counter', '1'), { recursive: true });
writeFileSync(path.join(repo, 'stream_counter', '1', 'model.py'), MODEL_PY);
writeFileSync(path.join(repo, 'stream_counter', 'config.pbtxt'), CONFIG);
const nereid = await startNereid(repo, [`--backend-config=python,python-executable=${PYTHON}`]);
const Client = grpc.makeGenericClientConstructor({}, 'GRPCInferenceService');
const client = new Client(`127.0.0.1:${nereid.grpc}`, grpc.credentials.createInsecure());
const session = http2.connect(`http://127.0.0.1:${nereid.grpc}`);
const rawBody = grpcFrame(toBinary(ModelInferRequestSchema, streamRequest()));
void inferenceServiceDefinition;
try {
  const pid = nereid.proc.child.pid!;
  const rows: Array<[string, number[], number, number, number]> = [];
  for (const [label, run] of [
    ['gRPC, grpc-js client', () => grpcStream(client)],
    ['gRPC, node:http2 client', () => rawGrpcStream(session, rawBody)],
    ['HTTP generate_stream (SSE)', () => sseStream(nereid.http)],
  ] as const) {
    await run(); // warm-up
    const rates: number[] = [];
    const client0 = process.cpuUsage();
    const { serverUs, pythonUs } = await cpuPerResponse(pid, RUNS * N, async () => {
      for (let i = 0; i < RUNS; i++) {
        const r = await run();
        if (r.responses !== N) throw new Error(`${label}: ${r.responses} responses, expected ${N}`);
        rates.push((r.responses / r.ms) * 1000);
      }
    });
    const c = process.cpuUsage(client0);
    rows.push([label, rates, serverUs, pythonUs, (c.user + c.system) / (RUNS * N)]);
  }
  h2loadStreams(nereid.grpc, 2); // warm-up
  const h2 = await cpuPerResponse(pid, RUNS * N, async () => h2loadStreams(nereid.grpc, RUNS));
  const viaH2load = h2.result;
  process.stdout.write(
    `\nDecoupled Python model, ${N} responses per request (one ` +
    `INT32 each), ${RUNS} streams per transport, one at a time\n`,
  );
  process.stdout.write(
    `${'transport'.padEnd(30)}${'median resp/s'.padStart(15)}${'min'.padStart(10)}${'max'.padStart(10)}` +
    `${'bar'.padStart(10)}${'server us/resp'.padStart(16)}` +
    `${'python us/resp'.padStart(16)}${'client us/resp'.padStart(16)}\n`,
  );
  const us = (x: number): string => (Number.isFinite(x) ? x.toFixed(1) : '-').padStart(16);
  for (const [label, rates, serverUs, pythonUs, clientUs] of rows) {
    const med = median(rates);
    process.stdout.write(
      `${label.padEnd(30)}${med.toFixed(0).padStart(15)}` +
        `${Math.min(...rates).toFixed(0).padStart(10)}${Math.max(...rates).toFixed(0).padStart(10)}` +
        `${(med >= 20000 ? 'met' : 'NOT met').padStart(10)}${us(serverUs)}${us(pythonUs)}${us(clientUs)}\n`,
    );
  }
  process.stdout.write(
    viaH2load === undefined
      ? 'gRPC, h2load client: no result (is h2load installed?)\n'
      : `gRPC, h2load client (${RUNS} calls in a row, mean): ${viaH2load.toFixed(0)} resp/s (bar: ` +
        `${viaH2load >= 20000 ? 'met' : 'NOT met'}); server ${h2.serverUs.toFixed(1)} ` +
        `us/resp, python ${h2.pythonUs.toFixed(1)} us/resp\n`,
  );
  process.stdout.write(
    "us/resp: CPU time per response of the server's event-loop thread, of the Python worker and of this " +
    "client process (Linux schedstat); unlike resp/s it hardly moves with the load of the machine\n",
  );
} finally {
  client.close();
  session.close();
  await nereid.proc.stop();
  rmSync(repo, { recursive: true, force: true });
}
