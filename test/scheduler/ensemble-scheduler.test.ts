/**
 * Ensembles served by a real Server, over real HTTP and gRPC: ONNX steps for
 * the data path and statistics, Python steps (real subprocesses) that can
 * only answer when they run at the same time, or that hold their request
 * until the test lets go.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { create } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import { Server } from '../../src/core/server.js';
import { NereidError } from '../../src/errors.js';
import { HttpFrontend } from '../../src/frontends/http/index.js';
import { ModelInferRequestSchema, type ModelInferResponse } from '../../src/gen/grpc_service_pb.js';
import { silentLogger } from '../../src/logger.js';
import { Metrics } from '../../src/metrics/index.js';
import { sample } from '../metrics/exposition.js';
import { typedView, type Tensor } from '../../src/tensor/tensor.js';
import type { ModelStatistics } from '../../src/types/api.js';
import { TempRepository, int32Tensor } from '../helpers/repository.js';
import { binaryRequest, call, int32Bytes, int32Values, json, splitBinaryReply } from '../frontends/http/helpers.js';
import { callError, startHarness, unary } from '../frontends/grpc/helpers.js';
import { PYTHON, fixtureDir, missingPythonModule } from '../backends/python/helpers.js';

const noNumpy = missingPythonModule('numpy');
const A = Array.from({ length: 16 }, (_, i) => i);
const B = Array.from({ length: 16 }, () => 3);

const INT16 = (name: string) => `{ name: "${name}" data_type: TYPE_INT32 dims: [ 16 ] }`;

/** A, B -> simple -> (A+B, A-B) -> simple -> (2A, 2B). */
const CHAIN = `name: "chain"
platform: "ensemble"
max_batch_size: 8
input [ ${INT16('A')}, ${INT16('B')} ]
output [ ${INT16('TWICE_A')}, ${INT16('TWICE_B')} ]
ensemble_scheduling {
  step [
    { model_name: "simple" model_version: -1
      input_map [ { key: "INPUT0" value: "A" }, { key: "INPUT1" value: "B" } ]
      output_map [ { key: "OUTPUT0" value: "sum" }, { key: "OUTPUT1" value: "diff" } ] },
    { model_name: "simple" model_version: 1
      input_map [ { key: "INPUT0" value: "sum" }, { key: "INPUT1" value: "diff" } ]
      output_map [ { key: "OUTPUT0" value: "TWICE_A" }, { key: "OUTPUT1" value: "TWICE_B" } ] }
  ]
}
`;

/** An ensemble folder holds its config and an empty version folder, nothing else. */
function ensemble(repo: TempRepository, name: string, config: string): void {
  repo.config(name, config);
  mkdirSync(path.join(repo.dir, name, '1'), { recursive: true });
}

function ints(t: Tensor): number[] {
  return Array.from(typedView(t) as Int32Array);
}

/** A python "meet" model (see its fixture): marks MARK in DIR, answers once WAIT_FOR exists there. */
function meetModel(repo: TempRepository, name: string, dir: string, mark: string, waitFor: string): void {
  repo.file(name, '1/model.py', readFileSync(path.join(fixtureDir('meet'), 'model.py')));
  repo.config(
    name,
    `name: "${name}"
backend: "python"
max_batch_size: 8
input [ ${INT16('INPUT0')} ]
output [ ${INT16('OUTPUT0')} ]
instance_group [ { kind: KIND_CPU count: 1 } ]
parameters [
  { key: "DIR" value: { string_value: "${dir}" } },
  { key: "MARK" value: { string_value: "${mark}" } },
  { key: "WAIT_FOR" value: { string_value: "${waitFor}" } }
]
`,
  );
}

async function startServer(
  repo: TempRepository,
  extra: Partial<ConstructorParameters<typeof Server>[0]> = {},
): Promise<Server> {
  const server = new Server({
    modelRepositories: [repo.dir],
    logger: silentLogger,
    backendConfig: { python: { 'python-executable': PYTHON } },
    ...extra,
  });
  await server.start();
  return server;
}

async function until(condition: () => boolean, what: string): Promise<void> {
  // A guard against a hung test, not a measurement.
  for (let i = 0; i < 6000 && !condition(); i++) await new Promise((r) => setTimeout(r, 10));
  assert.ok(condition(), `gave up waiting for ${what}`);
}

