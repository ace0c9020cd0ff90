/**
 * `node dist/bench/cache.js` (section `cache` of bench/run.ts): what a
 * response-cache hit costs over HTTP. One Nereid process with
 * `--cache-config=local,size=16MiB` serves Triton's "simple" add/sub model
 * twice, with and without `response_cache { enable: true }`; wrk at
 * concurrency 1 measures the health endpoint (the server's floor), the
 * cached model (every request after the first is a hit) and the uncached
 * one. The bar: a hit's p50 within 30 µs of the health endpoint's. For
 * scale, the HTTP frontend alone in front of a server that answers at once
 * (no model, no cache; in this process) shows the floor of any infer call.
 *
 * Environment: BENCH_SECONDS (per point, default 3).
 */
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { create } from '@bufbuild/protobuf';
import type { ServerApi } from '../src/core/server-api.js';
import type { InferResponse } from '../src/types/api.js';
import { HttpFrontend } from '../src/frontends/http/server.js';
import { ModelConfigSchema } from '../src/gen/model_config_pb.js';
import { silentLogger } from '../src/logger.js';
import { buildAddSubModel } from '../test/helpers/onnx-builder.js';
import { startNereid } from './processes.js';
import { type HttpBody, runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);

function config(name: string, cached: boolean): string {
  return `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]
  } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
${cached ? 'response_cache { enable: true }' : ''}
`;
}

/** The binary tensor extension: a small JSON header, the raw input bytes, outputs asked back as binary. */
function binaryInferBody(): HttpBody {
  const raw = Buffer.from(new Int32Array(Array.from({ length: 16 }, (_, i) => i)).buffer);
  const header = Buffer.from(
    JSON.stringify({
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
      ],
      outputs: [
        { name: 'OUTPUT0', parameters: { binary_data: true } },
        { name: 'OUTPUT1', parameters: { binary_data: true } },
      ],
    }),
  );
  return {
    body: Buffer.concat([header, raw, raw]),
    headers: { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': String(header.length) },
  };
}

function inferBody(): HttpBody {
  const data = Array.from({ length: 16 }, (_, i) => i);
  const body = Buffer.from(
    JSON.stringify({
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data },
      ],
    }),
  );
  return { body, headers: { 'Content-Type': 'application/json' } };
}

const repo = mkdtempSync(path.join(tmpdir(), 'nereid-bench-cache-'));
const onnx = buildAddSubModel('INT32', 16).toBytes();
for (const [name, cached] of [
  ['simple_cached', true],
  ['simple_uncached', false],
] as const) {
  mkdirSync(path.join(repo, name, '1'), { recursive: true });
  writeFileSync(path.join(repo, name, '1', 'model.onnx'), onnx);
  writeFileSync(path.join(repo, name, 'config.pbtxt'), config(name, cached));
}

/** The HTTP frontend in front of a ServerApi that answers every infer at once with the same response. */
async function startFloor(): Promise<{ port: number; stop(): Promise<void> }> {
  const response: InferResponse = {
    modelName: 'simple_cached',
    modelVersion: '1',
    id: '',
    outputs: ['OUTPUT0', 'OUTPUT1'].map((name) => ({
      name,
      datatype: 'INT32' as const,
      shape: [1, 16],
      data: new Uint8Array(64),
    })),
  };
  const config = create(ModelConfigSchema, { name: 'simple_cached' });
  const api = {
    controlMode: 'none',
    isLive: () => true,
    isReady: () => true,
    modelConfig: () => config,
    infer: () => Promise.resolve(response),
  } as unknown as ServerApi;
  const frontend = new HttpFrontend(api, {
    port: 0,
    address: '127.0.0.1',
    maxInputSize: 1 << 20,
    logger: silentLogger,
  });
  const { port } = await frontend.start();
  return { port, stop: () => frontend.stop() };
}

const nereid = await startNereid(repo, [`--cache-config=local,size=${16 * 1024 * 1024}`]);
const floor = await startFloor();
try {
  const base = `http://127.0.0.1:${nereid.http}`;
  const health = await runWrk(
    `${base}/v2/health/ready`,
    { body: Buffer.alloc(0), headers: {}, method: 'GET' },
    1,
    SECONDS,
  );
  await runWrk(`${base}/v2/models/simple_cached/infer`, binaryInferBody(), 1, 1); // warm-up
  const hit = await runWrk(`${base}/v2/models/simple_cached/infer`, binaryInferBody(), 1, SECONDS);
  const hitJson = await runWrk(`${base}/v2/models/simple_cached/infer`, inferBody(), 1, SECONDS);
  const miss = await runWrk(`${base}/v2/models/simple_uncached/infer`, binaryInferBody(), 1, SECONDS);
  const bare = await runWrk(
    `http://127.0.0.1:${floor.port}/v2/models/simple_cached/infer`,
    binaryInferBody(),
    1,
    SECONDS,
  );
  const stats = (await (await fetch(`${base}/v2/models/simple_cached/stats`)).json()) as {
    model_stats: Array<{ execution_count: number; inference_stats: { cache_hit: { count: number } } }>;
  };
  const s = stats.model_stats[0]!;
  const rows = [
    ['GET /v2/health/ready', health],
    ['infer (binary), cache hit', hit],
    ['infer (JSON), cache hit', hitJson],
    ['infer (binary), no cache', miss],
    ['infer (binary), frontend floor*', bare],
  ] as const;
  process.stdout.write(`\nResponse cache over HTTP, wrk -t1 -c1, ${SECONDS}s per point\n`);
  process.stdout.write(
    `${'endpoint'.padEnd(32)}${'req/s'.padStart(10)}${'p50 µs'.padStart(10)}` +
    `${'p99 µs'.padStart(10)}${'errors'.padStart(8)}\n`,
  );
  for (const [label, r] of rows) {
    process.stdout.write(
      `${label.padEnd(32)}${r.requestsPerSec.toFixed(0).padStart(10)}${r.p50us.toFixed(0).padStart(10)}` +
      `${r.p99us.toFixed(0).padStart(10)}${String(r.errors + r.non2xx).padStart(8)}\n`,
    );
  }
  const delta = hit.p50us - health.p50us;
  process.stdout.write(
    `cache hit (binary) p50 - health p50 = ${delta.toFixed(0)} µs ` +
    `(bar: within 30 µs: ${delta <= 30 ? 'met' : 'NOT met'}); ` +
      `${s.inference_stats.cache_hit.count} hits, ${s.execution_count} execution(s) of the cached model\n` +
      `cache hit p50 - frontend floor p50 = ${(hit.p50us - bare.p50us).toFixed(0)} µs\n` +
      '* the HTTP frontend before a server that answers at once, in the benchmark process\n',
  );
} finally {
  await floor.stop();
  await nereid.proc.stop();
  rmSync(repo, { recursive: true, force: true });
}
