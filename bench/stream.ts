/**
 * `node dist/bench/stream.js` (section `stream` of bench/run.ts): how fast
 * the responses of a decoupled Python model reach a client. The model
 * sends N small responses (one INT32 each) from execute(), then the final
 * flag; the client times one request from sending it to the final flag,
 * over gRPC ModelStreamInfer (grpc-js, with the empty final response asked
 * for; the client counts messages and decodes the first and the last) and
 * over HTTP generate_stream (Server-Sent Events, counted by their blank line). Bar: 1,000
 * responses at >= 20,000 responses/s on both.
 *
 * Environment: NEREID_PYTHON (default /usr/bin/python3), BENCH_STREAM_RESPONSES
 * (default 1000), BENCH_STREAM_RUNS (streams per transport, default 10).
 */
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
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

function grpcStream(client: grpc.Client): Promise<{ responses: number; ms: number }> {
  const request = create(ModelInferRequestSchema, {
    modelName: 'stream_counter',
    inputs: [{ name: 'COUNT', datatype: 'INT32', shape: [1n] }],
    rawInputContents: [new Uint8Array(new Int32Array([N]).buffer)],
    parameters: { triton_enable_empty_final_response: { parameterChoice: { case: 'boolParam', value: true } } },
  });
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

function sseStream(port: number): Promise<{ responses: number; ms: number }> {
  const body = JSON.stringify({ COUNT: N });
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const req = http.request(
      { host: '127.0.0.1', port, method: 'POST', path: '/v2/models/stream_counter/generate_stream', headers: { 'Content-Length': String(body.length) } },
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
    ['-t1', '-c1', '-m1', `-n${calls}`, `-d${file}`, '-H', 'content-type: application/grpc', '-H', 'te: trailers', `http://127.0.0.1:${port}/inference.GRPCInferenceService/ModelStreamInfer`],
    { encoding: 'utf8' },
  );
  rmSync(dir, { recursive: true, force: true });
  const done = /requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded/.exec(r.stdout ?? '');
  const took = /finished in ([\d.]+)(ms|s),/.exec(r.stdout ?? '');
  if (!done || !took || Number(done[2]) !== calls) return undefined;
  const seconds = Number(took[1]) / (took[2] === 'ms' ? 1000 : 1);
  return (calls * N) / seconds;
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
void inferenceServiceDefinition;
try {
  const rows: Array<[string, number[], number]> = [];
  for (const [label, run] of [
    ['gRPC ModelStreamInfer', () => grpcStream(client)],
    ['HTTP generate_stream (SSE)', () => sseStream(nereid.http)],
  ] as const) {
    await run(); // warm-up
    const rates: number[] = [];
    let count = 0;
    for (let i = 0; i < RUNS; i++) {
      const r = await run();
      count = r.responses;
      if (r.responses !== N) throw new Error(`${label}: ${r.responses} responses, expected ${N}`);
      rates.push((r.responses / r.ms) * 1000);
    }
    rows.push([label, rates, count]);
  }
  h2loadStreams(nereid.grpc, 2); // warm-up
  const viaH2load = h2loadStreams(nereid.grpc, RUNS);
  process.stdout.write(`\nDecoupled Python model, ${N} responses per request (one INT32 each), ${RUNS} streams per transport, one at a time\n`);
  process.stdout.write(`${'transport'.padEnd(30)}${'median resp/s'.padStart(15)}${'min'.padStart(10)}${'max'.padStart(10)}${'bar'.padStart(10)}\n`);
  for (const [label, rates] of rows) {
    const med = median(rates);
    process.stdout.write(
      `${label.padEnd(30)}${med.toFixed(0).padStart(15)}${Math.min(...rates).toFixed(0).padStart(10)}${Math.max(...rates).toFixed(0).padStart(10)}${(med >= 20000 ? 'met' : 'NOT met').padStart(10)}\n`,
    );
  }
  process.stdout.write(
    viaH2load === undefined
      ? 'gRPC ModelStreamInfer, h2load client: no result (is h2load installed?)\n'
      : `gRPC ModelStreamInfer, h2load client (${RUNS} calls in a row, mean): ${viaH2load.toFixed(0)} resp/s (bar: ${viaH2load >= 20000 ? 'met' : 'NOT met'})\n`,
  );
} finally {
  client.close();
  await nereid.proc.stop();
  rmSync(repo, { recursive: true, force: true });
}