function stats(server: Server, model: string): ModelStatistics {
  return server.modelStatistics(model)[0]!;
}

test('HTTP: an ensemble of two ONNX steps has metadata, config, readiness, answers with ' +
  'its mapped outputs, and rejects bad input as its first step would', async (t) => {
  const repo = new TempRepository().addSub('simple');
  ensemble(repo, 'chain', CHAIN);
  t.after(() => repo.cleanup());
  const server = await startServer(repo);
  t.after(() => server.stop());
  const http = new HttpFrontend(server, { port: 0, address: '127.0.0.1', maxInputSize: 1 << 20, logger: silentLogger });
  const { port } = await http.start();
  t.after(() => http.stop());

  const meta = json(await call(port, 'GET', '/v2/models/chain')) as Record<string, unknown>;
  assert.deepEqual(meta, {
    name: 'chain',
    versions: ['1'],
    platform: 'ensemble',
    inputs: [
      { name: 'A', datatype: 'INT32', shape: [-1, 16] },
      { name: 'B', datatype: 'INT32', shape: [-1, 16] },
    ],
    outputs: [
      { name: 'TWICE_A', datatype: 'INT32', shape: [-1, 16] },
      { name: 'TWICE_B', datatype: 'INT32', shape: [-1, 16] },
    ],
  });
  assert.equal((await call(port, 'GET', '/v2/models/chain/ready')).status, 200);
  const config = json(await call(port, 'GET', '/v2/models/chain/config')) as {
    platform: string;
    ensemble_scheduling: {
      step: Array<{ model_name: string; model_version: string; input_map: Record<string, string> }>;
    };
  };
  assert.equal(config.platform, 'ensemble');
  assert.deepEqual(
    config.ensemble_scheduling.step.map((s) => [s.model_name, String(s.model_version), s.input_map]),
    [
      ['simple', '-1', { INPUT0: 'A', INPUT1: 'B' }],
      ['simple', '1', { INPUT0: 'sum', INPUT1: 'diff' }],
    ],
  );

  const { body, headers } = binaryRequest(
    {
      id: 'e-1',
      inputs: [
        { name: 'A', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
        { name: 'B', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
      ],
      outputs: [{ name: 'TWICE_B', parameters: { binary_data: true } }],
    },
    [int32Bytes(A), int32Bytes(B)],
  );
  const reply = await call(port, 'POST', '/v2/models/chain/infer', { body, headers });
  assert.equal(reply.status, 200, reply.body.toString());
  const { header, binary } = splitBinaryReply(reply);
  assert.equal(header.model_name, 'chain');
  assert.equal(header.id, 'e-1');
  assert.deepEqual(header.outputs.map((o: { name: string }) => o.name), ['TWICE_B']);
  assert.deepEqual(int32Values(binary), B.map((x) => 2 * x));

  // The ensemble's own inputs are checked against its config, with the first step's wording and the ensemble's names.
  const wrongShape = (model: string, input0: string, input1: string) =>
    JSON.stringify({
      inputs: [
        { name: input0, datatype: 'INT32', shape: [1, 15], data: A.slice(0, 15) },
        { name: input1, datatype: 'INT32', shape: [1, 16], data: B },
      ],
    });
  const ensembleReply = await call(port, 'POST', '/v2/models/chain/infer', { body: wrongShape('chain', 'A', 'B') });
  const stepReply = await call(port, 'POST', '/v2/models/simple/infer', {
    body: wrongShape('simple', 'INPUT0', 'INPUT1'),
  });
  assert.equal(ensembleReply.status, 400);
  assert.equal(ensembleReply.status, stepReply.status);
  const ensembleError = (json(ensembleReply) as { error: string }).error;
  const stepError = (json(stepReply) as { error: string }).error;
  assert.match(ensembleError, /'chain'/);
  assert.equal(ensembleError, stepError.replaceAll("'INPUT0'", "'A'").replaceAll("'simple'", "'chain'"));
  const unknown = await call(port, 'POST', '/v2/models/chain/infer', {
    body: JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: A }] }),
  });
  assert.equal(unknown.status, 400);
  assert.match((json(unknown) as { error: string }).error, /unexpected inference input 'INPUT0' for model 'chain'/);
});

test('gRPC: statistics of an ensemble are its own requests with its steps ' +
  'compute time summed; its steps count in their own entries', async (t) => {
  const repo = new TempRepository().addSub('simple');
  ensemble(repo, 'chain', CHAIN);
  t.after(() => repo.cleanup());
  const server = await startServer(repo);
  t.after(() => server.stop());
  const h = await startHarness(server);
  t.after(() => h.close());

  const request = (batch: number) =>
    create(ModelInferRequestSchema, {
      modelName: 'chain',
      inputs: [
        { name: 'A', datatype: 'INT32', shape: [BigInt(batch), 16n] },
        { name: 'B', datatype: 'INT32', shape: [BigInt(batch), 16n] },
      ],
      rawInputContents: [int32Bytes(Array(batch).fill(A).flat()), int32Bytes(Array(batch).fill(B).flat())],
    });
  const batches = [1, 1, 2, 3, 1];
  for (const batch of batches) {
    const res = await unary<ModelInferResponse>(h.client, 'ModelInfer', request(batch));
    assert.equal(res.modelName, 'chain');
    assert.deepEqual(int32Values(res.rawOutputContents[0]!), Array(batch).fill(A.map((x) => 2 * x)).flat());
  }
  const bad = await callError(
    unary(
      h.client,
      'ModelInfer',
      create(ModelInferRequestSchema, {
        modelName: 'chain',
        inputs: [{ name: 'A', datatype: 'FP32', shape: [1n, 16n] }],
        rawInputContents: [new Uint8Array(64)],
      }),
    ),
  );
  assert.equal(bad.code, grpc.status.INVALID_ARGUMENT);
  assert.match(bad.details, /'chain'/);

  const ens = stats(server, 'chain');
  const step = stats(server, 'simple');
  const n = batches.length;
  const samples = batches.reduce((x, y) => x + y, 0);
  assert.equal(ens.inference_stats.success.count, n);
  assert.equal(
    ens.inference_stats.fail.count,
    0,
    'a request refused before it reached the ensemble is no ensemble failure',
  );
  assert.equal(ens.inference_count, samples);
  assert.equal(ens.execution_count, n);
  assert.deepEqual(
    ens.batch_stats.map((b) => [b.batch_size, b.compute_infer.count]),
    [
      [1, 3],
      [2, 1],
      [3, 1],
    ],
  );
  // Each ensemble request ran two steps of `simple`, and only ensemble requests reached it.
  assert.equal(step.inference_stats.success.count, 2 * n);
  assert.equal(step.inference_count, 2 * samples);
  for (const stage of ['compute_input', 'compute_infer', 'compute_output'] as const) {
    assert.equal(ens.inference_stats[stage].count, n);
    assert.equal(
      ens.inference_stats[stage].ns,
      step.inference_stats[stage].ns,
      `${stage}: the ensemble's is the sum of its steps'`,
    );
  }
  assert.ok(ens.inference_stats.success.ns >= ens.inference_stats.compute_infer.ns);

  const grpcStats = await unary<{
    modelStats: Array<{ name: string; inferenceCount: bigint; executionCount: bigint }>;
  }>(h.client, 'ModelStatistics', { name: 'chain' });
  assert.equal(grpcStats.modelStats[0]!.name, 'chain');
  assert.equal(grpcStats.modelStats[0]!.inferenceCount, BigInt(samples));
  assert.equal(grpcStats.modelStats[0]!.executionCount, BigInt(n));
});

test('independent steps run at the same time, and a step starts as ' +
  'soon as its own inputs exist', { skip: noNumpy }, async (t) => {
  // IN -> meet_b (waits for c's mark) ------------------------------> Y
  // IN -> simple (doubles) -> X -> meet_c (waits for b's mark) -> Z
  // (Y, Z) -> simple -> OUT = Y + Z
  // meet_b and meet_c can only answer while both are running, and meet_c
  // can only start once the doubling step is done, while meet_b still runs:
  // run one after the other, or level by level, and both give up.
  const marks = mkdtempSync(path.join(tmpdir(), 'nereid-meet-'));
  t.after(() => rmSync(marks, { recursive: true, force: true }));
  const repo = new TempRepository().addSub('simple');
  meetModel(repo, 'meet_b', marks, 'b', 'c');
  meetModel(repo, 'meet_c', marks, 'c', 'b');
  ensemble(
    repo,
    'dag',
    `name: "dag"
platform: "ensemble"
max_batch_size: 8
input [ ${INT16('IN')} ]
output [ ${INT16('OUT')} ]
ensemble_scheduling {
  step [
    { model_name: "simple" model_version: -1 input_map [ { key: "INPUT0" value: "Y" }, { key: "INPUT1" value: "Z" } ]
      output_map { key: "OUTPUT0" value: "OUT" } },
    { model_name: "meet_c" model_version: -1 input_map { key: "INPUT0" value: "X" }
      output_map { key: "OUTPUT0" value: "Z" } },
    { model_name: "simple" model_version: -1 input_map [ { key: "INPUT0" value: "IN" }, { key: "INPUT1" value: "IN" }
      ] output_map { key: "OUTPUT0" value: "X" } },
    { model_name: "meet_b" model_version: -1 input_map { key: "INPUT0" value: "IN" }
      output_map { key: "OUTPUT0" value: "Y" } }
  ]
}
`,
  );
  t.after(() => repo.cleanup());
  const server = await startServer(repo);
  t.after(() => server.stop());
  const http = new HttpFrontend(server, { port: 0, address: '127.0.0.1', maxInputSize: 1 << 20, logger: silentLogger });
  const { port } = await http.start();
  t.after(() => http.stop());

  const reply = await call(port, 'POST', '/v2/models/dag/infer', {
    body: JSON.stringify({ inputs: [{ name: 'IN', datatype: 'INT32', shape: [1, 16], data: A }] }),
  });
  assert.equal(reply.status, 200, reply.body.toString());
  const out = json(reply) as { outputs: Array<{ name: string; data: number[] }> };
  assert.deepEqual(out.outputs[0]!.data, A.map((x) => 3 * x));
  assert.ok(existsSync(path.join(marks, 'b')) && existsSync(path.join(marks, 'c')));
});

test('a failing step fails the ensemble request with an error naming the ' +
  'step model, counted once per model', { skip: noNumpy }, async (t) => {
  const repo = new TempRepository().addSub('simple');
  repo.file('refuses', '1/model.py', readFileSync(path.join(fixtureDir('error_response'), 'model.py')));
  repo.config(
    'refuses',
    `name: "refuses"\nbackend: "python"\nmax_batch_size: 8\ninput ` +
    `[ ${INT16('INPUT0')} ]\noutput [ ${INT16('OUTPUT0')} ]\n`,
  );
  ensemble(
    repo,
    'pipeline',
    `name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ ${INT16('IN')} ]
output [ ${INT16('OUT')} ]
ensemble_scheduling {
  step [
    { model_name: "simple" model_version: -1 input_map [ { key: "INPUT0" value: "IN" }, { key: "INPUT1" value: "IN" }
      ] output_map { key: "OUTPUT0" value: "X" } },
    { model_name: "refuses" model_version: -1 input_map { key: "INPUT0" value: "X" }
      output_map { key: "OUTPUT0" value: "OUT" } }
  ]
}
`,
  );
  t.after(() => repo.cleanup());
  const server = await startServer(repo);
  t.after(() => server.stop());
  const metrics = new Metrics({ allowCpuMetrics: false, allowGpuMetrics: false });
  for (const v of server.readyVersions())
    metrics.attach(v.stats, { pendingCount: () => 0, metricTags: {}, loadDurationSecs: 0 });
  const h = await startHarness(server);
  t.after(() => h.close());

  const err = await callError(
    unary(
      h.client,
      'ModelInfer',
      create(ModelInferRequestSchema, {
        modelName: 'pipeline',
        inputs: [{ name: 'IN', datatype: 'INT32', shape: [1n, 16n] }],
        rawInputContents: [int32Bytes(A)],
      }),
    ),
  );
  assert.equal(err.code, grpc.status.INVALID_ARGUMENT, err.details);
  assert.match(err.details, /refuses/);
  assert.match(err.details, /the model refuses this input/);
  assert.equal(stats(server, 'pipeline').inference_stats.fail.count, 1);
  assert.equal(stats(server, 'pipeline').inference_stats.success.count, 0);
  assert.equal(stats(server, 'pipeline').execution_count, 0);
  assert.equal(stats(server, 'refuses').inference_stats.fail.count, 1);
  assert.equal(stats(server, 'simple').inference_stats.success.count, 1);
  // Prometheus reads the same numbers: one failure for the ensemble (Triton's OTHER) and one for the step's model.
  const text = await metrics.render();
  assert.equal(sample(text, 'nv_inference_request_failure', { model: 'pipeline', version: '1', reason: 'OTHER' }), 1);
  assert.equal(sample(text, 'nv_inference_request_failure', { model: 'pipeline', version: '1', reason: 'BACKEND' }), 0);
  assert.equal(sample(text, 'nv_inference_request_failure', { model: 'refuses', version: '1', reason: 'BACKEND' }), 1);
  assert.equal(sample(text, 'nv_inference_request_success', { model: 'pipeline', version: '1' }), 0);
  assert.equal(sample(text, 'nv_inference_request_success', { model: 'simple', version: '1' }), 1);
  // The server keeps serving.
  const ok = await server.infer({ model: 'simple', inputs: [int32Tensor('INPUT0', A), int32Tensor('INPUT1', B)] });
  assert.equal(ok.outputs.length, 2);
});

test('cancelling an ensemble request cancels its steps that wait in ' +
  'a queue and starts no new ones', { skip: noNumpy }, async (t) => {
  // Two steps on one single-instance model: the first holds the instance
  // until the test releases it, the second waits in that model's queue.
  const marks = mkdtempSync(path.join(tmpdir(), 'nereid-gate-'));
  t.after(() => rmSync(marks, { recursive: true, force: true }));
  const repo = new TempRepository().addSub('simple');
  meetModel(repo, 'gate', marks, 'started', 'release');
  ensemble(
    repo,
    'gated',
    `name: "gated"
platform: "ensemble"
max_batch_size: 8
input [ ${INT16('IN')} ]
output [ ${INT16('OUT')} ]
ensemble_scheduling {
  step [
    { model_name: "gate" model_version: -1 input_map { key: "INPUT0" value: "IN" }
      output_map { key: "OUTPUT0" value: "X" } },
    { model_name: "gate" model_version: -1 input_map { key: "INPUT0" value: "IN" }
      output_map { key: "OUTPUT0" value: "Y" } },
    { model_name: "simple" model_version: -1 input_map [ { key: "INPUT0" value: "X" }, { key: "INPUT1" value: "Y" } ]
      output_map { key: "OUTPUT0" value: "OUT" } }
  ]
}
`,
  );
  t.after(() => repo.cleanup());
  const server = await startServer(repo);
  t.after(() => server.stop());

  const controller = new AbortController();
  const pending = server.infer({ model: 'gated', inputs: [int32Tensor('IN', A)], signal: controller.signal });
  await until(() => existsSync(path.join(marks, 'started')), 'the first gate step to start');
  controller.abort();
  await assert.rejects(pending, (err: unknown) => err instanceof NereidError && err.code === 'NRD_CANCELLED');
  writeFileSync(path.join(marks, 'release'), '');
  await until(() => stats(server, 'gate').execution_count === 1, 'the running gate step to finish');
  // Both steps of the cancelled request count as cancelled in the gate's entry (the running one could not be stopped).
  assert.equal(stats(server, 'gate').inference_stats.fail.count, 2);
  assert.equal(stats(server, 'simple').execution_count, 0, 'the step after the cancelled ones never started');
  const ens = stats(server, 'gated');
  assert.equal(ens.inference_stats.fail.count, 1);
  assert.equal(ens.inference_stats.success.count, 0);
  // The ensemble serves the next request.
  const r = await server.infer({ model: 'gated', inputs: [int32Tensor('IN', A)] });
  assert.deepEqual(ints(r.outputs[0]!), A.map((x) => 2 * x));
  // Two executions for this request and one for the cancelled request: its queued step never ran.
  assert.equal(stats(server, 'gate').execution_count, 3);
  assert.equal(stats(server, 'gated').inference_stats.success.count, 1);
});

test('optional ensemble inputs reach the steps only when given', { skip: noNumpy }, async (t) => {
  const repo = new TempRepository();
  repo.file('echo', '1/model.py', readFileSync(path.join(fixtureDir('identity'), 'model.py')));
  repo.config(
    'echo',
    `name: "echo"
backend: "python"
max_batch_size: 8
input [ ${INT16('INPUT0')}, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] optional: true } ]
output [ ${INT16('OUTPUT0')}, ${INT16('OUTPUT1')} ]
`,
  );
  ensemble(
    repo,
    'maybe',
    `name: "maybe"
platform: "ensemble"
max_batch_size: 8
input [ ${INT16('A')}, { name: "B" data_type: TYPE_INT32 dims: [ 16 ] optional: true } ]
output [ ${INT16('OUT')} ]
ensemble_scheduling {
  step [
    { model_name: "echo" model_version: -1 input_map [ { key: "INPUT0" value: "A" }, { key: "INPUT1" value: "B" } ]
      output_map { key: "OUTPUT0" value: "OUT" } }
  ]
}
`,
  );
  ensemble(
    repo,
    'both',
    `name: "both"
platform: "ensemble"
max_batch_size: 8
input [ ${INT16('A')}, { name: "B" data_type: TYPE_INT32 dims: [ 16 ] optional: true } ]
output [ ${INT16('OUT_A')}, ${INT16('OUT_B')} ]
ensemble_scheduling {
  step [
    { model_name: "echo" model_version: -1 input_map [ { key: "INPUT0" value: "A" }, { key: "INPUT1" value: "B" } ]
      output_map [ { key: "OUTPUT0" value: "OUT_A" }, { key: "OUTPUT1" value: "OUT_B" } ] }
  ]
}
`,
  );
  t.after(() => repo.cleanup());
  const server = await startServer(repo);
  t.after(() => server.stop());
  const given = await server.infer({ model: 'both', inputs: [int32Tensor('A', A), int32Tensor('B', B)] });
  assert.deepEqual(given.outputs.map(ints), [A, B], 'B reached the step');
  const without = await server.infer({ model: 'maybe', inputs: [int32Tensor('A', A)] });
  assert.deepEqual(ints(without.outputs[0]!), A);
  const withB = await server.infer({ model: 'maybe', inputs: [int32Tensor('A', A), int32Tensor('B', B)] });
  assert.deepEqual(ints(withB.outputs[0]!), A);
  await assert.rejects(
    server.infer({ model: 'maybe', inputs: [int32Tensor('B', B)] }),
    (err: unknown) =>
      err instanceof NereidError &&
      /missing required input\(s\) \['A'\]/.test(err.message) &&
      /'maybe'/.test(err.message),
  );
});

test("an ensemble's own max_batch_size and dims: a non-batching " +
  "ensemble over a batching step, and the batch limit", async (t) => {
  const repo = new TempRepository().addSub('simple');
  ensemble(
    repo,
    'flat',
    `name: "flat"
platform: "ensemble"
max_batch_size: 0
input [ { name: "A" data_type: TYPE_INT32 dims: [ -1, 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ -1, 16 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ -1, 16 ] } ]
ensemble_scheduling {
  step [
    { model_name: "simple" model_version: -1 input_map [ { key: "INPUT0" value: "A" }, { key: "INPUT1" value: "B" } ]
      output_map { key: "OUTPUT0" value: "SUM" } }
  ]
}
`,
  );
  ensemble(repo, 'chain', CHAIN);
  t.after(() => repo.cleanup());
  const server = await startServer(repo);
  t.after(() => server.stop());
  assert.deepEqual(server.modelMetadata('flat').inputs[0]!.shape, [-1, 16]);
  const r = await server.infer({
    model: 'flat',
    inputs: [int32Tensor('A', [...A, ...A], 2), int32Tensor('B', [...B, ...B], 2)],
  });
  assert.deepEqual(r.outputs[0]!.shape, [2, 16]);
  assert.deepEqual(ints(r.outputs[0]!), [...A, ...A].map((x) => x + 3));
  const nine = (name: string) => int32Tensor(name, Array(9).fill(A).flat(), 9);
  await assert.rejects(
    server.infer({ model: 'chain', inputs: [nine('A'), nine('B')] }),
    (err: unknown) => err instanceof NereidError && /batch-size must be <= 8 for 'chain'/.test(err.message),
  );
});

test('an ensemble request in flight when the server stops finishes its remaining steps', async (t) => {
  const repo = new TempRepository().addSub('simple');
  ensemble(repo, 'chain', CHAIN);
  t.after(() => repo.cleanup());
  const server = await startServer(repo);
  const pending = server.infer({ model: 'chain', inputs: [int32Tensor('A', A), int32Tensor('B', B)] });
  const stopped = server.stop(); // the second step starts only after this
  const r = await pending;
  assert.deepEqual(ints(r.outputs[0]!), A.map((x) => 2 * x));
  await stopped;
  await assert.rejects(
    server.infer({ model: 'chain', inputs: [int32Tensor('A', A), int32Tensor('B', B)] }),
    NereidError,
  );
});
